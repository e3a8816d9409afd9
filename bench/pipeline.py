"""Pipeline benchmark: the matrix and the trace audit on Spark local[2] and local[1], against
the same audit in a single process, on one synthetic results lake.

What it measures (same lake, same process, same checker code):
- the lake: `reports.synthetic` writes N runs x C channels x F frames (default 100 x 500 x 202
  ≈ 10 M frames, 50 000 channels) and T tests per run (default 10 000 → 1 M test results), in
  the layout and schema of `conformance.results.records`; violations are injected so every plan's
  findings are checked against the known count before its time is reported;
- single process: `reports.audit.lake.audit_lake` (pyarrow reads each run, the conformance
  model judges each channel), and, interleaved with it in CPU seconds, the plain hand-written
  checkers it replaced (`bench/legacy_audit.py` loads them from git):
  `model_x_legacy_audit_per_core` = their CPU time / the model's (goal >= 0.8); DuckDB window
  functions for the tag check if DuckDB is installed;
- Spark, once per master (local[2], then local[1]; JVM start and Python-worker warm-up are
  excluded, as they are paid once per report): the matrix (rule verdicts + matrix + run scores,
  collected), the audit with the shuffle-free per-run plan (`audit_by_run`, mapInArrow), and
  with `--all-plans` also applyInArrow per channel and the SQL-window tag check.
- linearity: the same audit on Spark local[2] over a lake 10x as large (`--scale-to`, default
  100 M frames: ten times the channels), `linearity_large_x_small` = time per frame at the large
  size / time per frame at the small one (1.0: linear);
- the one-run report as a user runs it: `python -m reports.cli LAKE --out DIR` in a fresh process
  (JVM start included) on a one-run lake of a real run's size (285 tests, ~9 000 frames), best
  of `--report-repeat`.
- the recording relay: `bench/relay.py` (pika publish+consume direct to RabbitMQ and through the
  relay in its own process), `relay_x_direct` = direct time / relayed time.
Lakes are written once into `--cache` (default build/bench-lakes/, keyed by shape and by the
generator's source) and reused by later runs: the 100 M-frame lake takes minutes to write.
Printed: a table, the goals (met or not), then one JSON line: `audit_spark_x_single` =
single-process time / Spark local[2] time (>1: Spark is faster), `scaling_local2_x_local1` =
local[1] / local[2] audit time, rows/s, the matrix times, the linearity and the one-run report.
`--quick` runs tiny lakes (smoke test of the script).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":  # `python bench/pipeline.py`: import the project, not bench/
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]
    sys.path.insert(0, str(_ROOT))

from bench.legacy_audit import load as load_legacy_audit  # noqa: E402
from reports.audit.lake import audit_lake  # noqa: E402
from reports.synthetic import LakeShape, LakeStats, write_lake  # noqa: E402

MASTERS = ("local[2]", "local[1]")
QUICK = LakeShape(runs=4, channels_per_run=20, frames_per_channel=50, tests_per_run=400, violation_rate=0.2)
ONE_RUN = LakeShape(runs=1, channels_per_run=260, frames_per_channel=35, tests_per_run=285, violation_rate=0.0,
                    seed=3)  # the size of one real run of the suite
DEFAULT_CACHE = _ROOT / "build" / "bench-lakes"
# The goals: (JSON key, "min" or "max", bound).
GOALS = (("model_x_legacy_audit_per_core", "min", 0.8), ("scaling_local2_x_local1", "min", 1.6), ("linearity_large_x_small", "max", 1.1),
         ("one_run_report_s", "max", 15.0), ("relay_x_direct", "min", 0.7))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--frames", type=float, default=10e6, help="about this many frames (default 10e6)")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--channels", type=int, default=50_000, help="channels in total (default 50 000)")
    p.add_argument("--tests", type=float, default=1e6, help="test results in total (default 1e6)")
    p.add_argument("--scale-to", type=float, default=100e6,
                   help="also audit a lake of about this many frames on local[2] (default 100e6; 0: skip)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                   help="directory of generated lakes, reused across runs (default build/bench-lakes)")
    p.add_argument("--no-cache", action="store_true", help="write the lakes into a temp dir, removed afterwards")
    p.add_argument("--report-repeat", type=int, default=3, help="one-run report: best of N cold runs")
    p.add_argument("--relay-broker", default="127.0.0.1:5672", metavar="HOST:PORT",
                   help="RabbitMQ for the relay case (bench/relay.py; skipped, and said so, when it does not answer)")
    p.add_argument("--relay-messages", type=int, default=20_000, help="messages per relay round (default 20 000)")
    p.add_argument("--all-plans", action="store_true", help="also time applyInArrow and the SQL tag check")
    p.add_argument("--repeat", type=int, default=1, help="best of N timings per case")
    p.add_argument("--quick", action="store_true", help="tiny lake, one repeat: a smoke run")
    return p.parse_args(argv)


def shape_of(args: argparse.Namespace) -> LakeShape:
    if args.quick:
        return QUICK
    per_run = max(1, args.channels // args.runs)
    return LakeShape(runs=args.runs, channels_per_run=per_run,
                     frames_per_channel=max(12, round(args.frames / (args.runs * per_run))),
                     tests_per_run=max(per_run, round(args.tests / args.runs)), violation_rate=0.004)


def large_shape_of(args: argparse.Namespace, small: LakeShape) -> LakeShape | None:
    """The small lake with more channels per run (frames per channel unchanged), or None."""
    small_frames = small.runs * small.channels_per_run * small.frames_per_channel
    target = 10 * small_frames if args.quick else args.scale_to
    if not target or target <= small_frames:
        return None
    factor = round(target / small_frames)
    channels = small.channels_per_run * factor
    return dataclasses.replace(small, channels_per_run=channels, tests_per_run=max(channels, small.tests_per_run))


def lake(cache: Path, shape: LakeShape) -> tuple[Path, LakeStats]:
    """The lake of `shape` under `cache`, written once (a stamp marks it complete)."""
    source = b"".join(Path(m.__file__).read_bytes() for m in (sys.modules["reports.synthetic"],) if m.__file__)
    key = hashlib.sha256(repr(shape).encode() + source).hexdigest()[:12]
    root = cache / f"lake-{shape.runs}x{shape.channels_per_run}x{shape.frames_per_channel}-{key}"
    stamp = root / "lake.json"
    if stamp.is_file():
        saved = json.loads(stamp.read_text())
        return root, LakeStats(**{**saved, "expected": Counter(saved["expected"])})
    shutil.rmtree(root, ignore_errors=True)
    started = time.perf_counter()
    stats = write_lake(root, shape)
    stamp.write_text(json.dumps({**vars(stats), "expected": dict(stats.expected)}))
    print(f"lake written: {stats.frames} frames in {time.perf_counter() - started:.1f} s ({root})", flush=True)
    return root, stats


def best(repeat: int, action: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(max(1, repeat)):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return min(times), result


def check(name: str, kinds: Counter[str], stats: LakeStats) -> None:
    if kinds != stats.expected:
        raise SystemExit(f"{name}: findings {dict(kinds)} differ from the injected {dict(stats.expected)}")


def best_cpu(repeat: int, action: Callable[[], Any]) -> tuple[float, Any]:
    """Like `best`, in CPU seconds of this process (per-core throughput, robust to a busy machine)."""
    times, result = [], None
    for _ in range(max(1, repeat)):
        started = time.process_time()
        result = action()
        times.append(time.process_time() - started)
    return min(times), result


def single_process(root: Path, stats: LakeStats, repeat: int) -> dict[str, float]:
    seconds, table = best(repeat, lambda: audit_lake(root))
    check("single process", Counter(table["kind"].to_pylist()), stats)
    result = {"single_audit_s": seconds}
    # The model-based audit against the plain checkers it replaced, interleaved, in CPU seconds.
    legacy = load_legacy_audit()
    model_cpu, legacy_cpu = [], []
    for _ in range(max(2, repeat)):
        model_cpu.append(best_cpu(1, lambda: audit_lake(root))[0])
        seconds, table = best_cpu(1, lambda: legacy.audit_lake(root))
        legacy_cpu.append(seconds)
    check("legacy checkers", Counter(table["kind"].to_pylist()), stats)
    result["model_audit_cpu_s"], result["legacy_audit_cpu_s"] = min(model_cpu), min(legacy_cpu)
    try:
        import duckdb  # type: ignore[import-not-found]
    except ImportError:
        return result
    query = _duckdb_tag_check(root)
    result["duckdb_tag_check_s"], found = best(repeat, lambda: duckdb.sql(query).fetchall())
    if len(found) != stats.expected["tag-sequence"]:
        raise SystemExit(f"duckdb: {len(found)} tag findings, expected {stats.expected['tag-sequence']}")
    return result


def _duckdb_tag_check(root: Path) -> str:
    keys = "run_id, test_id, connection, channel"
    return f"""
        WITH events AS (
          SELECT {keys}, seq, method, direction, delivery_tag,
                 sum(CASE WHEN direction = 'out' AND method = 'channel.open' THEN 1 ELSE 0 END)
                   OVER (PARTITION BY {keys} ORDER BY seq) AS lifetime
          FROM read_parquet('{root}/frames/*/*.parquet')
          WHERE method IN ('channel.open', 'basic.deliver', 'basic.get-ok', 'channel.close', 'channel.close-ok')),
        lifetimes AS (
          SELECT *, sum(CASE WHEN direction = 'in' AND method IN ('channel.close', 'channel.close-ok') THEN 1 ELSE 0
                        END) OVER (PARTITION BY {keys}, lifetime ORDER BY seq) AS closed
          FROM events),
        deliveries AS (
          SELECT *, coalesce(lag(delivery_tag) OVER (PARTITION BY {keys}, lifetime ORDER BY seq) + 1, 1) AS expected
          FROM lifetimes WHERE direction = 'in' AND method IN ('basic.deliver', 'basic.get-ok') AND closed = 0)
        SELECT * FROM deliveries WHERE delivery_tag != expected"""


def spark_cases(master: str, root: Path, stats: LakeStats, args: argparse.Namespace,
                large: tuple[Path, LakeStats] | None = None) -> dict[str, float]:
    from pyspark.sql import functions as F

    from reports import jobs
    from reports.audit.plan import audit_by_run, audit_grouped, tag_sequence_findings
    from reports.spark import read_results, spark_session

    spark = spark_session(master, app_name="amqp-conformance bench", conf={"spark.driver.memory": "4g"})
    try:
        runs = sorted(p.name.split("=", 1)[1] for p in (root / "frames").iterdir())
        results: dict[str, float] = {}

        def matrix(only: list[str] | None = None) -> int:
            tests, run_rows = read_results(spark, root, "tests"), read_results(spark, root, "runs")
            if only is not None:
                tests, run_rows = tests.where(F.col("run").isin(only)), run_rows.where(F.col("run").isin(only))
            verdicts = jobs.rule_verdicts(tests, run_rows, jobs.catalogue_frame(spark)).cache()
            cells = len(jobs.matrix(verdicts).collect()) + len(jobs.run_scores(verdicts).collect())
            verdicts.unpersist()
            return cells

        if not args.quick:  # warm-up on a few runs: JVM JIT and query compilation, one Python worker per core
            matrix(runs[:4])
            audit_by_run(spark, str(root), only=runs[:4]).collect()
        results["matrix_s"], _ = best(args.repeat, matrix)
        results["audit_s"], rows = best(args.repeat, lambda: audit_by_run(spark, str(root)).collect())
        check(f"{master} audit_by_run", Counter(r.kind for r in rows), stats)
        if args.all_plans:
            frames = read_results(spark, root, "frames")
            results["grouped_s"], rows = best(args.repeat, lambda: audit_grouped(frames).collect())
            check(f"{master} audit_grouped", Counter(r.kind for r in rows), stats)
            results["sql_tag_check_s"], n = best(args.repeat, lambda: tag_sequence_findings(frames).count())
            if n != stats.expected["tag-sequence"]:
                raise SystemExit(f"{master} SQL tag check: {n} findings, expected {stats.expected['tag-sequence']}")
        if large is not None:
            large_root, large_stats = large
            results["audit_large_s"], rows = best(args.repeat, lambda: audit_by_run(spark, str(large_root)).collect())
            check(f"{master} audit_by_run, large lake", Counter(r.kind for r in rows), large_stats)
        return results
    finally:
        spark.stop()


def one_run_report(root: Path, repeat: int) -> list[float]:
    """Wall times of `python -m reports.cli LAKE --out DIR`, each in a fresh process (cold JVM)."""
    times = []
    for _ in range(max(1, repeat)):
        with tempfile.TemporaryDirectory(prefix="amqpc-report-") as out:
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "reports.cli", str(root), "--out", out], cwd=_ROOT,
                                  capture_output=True, text=True, timeout=600, check=False)
            times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"one-run report failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        if done.stderr.strip():
            raise SystemExit(f"one-run report wrote to stderr (it should be quiet):\n{done.stderr}")
    return times


def relay_case(broker: str, messages: int, repeat: int) -> dict[str, float] | None:
    """bench/relay.py in its own process (it starts the relay as `amqp-conformance record` does): its JSON line."""
    host, port = broker.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError:
        print(f"relay case skipped: no broker answers at {broker}", flush=True)
        return None
    done = subprocess.run([sys.executable, str(_ROOT / "bench" / "relay.py"), "--broker", broker, "--messages",
                           str(messages), "--repeat", str(repeat)], capture_output=True, text=True, timeout=1800,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench/relay.py failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    result["relay_messages"] = messages
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shape = shape_of(args)
    large_shape = large_shape_of(args, shape)
    temporary = Path(tempfile.mkdtemp(prefix="amqpc-lakes-")) if args.no_cache else None
    cache = temporary or args.cache
    try:
        root, stats = lake(cache, shape)
        large = lake(cache, large_shape) if large_shape else None
        one_run, _ = lake(cache, dataclasses.replace(QUICK, runs=1) if args.quick else ONE_RUN)
        print(f"lake: {stats.runs} runs, {stats.channels} channels, {stats.frames} frames, {stats.tests} tests"
              + (f"; large: {large[1].frames} frames" if large else ""), flush=True)
        report_times = one_run_report(one_run, 1 if args.quick else args.report_repeat)
        relay = relay_case(args.relay_broker, 500 if args.quick else args.relay_messages, 1 if args.quick else 3)
        single = single_process(root, stats, args.repeat)
        spark = {master: spark_cases(master, root, stats, args, large if master == MASTERS[0] else None)
                 for master in MASTERS}
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    report(stats, single, spark, large[1] if large else None, report_times, relay)
    return 0


def report(stats: LakeStats, single: dict[str, float], spark: dict[str, dict[str, float]],
           large: LakeStats | None, report_times: list[float], relay: dict[str, float] | None = None) -> None:
    rows = [("audit, single process (pyarrow + the model)", single["single_audit_s"], stats.frames)]
    if "legacy_audit_cpu_s" in single:
        rows.append(("  same, CPU s (best of interleaved runs)", single["model_audit_cpu_s"], stats.frames))
        rows.append(("  plain checkers it replaced, CPU s", single["legacy_audit_cpu_s"], stats.frames))
    if "duckdb_tag_check_s" in single:
        rows.append(("tag check, DuckDB windows", single["duckdb_tag_check_s"], stats.frames))
    for master, cases in spark.items():
        rows.append((f"audit, Spark {master} mapInArrow per run", cases["audit_s"], stats.frames))
        if "grouped_s" in cases:
            rows.append((f"audit, Spark {master} applyInArrow per channel", cases["grouped_s"], stats.frames))
            rows.append((f"tag check, Spark {master} SQL windows", cases["sql_tag_check_s"], stats.frames))
        rows.append((f"matrix, Spark {master}", cases["matrix_s"], stats.tests))
        if large is not None and "audit_large_s" in cases:
            rows.append((f"audit, Spark {master} mapInArrow, large lake", cases["audit_large_s"], large.frames))
    rows.append(("one-run report, fresh process (best)", min(report_times), ONE_RUN.tests_per_run))
    if relay:
        rows.append(("pika publish+consume, direct", relay["direct_s"], int(relay["relay_messages"])))
        rows.append(("pika publish+consume, through the relay", relay["relay_s"], int(relay["relay_messages"])))
    print(f"\n{'case':<52} {'seconds':>9} {'rows/s':>12}")
    for name, seconds, count in rows:
        print(f"{name:<52} {seconds:>9.2f} {count / seconds:>12,.0f}")
    result = summary(stats, single, spark, large, report_times)
    if relay:
        result["relay_x_direct"] = round(relay["relay_x_direct"], 3)
    print(f"one-run report runs: {', '.join(f'{t:.1f} s' for t in report_times)}")
    for key, kind, bound in GOALS:
        if key in result:
            met = result[key] >= bound if kind == "min" else result[key] <= bound
            print(f"goal {key} {'>=' if kind == 'min' else '<='} {bound}: {result[key]} ({'met' if met else 'MISSED'})")
    print(json.dumps(result))


def summary(stats: LakeStats, single: dict[str, float], spark: dict[str, dict[str, float]],
            large: LakeStats | None = None, report_times: list[float] | None = None) -> dict[str, float]:
    """The JSON line: ratios (>1: the first named is faster), times in seconds, rows/s."""
    two, one = spark["local[2]"], spark["local[1]"]
    result: dict[str, float] = {
        "frames": stats.frames, "runs": stats.runs, "channels": stats.channels, "tests": stats.tests,
        "single_audit_s": round(single["single_audit_s"], 3),
        "spark_local2_audit_s": round(two["audit_s"], 3), "spark_local1_audit_s": round(one["audit_s"], 3),
        "audit_spark_x_single": round(single["single_audit_s"] / two["audit_s"], 3),
        "scaling_local2_x_local1": round(one["audit_s"] / two["audit_s"], 3),
        "single_rows_per_s": round(stats.frames / single["single_audit_s"]),
        "spark_local2_rows_per_s": round(stats.frames / two["audit_s"]),
        "spark_local1_rows_per_s": round(stats.frames / one["audit_s"]),
        "matrix_local2_s": round(two["matrix_s"], 3), "matrix_local1_s": round(one["matrix_s"], 3),
    }
    if large is not None and "audit_large_s" in two:
        result["frames_large"] = large.frames
        result["spark_local2_audit_large_s"] = round(two["audit_large_s"], 3)
        result["linearity_large_x_small"] = round((two["audit_large_s"] / large.frames)
                                                  / (two["audit_s"] / stats.frames), 3)
    if report_times:
        result["one_run_report_s"] = round(min(report_times), 2)
    if "legacy_audit_cpu_s" in single:
        result["model_audit_cpu_s"] = round(single["model_audit_cpu_s"], 3)
        result["legacy_audit_cpu_s"] = round(single["legacy_audit_cpu_s"], 3)
        result["model_x_legacy_audit_per_core"] = round(single["legacy_audit_cpu_s"] / single["model_audit_cpu_s"], 3)
    for key in ("grouped_s", "sql_tag_check_s"):
        if key in two:
            result[f"{key.removesuffix('_s')}_local2_s"] = round(two[key], 3)
            result[f"{key.removesuffix('_s')}_local1_s"] = round(one[key], 3)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
