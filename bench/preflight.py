"""Pre-flight benchmark: the Spark job of `amqp-conformance preflight` over a synthetic recorded lake.

What it measures:
- the lake: `--runs` recordings (default 10) x `--connections` (default 100) connections x about
  `--frames` (default 10 000) frames each ≈ 10 M frames, in the frames schema of
  `conformance.results.records`, with realistic shape variety: each connection opens a channel,
  sets basic.qos (one in five global=true), declares 3 queues drawn from 40 declaration shapes
  (classic/quorum, durable/transient/exclusive, x-queue-version, x-queue-mode, x-consumer-timeout,
  x-message-ttl values, x-delivery-limit, dead-lettering, max-length...), consumes from one, then
  runs delivery cycles (deliver, header, body, ack; on quorum queues one in 50 is basic.reject
  requeue=true of a message that comes back). Written once into `--cache` and reused.
- the job, once per master (local[1], then local[2]), each in a fresh process: `shape_rows` +
  `aggregate` (the whole pre-flight Spark job: per-run mapInArrow + the aggregations, collected),
  best of `--repeat`, after one warm-up run (JVM and Python workers started). Also judged, so the
  findings are checked before a time is reported.
Printed: one JSON line with seconds per million frames on each master and local[1] / local[2].
`--quick` writes a tiny lake (smoke test).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from conformance.results.records import SCHEMAS

SHAPES: list[tuple[str, str, list[str]]] = []  # (x-queue-type, arguments JSON, flags)
for _kind in ("classic", "quorum"):
    for _args in ('{}', '{"x-queue-version":1}', '{"x-queue-version":2}', '{"x-queue-mode":"lazy"}',
                  '{"x-consumer-timeout":60000}', '{"x-message-ttl":%d}', '{"x-max-length":10000,"x-overflow":"reject-publish"}',
                  '{"x-dead-letter-exchange":"dlx","x-delivery-limit":5}', '{"x-expires":3600000}',
                  '{"x-single-active-consumer":true}'):
        for _flags in (["durable"], [] if _kind == "classic" else ["durable"]):
            SHAPES.append((_kind, _args, _flags))


def _rows(n: int) -> dict[str, list[Any]]:
    return {name: [None] * n for name in SCHEMAS["frames"].names}


def connection_frames(run: str, conn: int, frames: int, rng: np.random.Generator, seq0: int,
                      ts0: int) -> pa.Table:
    """One recorded connection: set-up (qos, 3 declares, consume) and delivery cycles."""
    head: list[dict[str, Any]] = [{"direction": "out", "method": "channel.open"},
                                  {"direction": "in", "method": "channel.open-ok"}]
    head += [{"direction": "out", "method": "basic.qos", "prefetch_count": 10, "global_qos": bool(conn % 5 == 0)},
             {"direction": "in", "method": "basic.qos-ok"}]
    picks = rng.integers(0, len(SHAPES), 3)
    for n, pick in enumerate(picks):
        kind, args, flags = SHAPES[int(pick)]
        args = args.replace("%d", str(int(rng.integers(1000, 10**7))))
        if kind == "quorum":
            args = args[:-1] + (',"x-queue-type":"quorum"}' if args != "{}" else '"x-queue-type":"quorum"}')
        head += [{"direction": "out", "method": "queue.declare", "queue": f"q{conn}.{n}", "arguments": args,
                  "flags": flags, "queue_type": kind if kind == "quorum" else ""},
                 {"direction": "in", "method": "queue.declare-ok", "queue": f"q{conn}.{n}"}]
    consumed = f"q{conn}.0"
    head += [{"direction": "out", "method": "basic.consume", "queue": consumed, "consumer_tag": "", "arguments": "{}"},
             {"direction": "in", "method": "basic.consume-ok", "consumer_tag": f"ctag{conn}"}]
    cycles = max(0, (frames - len(head)) // 4)
    table = _cycles(cycles, conn, SHAPES[int(picks[0])][0] == "quorum", rng)
    head_table = pa.Table.from_pylist([{**r, "frame_type": "method"} for r in head], schema=_partial(table.schema))
    whole = pa.concat_tables([head_table, table])
    n = whole.num_rows
    fixed = {"run_id": pa.array([run] * n), "test_id": pa.array(["recording"] * n),
             "connection": pa.array(np.full(n, conn, dtype=np.int32)), "channel": pa.array(np.ones(n, dtype=np.int32)),
             "seq": pa.array(np.arange(seq0, seq0 + n, dtype=np.int32)),
             "ts": pa.array(ts0 + np.arange(n, dtype=np.int64) * 200, type=pa.timestamp("us", tz="UTC"))}
    columns = [fixed[f.name] if f.name in fixed else whole[f.name] if f.name in whole.column_names
               else pa.nulls(n, f.type) for f in SCHEMAS["frames"]]
    return pa.Table.from_arrays(columns, schema=SCHEMAS["frames"])


def _partial(schema: pa.Schema) -> pa.Schema:
    names = ("direction", "frame_type", "method", "queue", "arguments", "flags", "queue_type", "prefetch_count",
             "global_qos", "consumer_tag", "delivery_tag", "requeue", "body_digest")
    return pa.schema([SCHEMAS["frames"].field(n) for n in names])


def _cycles(cycles: int, conn: int, quorum: bool, rng: np.random.Generator) -> pa.Table:
    """deliver (in), header (in), body (in), ack or reject-requeue (out), `cycles` times."""
    n = cycles * 4
    kind = np.tile(np.arange(4), cycles)
    tags = np.repeat(np.arange(1, cycles + 1, dtype=np.int64), 4)
    rejected = np.repeat((rng.random(cycles) < 0.02) & quorum, 4)
    direction = np.where(kind == 3, "out", "in")
    frame_type = np.array(["method", "header", "body", "method"])[kind]
    method = np.where(kind == 0, "basic.deliver", np.where(kind == 3, np.where(rejected, "basic.reject", "basic.ack"),
                                                           ""))
    # every delivery a new message, but the rejected ones: one message bounced again and again (RQ-06)
    digests = np.where(rejected, "bounced", np.repeat(np.char.add("m", np.arange(cycles).astype(str)), 4))
    schema = _partial(pa.schema([]))
    arrays = {"direction": pa.array(direction), "frame_type": pa.array(frame_type),
              "method": _nullable(method),
              "consumer_tag": _nullable(np.where(kind == 0, f"ctag{conn}", "")),
              "delivery_tag": pa.array(np.where((kind == 0) | (kind == 3), tags, 0)),
              "requeue": pa.array(np.where(kind == 3, rejected, False)),
              "body_digest": _nullable(np.where(kind == 2, digests, ""))}
    return pa.Table.from_arrays([arrays.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema)


def _nullable(strings: np.ndarray) -> pa.Array:
    """A numpy string array as an Arrow string array, "" as null."""
    array = pa.array(strings, pa.string())
    return pc.if_else(pc.equal(array, ""), pa.scalar(None, pa.string()), array)


def write_lake(root: Path, runs: int, connections: int, frames: int) -> int:
    rng = np.random.default_rng(29)
    total = 0
    for r in range(runs):
        run = f"rec-bench-{r:03d}"
        parts = []
        seq = 0
        for c in range(1, connections + 1):
            table = connection_frames(run, c, frames, rng, seq, 1_700_000_000_000_000 + c * 10**9)
            seq += table.num_rows
            parts.append(table)
        whole = pa.concat_tables(parts)
        (root / "frames" / f"run={run}").mkdir(parents=True, exist_ok=True)
        pq.write_table(whole, root / "frames" / f"run={run}" / "part-00000-bench.parquet")
        total += whole.num_rows
    return total


def measure(root: str, master: str, repeat: int, frames_per_connection: int) -> dict[str, Any]:
    """In this process: the job on `master`, one warm-up then best of `repeat` (seconds)."""
    from conformance.preflight.judging import judge
    from reports.preflight_spark import aggregate, shape_rows
    from reports.spark import spark_session

    spark = spark_session(master, app_name="preflight bench", conf={"spark.driver.memory": "2g"})
    times, shapes = [], {}
    for n in range(repeat + 1):
        started = time.perf_counter()
        shapes = aggregate(shape_rows(spark, root))
        if n:
            times.append(time.perf_counter() - started)
    findings = judge(shapes["requests"], shapes["returns"], shapes["held"], "rabbitmq-3.10", "rabbitmq-4.3")
    rules = sorted({f.rule for f in findings})
    assert {"DCL-03", "TMO-04", "QOS-03", "DCL-04", "DCL-05"} <= set(rules), rules
    assert "RQ-06" in rules or frames_per_connection < 5000, rules  # ~50 bounces a quorum connection
    return {"master": master, "seconds": min(times), "shapes": len(shapes["requests"]), "rules": rules}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--frames", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=Path("build/bench-lakes"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--measure", nargs=2, metavar=("LAKE", "MASTER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure[0], args.measure[1], args.repeat, args.frames)))
        return
    if args.quick:
        args.runs, args.connections, args.frames, args.repeat = 2, 5, 500, 1
    root = args.cache / f"preflight-{args.runs}x{args.connections}x{args.frames}"
    if not (root / "frames").is_dir():
        started = time.perf_counter()
        write_lake(root, args.runs, args.connections, args.frames)
        print(f"wrote {root} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    frames = sum(pq.ParquetFile(p).metadata.num_rows for p in root.glob("frames/*/*.parquet"))
    result: dict[str, Any] = {"frames": frames}
    for master in ("local[1]", "local[2]"):
        out = subprocess.run([sys.executable, "-m", "bench.preflight", "--repeat", str(args.repeat), "--frames", str(args.frames), "--measure",
                              str(root), master], capture_output=True, text=True, timeout=3600, check=True)
        found = json.loads(out.stdout.strip().splitlines()[-1])
        result[master] = {"seconds": round(found["seconds"], 2),
                          "seconds_per_million_frames": round(found["seconds"] / frames * 1e6, 3),
                          "shapes": found["shapes"]}
        result["rules"] = found["rules"]
    result["scaling_local2_x_local1"] = round(result["local[1]"]["seconds"] / result["local[2]"]["seconds"], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
