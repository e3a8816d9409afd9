"""The trace audit on Spark: three plans over the same checkers, and the SQL tag check.

Responsibility: run `reports.audit` on a results lake with Spark.
- `audit_by_run` (the default): shuffle-free. Run partition directories are packed into a few
  tasks; each task reads its runs with pyarrow and runs the plain-Python checker
  (`audit_arrow.audit_runs`) in a `mapInArrow`. A channel never spans runs, so no data moves between tasks and every core
  runs the checker at in-process speed. Executors must see the results directory (shared
  storage on a cluster, see `reports.spark`).
- `audit_grouped`: any frames DataFrame (e.g. Spark Connect, or frames filtered in Spark):
  `groupBy(channel key).applyInArrow` with the same checker; pays a shuffle.
- `tag_sequence_findings`: the ACK-01 check as SQL window functions (no Python at all),
  kept equal to the checker's `tag-sequence` findings by a test.

Rules: all plans return DataFrames with the `reports.schema.VIOLATIONS` columns; the functions
shipped to the workers are module-level (importable by the Python workers).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from reports.audit import KINDS, Context
from reports.audit_arrow import (
    AUDIT_COLUMNS,
    KEY_COLUMNS,
    OPTIONAL_COLUMNS,
    audit_group,
    audit_runs,
    run_sizes,
)
from reports.audit_context import CONTEXT_COLUMNS, CONTEXT_METHODS, ConnectionKey, recording_contexts
from reports.schema import VIOLATIONS_DDL


def audit_by_run(spark: SparkSession, root: str, *, tasks: int | None = None, worker_threads: bool = False,
                 only: Collection[str] | None = None) -> DataFrame:
    """Audit every run of the lake at `root` (or the runs in `only`) with no shuffle.

    Runs are packed into `tasks` bins of about equal bytes (default: one per core), one
    mapInArrow task each; a task audits its runs one after the other. Few, large tasks: each
    Spark task costs about a tenth of a second, as much as auditing a run of 100 000 frames.
    """
    runs = [(run, directory, size) for run, directory, size in run_sizes(root) if only is None or run in only]
    if not runs:
        return spark.createDataFrame([], VIOLATIONS_DDL)
    bins = pack(runs, tasks or _parallelism(spark))
    function = _audit_bins if worker_threads else _audit_bins_single_threaded
    return _spread(spark, bins).mapInArrow(function, VIOLATIONS_DDL)


def pack(runs: list[tuple[str, str, int]], slots: int) -> list[list[str]]:
    """Run directories in at most `slots` bins of about equal total size (largest first)."""
    bins: list[tuple[int, int, list[str]]] = [(0, n, []) for n in range(min(slots, len(runs)))]
    for _, directory, size in sorted(runs, key=lambda r: -r[2]):
        total, n, members = heapq.heappop(bins)
        members.append(directory)
        heapq.heappush(bins, (total + size, n, members))
    return [members for _, _, members in sorted(bins, key=lambda b: b[1]) if members]


def _parallelism(spark: SparkSession) -> int:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext
        return int(spark.conf.get("spark.default.parallelism", "2") or 2)


def _spread(spark: SparkSession, bins: list[list[str]]) -> DataFrame:
    """One row (and one partition) per bin, without a shuffle where possible."""
    schema = "directories ARRAY<STRING>"
    rows = [(b,) for b in bins]
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect has no SparkContext: a round-robin repartition instead
        return spark.createDataFrame(rows, schema).repartition(len(rows))
    return spark.createDataFrame(context.parallelize(rows, len(rows)), schema)


def _audit_bins(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for directories in batch.column("directories").to_pylist():
            for table in audit_runs(directories):
                yield from table.to_batches()


def _audit_bins_single_threaded(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for directories in batch.column("directories").to_pylist():
            for table in audit_runs(directories, use_threads=False):
                yield from table.to_batches()


def audit_grouped(frames: DataFrame) -> DataFrame:
    """Audit any frames DataFrame: one applyInArrow group per channel (shuffles the frames).

    Each connection's context (`reports.audit_context`) is computed first from the few rows
    that describe the recording, collected to the driver and shipped with the function.
    """
    optional = [c for c in OPTIONAL_COLUMNS if c in frames.columns]
    contexts = _contexts(frames)
    selected = frames.select(*AUDIT_COLUMNS, *optional)

    def audit_one(table: pa.Table) -> pa.Table:
        return audit_group(table, contexts)

    return selected.groupBy(*KEY_COLUMNS).applyInArrow(audit_one, VIOLATIONS_DDL)


def _contexts(frames: DataFrame) -> dict[ConnectionKey, Context]:
    methods = F.col("method").isin(*CONTEXT_METHODS)
    if "frame_type" in frames.columns:
        methods = methods | ((F.col("frame_type") == "gap") & (F.col("channel") == -1))
    names = [c for c in ("run_id", "test_id", "connection", "channel", "seq", "direction", "frame_type", "method",
                         *CONTEXT_COLUMNS) if c in frames.columns]
    return recording_contexts(frames.where(methods).select(*names).toArrow())


def tag_sequence_findings(frames: DataFrame) -> DataFrame:
    """ACK-01 with window functions: per channel lifetime, each delivery tag = previous + 1.

    A lifetime starts at the client's channel.open; deliveries after the broker's
    channel.close are ignored (ERR-03), as the checker does.
    """
    channel = Window.partitionBy(*KEY_COLUMNS).orderBy("seq")
    opens = (F.col("direction") == "out") & (F.col("method") == "channel.open")
    closes = (F.col("direction") == "in") & (F.col("method").isin("channel.close", "channel.close-ok"))
    delivers = (F.col("direction") == "in") & F.col("method").isin("basic.deliver", "basic.get-ok")
    events = (frames.where(opens | closes | delivers)
              .withColumn("lifetime", F.sum(opens.cast("int")).over(channel))
              .withColumn("closed", F.sum(closes.cast("int")).over(
                  Window.partitionBy(*KEY_COLUMNS, "lifetime").orderBy("seq"))))
    lifetime = Window.partitionBy(*KEY_COLUMNS, "lifetime").orderBy("seq")
    tagged = (events.where(delivers & (F.col("closed") == 0))
              .withColumn("expected", F.coalesce(F.lag("delivery_tag").over(lifetime) + 1, F.lit(1)))
              .where(F.col("delivery_tag") != F.col("expected")))
    rule_id, severity = KINDS["tag-sequence"]
    label = F.when(F.col("method") == "basic.deliver", F.lit("delivery tag ")).otherwise(F.lit("basic.get-ok tag "))
    return tagged.select(
        *KEY_COLUMNS, "seq", F.lit("tag-sequence").alias("kind"), F.lit(rule_id).alias("rule_id"),
        F.lit(severity).alias("severity"),
        F.concat(label, F.col("delivery_tag").cast("string"), F.lit(", expected "),
                 F.col("expected").cast("string")).alias("detail"),
    )
