"""The trace audit's Spark plans: what the driver decides, before any frame is read.

Responsibility: choose and build the DataFrame plan that audits a results lake; the work of each
task (reading frames, replaying channels through the model) is `reports.audit.partition`'s.
- `audit_by_run` (the default): shuffle-free. The run partition directories (`reports.audit.lake`)
  are packed into a few tasks; each task reads its runs with pyarrow and audits them in a
  `mapInArrow` (`partition.audit_bins`). A channel never spans runs, so no data moves between
  tasks and every core runs the checker at in-process speed. Executors must see the results
  directory (shared storage on a cluster, see `reports.spark`).
- `audit_grouped`: any frames DataFrame (e.g. Spark Connect, or frames filtered in Spark):
  `groupBy(channel key).applyInArrow` with the same checker (`partition.audit_group`); each
  connection's context is computed first on the driver. Pays a shuffle.
- `driver`: `reports.audit.lake.audit_lake` in this process, no Python worker to start (a small
  lake on a local master).
- `tag_sequence_findings`: the ACK-01 check as SQL window functions (no Python at all),
  kept equal to the checker's `tag-sequence` findings by a test.
`audit_findings` runs the plan a report asked for and collects its findings in channel order.

Rules: all plans return DataFrames with the `reports.schema.VIOLATIONS` columns (or their rows).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from conformance.model.recorded_frames import KINDS, Context
from reports.audit.context import CONTEXT_COLUMNS, CONTEXT_METHODS, ConnectionKey, recording_contexts
from reports.audit.lake import audit_lake, pack, run_sizes
from reports.audit.partition import AUDIT_COLUMNS, KEY_COLUMNS, OPTIONAL_COLUMNS, audit_bins, audit_group
from reports.schema import VIOLATIONS_DDL

PLANS = ("by-run", "grouped", "driver")
_FINDING_ORDER = ("run_id", "test_id", "connection", "channel", "seq")


def audit_findings(spark: SparkSession, results_dir: str | Path, plan: str,
                   frames: Callable[[], DataFrame]) -> list[Row]:
    """The trace audit's findings with one of `PLANS`, in (run, test, connection, channel, seq) order.

    `frames()`, the lake's frames DataFrame, is called by the grouped plan only."""
    if plan == "driver":
        table = audit_lake(results_dir).sort_by([(c, "ascending") for c in _FINDING_ORDER])
        return [Row(**row) for row in table.to_pylist()]
    audit = audit_grouped(frames()) if plan == "grouped" else audit_by_run(spark, str(results_dir))
    return audit.orderBy(*_FINDING_ORDER).collect()


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
    function = audit_bins if worker_threads else partial(audit_bins, use_threads=False)
    return _spread(spark, bins).mapInArrow(function, VIOLATIONS_DDL)


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


def audit_grouped(frames: DataFrame) -> DataFrame:
    """Audit any frames DataFrame: one applyInArrow group per channel (shuffles the frames).

    Each connection's context (`reports.audit.context`) is computed first from the few rows
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
