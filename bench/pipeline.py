"""Pipeline benchmark: the matrix and the trace audit on Spark local[2] and local[1], against
the same audit in a single process, on one synthetic results lake.

What it measures (same lake, same process, same checker code):
- the lake: `reports.synthetic` writes N runs x C channels x F frames (default 100 x 500 x 202
  ≈ 10 M frames, 50 000 channels) and T tests per run (default 10 000 → 1 M test results), in
  the layout and schema of `conformance.plugin.results`; violations are injected so every plan's
  findings are checked against the known count before its time is reported;
- single process: `reports.audit_arrow.audit_lake` (pyarrow reads each run, the plain-Python
  per-channel checker runs on it) — and DuckDB window functions for the tag check if DuckDB is
  installed;
- Spark, once per master (local[2], then local[1]; JVM start and Python-worker warm-up are
  excluded, as they are paid once per report): the matrix (rule verdicts + matrix + run scores,
  collected), the audit with the shuffle-free per-run plan (`audit_by_run`, mapInArrow), and
  with `--all-plans` also applyInArrow per channel and the SQL-window tag check.
Printed: a table, then one JSON line: `audit_spark_x_single` = single-process time / Spark
local[2] time (>1: Spark is faster), `scaling_local2_x_local1` = local[1] / local[2] audit time,
rows/s of both, and the matrix times. `--quick` runs a tiny lake (smoke test of the script).
"""

from __future__ import annotations

import argparse
import json
import shutil
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

from reports.audit_arrow import audit_lake  # noqa: E402
from reports.synthetic import LakeShape, LakeStats, write_lake  # noqa: E402

MASTERS = ("local[2]", "local[1]")
QUICK = LakeShape(runs=4, channels_per_run=20, frames_per_channel=50, tests_per_run=400, violation_rate=0.2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--frames", type=float, default=10e6, help="about this many frames (default 10e6)")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--channels", type=int, default=50_000, help="channels in total (default 50 000)")
    p.add_argument("--tests", type=float, default=1e6, help="test results in total (default 1e6)")
    p.add_argument("--lake", type=Path, default=None, help="write the lake here and keep it (default: a temp dir)")
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


def single_process(root: Path, stats: LakeStats, repeat: int) -> dict[str, float]:
    seconds, table = best(repeat, lambda: audit_lake(root))
    check("single process", Counter(table["kind"].to_pylist()), stats)
    result = {"single_audit_s": seconds}
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


def spark_cases(master: str, root: Path, stats: LakeStats, args: argparse.Namespace) -> dict[str, float]:
    from pyspark.sql import functions as F

    from reports import jobs
    from reports.audit_spark import audit_by_run, audit_grouped, tag_sequence_findings
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
        return results
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shape = shape_of(args)
    owned = args.lake is None
    root = Path(tempfile.mkdtemp(prefix="amqpc-lake-")) if owned else args.lake
    try:
        started = time.perf_counter()
        shutil.rmtree(root, ignore_errors=True)
        stats = write_lake(root, shape)
        print(f"lake: {stats.runs} runs, {stats.channels} channels, {stats.frames} frames, {stats.tests} tests "
              f"in {time.perf_counter() - started:.1f} s ({root})", flush=True)
        single = single_process(root, stats, args.repeat)
        spark = {master: spark_cases(master, root, stats, args) for master in MASTERS}
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)
    report(stats, single, spark)
    return 0


def report(stats: LakeStats, single: dict[str, float], spark: dict[str, dict[str, float]]) -> None:
    rows = [("audit, single process (pyarrow + Python checker)", single["single_audit_s"], stats.frames)]
    if "duckdb_tag_check_s" in single:
        rows.append(("tag check, DuckDB windows", single["duckdb_tag_check_s"], stats.frames))
    for master, cases in spark.items():
        rows.append((f"audit, Spark {master} mapInArrow per run", cases["audit_s"], stats.frames))
        if "grouped_s" in cases:
            rows.append((f"audit, Spark {master} applyInArrow per channel", cases["grouped_s"], stats.frames))
            rows.append((f"tag check, Spark {master} SQL windows", cases["sql_tag_check_s"], stats.frames))
        rows.append((f"matrix, Spark {master}", cases["matrix_s"], stats.tests))
    print(f"\n{'case':<52} {'seconds':>9} {'rows/s':>12}")
    for name, seconds, count in rows:
        print(f"{name:<52} {seconds:>9.2f} {count / seconds:>12,.0f}")
    print(json.dumps(summary(stats, single, spark)))


def summary(stats: LakeStats, single: dict[str, float], spark: dict[str, dict[str, float]]) -> dict[str, float]:
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
    for key in ("grouped_s", "sql_tag_check_s"):
        if key in two:
            result[f"{key.removesuffix('_s')}_local2_s"] = round(two[key], 3)
            result[f"{key.removesuffix('_s')}_local1_s"] = round(one[key], 3)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
