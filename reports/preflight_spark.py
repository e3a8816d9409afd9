"""The pre-flight on Spark: a results lake's recorded frames reduced to aggregated shapes.

Responsibility: one Spark job from the frames table to the few rows `conformance.preflight.judging`
reads. Map side, shuffle-free like the audit's default plan (`reports.audit.plan`): run partition
directories are packed into tasks, each task reads its runs with pyarrow, keeps the rows the
shapes need (vectorised filter) and runs `conformance.preflight.shapes.RecordingShapes` over them
in a `mapInArrow`. Reduce side: Spark aggregates the shape rows of all runs (counts, distinct
connections, one example each). Also: the recorded broker's profile, and the frame window of an
example.

Rules:
- The functions shipped to the Python workers are module-level; only aggregates reach the driver.
- Columns an older lake lacks (`arguments`, `exchange_type`, `flags`, ...) read as nulls: the
  checks that need them find nothing, they never guess.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conformance.catalogue.profiles import detect
from conformance.preflight.shapes import INPUT_COLUMNS, REPLIES, SHAPE_COLUMNS, RecordingShapes
from conformance.results.records import SCHEMAS
from reports.audit.lake import pack, run_sizes
from reports.spark import read_results

SHAPES = pa.schema([
    pa.field(name, pa.bool_() if name == "global_qos" else
             pa.int64() if name in ("delivery_limit", "consumer_timeout", "held_ms") else
             pa.int32() if name in ("reply_code", "by_reject", "by_nack", "by_other", "connection", "channel", "seq")
             else pa.string())
    for name in SHAPE_COLUMNS
])
_DDL = {pa.string(): "STRING", pa.int32(): "INT", pa.int64(): "BIGINT", pa.bool_(): "BOOLEAN"}
SHAPES_DDL = ", ".join(f"{f.name} {_DDL[f.type]}" for f in SHAPES)
WANTED_METHODS = sorted({*REPLIES, *(r for rs in REPLIES.values() for r in rs), "basic.deliver", "basic.ack",
                         "basic.reject", "basic.nack", "basic.recover", "basic.recover-async", "channel.open",
                         "channel.close", "channel.close-ok", "connection.close"})
_EXAMPLE = ("run_id", "test_id", "connection", "channel", "seq", "raw_arguments", "queue", "reply_text")


def shapes_of_run(directory: str, *, use_threads: bool = True) -> pa.Table:
    """The shape rows of one run partition directory (`shapes.RecordingShapes` over its frames)."""
    fs, path = pafs.FileSystem.from_uri(directory)
    schema = SCHEMAS["frames"]
    table = ds.dataset(path, filesystem=fs, format="parquet", schema=schema).to_table(
        columns=["run_id", *INPUT_COLUMNS], use_threads=use_threads)
    if table.num_rows == 0:
        return SHAPES.empty_table()
    wanted = pc.is_in(table["method"], value_set=pa.array(WANTED_METHODS)).fill_null(False)
    bodies = pc.and_(pc.equal(table["frame_type"], "body"), pc.equal(table["direction"], "in")).fill_null(False)
    table = table.filter(pc.or_(wanted, bodies)).sort_by([("test_id", "ascending"), ("connection", "ascending"),
                                                         ("seq", "ascending")])
    if table.num_rows == 0:
        return SHAPES.empty_table()
    columns: dict[str, Any] = {name: table[name].to_pylist() for name in INPUT_COLUMNS if name != "ts"}
    columns["ts"] = pc.fill_null(table["ts"].cast(pa.int64()), 0).to_pylist()
    shapes = RecordingShapes(table["run_id"][0].as_py())
    shapes.extract(columns)
    return pa.Table.from_pylist(list(shapes.rows()), schema=SHAPES)


def _shape_bins(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for directories in batch.column("directories").to_pylist():
            for directory in directories:
                yield from shapes_of_run(directory, use_threads=False).to_batches()


def shape_rows(spark: SparkSession, root: str | Path, *, tasks: int | None = None) -> DataFrame:
    """Every run's shape rows as one DataFrame (no shuffle: one mapInArrow task per bin of runs)."""
    runs = run_sizes(root)
    if not runs:
        return spark.createDataFrame([], SHAPES_DDL)
    bins = pack(runs, tasks or int(spark.sparkContext.defaultParallelism))
    spread = spark.createDataFrame(spark.sparkContext.parallelize([(b,) for b in bins], len(bins)),
                                   "directories ARRAY<STRING>")
    return spread.mapInArrow(_shape_bins, SHAPES_DDL)


