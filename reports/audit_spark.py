"""The trace audit on Spark: three plans over the same checkers, and the SQL tag check.

Responsibility: run `reports.audit` on a results lake with Spark.
- `audit_by_run` (the default): shuffle-free. One task per run partition directory; each
  task reads its run with pyarrow and runs the plain-Python checker (`audit_arrow.audit_runs`)
  in a `mapInArrow`. A channel never spans runs, so no data moves between tasks and every core
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

from collections.abc import Collection, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from reports.audit import KINDS
from reports.audit_arrow import AUDIT_COLUMNS, KEY_COLUMNS, audit_runs, audit_table, run_partitions
from reports.schema import VIOLATIONS_DDL


def audit_by_run(spark: SparkSession, root: str, *, tasks: int | None = None, worker_threads: bool = False,
                 only: Collection[str] | None = None) -> DataFrame:
    """Audit every run of the lake at `root` (or the runs in `only`): runs spread over `tasks`
    mapInArrow tasks (default one per run), no shuffle."""
    runs = [r for r in run_partitions(root) if only is None or r[0] in only]
    if not runs:
        return spark.createDataFrame([], VIOLATIONS_DDL)
    slices = min(len(runs), tasks or len(runs))
    directories = _spread(spark, runs, slices)
    if not worker_threads:  # one core per task: pyarrow's own threads would skew Spark's scheduling
        return directories.mapInArrow(_audit_directories_single_threaded, VIOLATIONS_DDL)
    return directories.mapInArrow(_audit_directories, VIOLATIONS_DDL)


def _spread(spark: SparkSession, runs: list[tuple[str, str]], slices: int) -> DataFrame:
    """A DataFrame of (run, directory) in `slices` partitions, without a shuffle where possible."""
    schema = "run STRING, directory STRING"
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect has no SparkContext: a round-robin repartition instead
        return spark.createDataFrame(runs, schema).repartition(slices)
    return spark.createDataFrame(context.parallelize(runs, slices), schema)


def _audit_directories(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for table in audit_runs(batch.column("directory").to_pylist()):
            yield from table.to_batches()


def _audit_directories_single_threaded(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for table in audit_runs(batch.column("directory").to_pylist(), use_threads=False):
            yield from table.to_batches()


def audit_grouped(frames: DataFrame) -> DataFrame:
    """Audit any frames DataFrame: one applyInArrow group per channel (shuffles the frames)."""
    optional = [c for c in ("prefetch_count", "no_ack", "global_qos", "body_digest") if c in frames.columns]
    selected = frames.select(*AUDIT_COLUMNS, *optional)
    return selected.groupBy(*KEY_COLUMNS).applyInArrow(_audit_group, VIOLATIONS_DDL)


def _audit_group(table: pa.Table) -> pa.Table:
    return audit_table(table)


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