def _connections() -> Any:
    return F.size(F.collect_set(F.concat_ws("/", "run_id", "test_id", F.col("connection").cast("string"))))


def aggregate(rows: DataFrame) -> dict[str, list[dict[str, Any]]]:
    """The shapes of the whole lake: requests, returned messages and held deliveries, aggregated."""
    rows = rows.cache()
    try:
        example = F.min(F.struct(*_EXAMPLE)).alias("example")
        requests = (rows.where(F.col("row_kind") == "request")
                    .groupBy("method", "queue_type", "arguments", "exchange_type", "flags", "global_qos", "reply",
                             "reply_code")
                    .agg(F.count(F.lit(1)).alias("count"), _connections().alias("connections"), example))
        returns = (rows.where(F.col("row_kind") == "returns")
                   .groupBy("queue_type", "delivery_limit", "by_reject", "by_nack", "by_other")
                   .agg(F.count(F.lit(1)).alias("messages"), _connections().alias("connections"), example))
        held = (rows.where(F.col("row_kind") == "held")
                .groupBy("queue_type", "consumer_timeout")
                .agg(F.max("held_ms").alias("held_ms"), F.count(F.lit(1)).alias("queues"),
                     _connections().alias("connections"), F.max_by(F.struct(*_EXAMPLE), "held_ms").alias("example")))
        return {"requests": _flat(requests), "returns": _flat(returns), "held": _flat(held)}
    finally:
        rows.unpersist()


def _flat(frame: DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in frame.collect():
        values = row.asDict(recursive=True)
        values.update(values.pop("example") or {})
        out.append(values)
    return out


def recorded_profile(spark: SparkSession, root: str | Path) -> str | None:
    """The profile of the broker the lake recorded (its connection.start), the most frequent one."""
    frames = read_results(spark, root, "frames")
    starts = (frames.where((F.col("method") == "connection.start") & (F.col("direction") == "in"))
              .groupBy("product", "version", "emulates").count().orderBy(F.desc("count")).collect())
    if not starts:
        return None
    best = starts[0]
    return detect({k: v for k, v in (("product", best["product"]), ("version", best["version"]),
                                     ("emulates", best["emulates"])) if v})


WINDOW = 6  # frames each side of an example


def frame_windows(spark: SparkSession, root: str | Path, examples: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The frames around each example (same run, test and connection), in one scan of the frames table."""
    wanted = [e for e in examples if e.get("run_id") is not None and e.get("seq") is not None]
    if not wanted:
        return [[] for _ in examples]
    frames = read_results(spark, root, "frames")
    condition = None
    for e in wanted:
        one = ((F.col("run") == e["run_id"]) & (F.col("test_id") == e["test_id"])
               & (F.col("connection") == e["connection"])
               & F.col("seq").between(e["seq"] - 4 * WINDOW, e["seq"] + 4 * WINDOW))
        condition = one if condition is None else condition | one
    columns = ["run_id", "test_id", "connection", "channel", "seq", "direction", "frame_type", "method",
               "reply_code", "reply_text", "queue", "arguments", "exchange_type", "delivery_tag", "requeue",
               "global_qos", "prefetch_count"]
    if condition is None:
        return [[] for _ in examples]
    rows = [r.asDict() for r in frames.where(condition).select(*columns).collect()]
    out = []
    for e in examples:
        near = sorted((r for r in rows if (r["run_id"], r["test_id"], r["connection"]) ==
                       (e.get("run_id"), e.get("test_id"), e.get("connection"))), key=lambda r: r["seq"])
        before = [r for r in near if r["seq"] < e.get("seq", 0)][-WINDOW:]
        after = [r for r in near if r["seq"] >= e.get("seq", 0)][:WINDOW + 1]
        out.append(before + after)
    return out
