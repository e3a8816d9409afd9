"""Spark jobs over the results lake: pure DataFrame transforms, no actions, no I/O.

Responsibility: from the `runs` and `tests` tables compute what the report shows —
per-run rule verdicts, the conformance matrix (rule x target), per-area scores and the trend,
history and diffs between runs (added, removed, changed verdicts; regressions) and flakes.

Rules:
- A target is (product, version, profile, client); its label is "product version · profile ·
  client" (`unknown` for a broker that did not say).
- A test checks its own rules (`rule_ids`) and the rules its failure names (`failed_rules`). Under
  each it has its verdict, except that a `failed` test is failed only under the rules its failure
  names and `unjudged` ("not judged") under its other rules, as in the JUnit XML (a lake written
  before `failed_rules` existed: failed under all its rules). `failing_tests` counts the tests
  failed under that rule.
- A rule's verdict in a run is the worst of its tests' verdicts under it, in the order
  `conformance.plugin.verdicts.RULE_WORST_FIRST` (failed > broken > non-strict > unimplemented >
  needs-admin > needs-cluster > unjudged > passed > not-applicable > not-claimed): a rule is passed only when all
  its checks ran.
- Score = passed / (passed + failed + non-strict + unimplemented): not-applicable and not-claimed rules,
  rules whose checks were not run for want of `--broker-admin` (needs-admin) or of a cluster (needs-cluster), not judged ones and
  broken ones (the harness's fault, not the broker's) are left out. Null when nothing counts.
- Runs of a target are ordered by (started, run_id). The matrix shows each target's latest run.
- A regression is passed in run A, failed in the next run B of the same target. A flip is a
  change between passed and failed in consecutive runs; a (rule, target) with at least
  `min_flips` flips is flaky (one flip alone is a regression or a fix, not a flake).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from conformance.catalogue.rules import all_rules
from conformance.results.verdicts import RULE_WORST_FIRST, UNJUDGED
from conformance.results.verdicts import SCORED as SCORED_VERDICTS

VERDICT_ORDER = RULE_WORST_FIRST  # worst first
SCORED = tuple(v.value for v in SCORED_VERDICTS)
TARGET_COLUMNS = ("product", "version", "profile", "client")
LETTERS = {"passed": "P", "failed": "F", "non-strict": "N", "unimplemented": "U", "needs-admin": "A",
           "needs-cluster": "K", UNJUDGED: "J", "not-applicable": "-", "not-claimed": "c", "broken": "B"}


def target_label() -> Column:
    """`PRODUCT VERSION[ (cluster of N)] · PROFILE · CLIENT`: a run against a cluster (the run record
    names its N nodes) is a target of its own, so a grid's cluster row is never compared with the
    single node's."""
    nodes = F.size(F.coalesce(F.col("cluster_nodes"), F.array().cast("array<string>")))
    cluster = F.when(nodes > 0, F.concat(F.lit("(cluster of "), nodes.cast("string"), F.lit(")")))
    product = F.concat_ws(" ", F.coalesce(F.col("product"), F.lit("unknown")), F.col("version"), cluster)
    return F.concat_ws(" · ", product, F.coalesce(F.col("profile"), F.lit("?")), F.col("client"))


def runs_with_targets(runs: DataFrame) -> DataFrame:
    """runs + `target` label + `ordinal` (1 = the target's first run) + `latest` flag."""
    order = Window.partitionBy("target").orderBy("started", "run_id")
    newest = Window.partitionBy("target").orderBy(F.col("started").desc(), F.col("run_id").desc())
    return (runs.withColumn("target", target_label())
            .withColumn("ordinal", F.row_number().over(order))
            .withColumn("latest", F.row_number().over(newest) == 1))


def catalogue_frame(spark: SparkSession) -> DataFrame:
    rows = [(r.id, r.area, r.title, index) for index, r in enumerate(all_rules())]
    return spark.createDataFrame(rows, "rule_id STRING, rule_area STRING, title STRING, rule_order INT")


def _rank(verdict: Column) -> Column:
    ranked = F.lit(len(VERDICT_ORDER))
    for index, name in reversed(list(enumerate(VERDICT_ORDER))):
        ranked = F.when(verdict == name, F.lit(index)).otherwise(ranked)
    return ranked


def _verdict_of(rank: Column) -> Column:
    return F.element_at(F.array(*(F.lit(v) for v in (*VERDICT_ORDER, "unknown"))), rank + 1)


def per_rule_tests(tests: DataFrame) -> DataFrame:
    """One row per (test, rule it checks or its failure names): the test's verdict under that rule."""
    named = F.coalesce(F.col("failed_rules"), F.array().cast("array<string>"))
    checked = tests.select("run_id", "test_id", "area", "verdict", named.alias("named"),
                           F.explode(F.array_distinct(F.concat("rule_ids", named))).alias("rule_id"))
    other_rule = ((F.col("verdict") == "failed") & (F.size("named") > 0)
                  & ~F.array_contains(F.col("named"), F.col("rule_id")))
    return checked.withColumn("verdict", F.when(other_rule, F.lit(UNJUDGED)).otherwise(F.col("verdict"))).drop("named")


def rule_verdicts(tests: DataFrame, runs: DataFrame, catalogue: DataFrame) -> DataFrame:
    """One row per (run, rule): the rule's verdict in that run, with the run's target."""
    per_rule = (per_rule_tests(tests)
                .groupBy("run_id", "rule_id")
                .agg(_verdict_of(F.min(_rank(F.col("verdict")))).alias("verdict"),
                     F.count(F.lit(1)).alias("tests"),
                     F.sum((F.col("verdict") == "failed").cast("int")).alias("failing_tests"),
                     F.first("area").alias("test_area")))
    targets = runs_with_targets(runs).select("run_id", "target", *TARGET_COLUMNS, "started", "ordinal", "latest")
    return (per_rule.join(F.broadcast(targets), "run_id")
            .join(F.broadcast(catalogue), "rule_id", "left")
            .withColumn("area", F.coalesce("rule_area", "test_area"))
            .drop("rule_area", "test_area"))


def matrix(verdicts: DataFrame) -> DataFrame:
    """The conformance matrix in long form: (rule, target) -> verdict of the target's latest run."""
    return verdicts.where("latest").select("rule_id", "title", "area", "rule_order", "target", "run_id", "verdict",
                                          "tests", "failing_tests")


def _counts(columns: tuple[str, ...]) -> list[Column]:
    counts = [F.sum((F.col("verdict") == v).cast("int")).alias(v) for v in VERDICT_ORDER]
    scored = sum((F.sum((F.col("verdict") == v).cast("int")) for v in SCORED), F.lit(0))
    passed = F.sum((F.col("verdict") == "passed").cast("int"))
    score = F.when(scored > 0, passed / scored)
    return [*counts, F.count(F.lit(1)).alias("rules"), score.alias("score")]


def area_scores(verdicts: DataFrame) -> DataFrame:
    """Per (run, area): verdict counts and score."""
    keys = ("run_id", "target", "started", "ordinal", "latest", "area")
    return verdicts.groupBy(*keys).agg(*_counts(keys))


def run_scores(verdicts: DataFrame) -> DataFrame:
    """Per run: verdict counts and overall score (the trend over runs)."""
    keys = ("run_id", "target", "started", "ordinal", "latest")
    return verdicts.groupBy(*keys).agg(*_counts(keys))


def consecutive_pairs(runs: DataFrame) -> DataFrame:
    """(target, run_a, run_b, started_b) for each pair of consecutive runs of a target."""
    order = Window.partitionBy("target").orderBy("started", "run_id")
    with_previous = runs_with_targets(runs).withColumn("run_a", F.lag("run_id").over(order))
    return with_previous.where(F.col("run_a").isNotNull()).select(
        "target", "run_a", F.col("run_id").alias("run_b"), F.col("started").alias("started_b"))


def diff(verdicts: DataFrame, pairs: DataFrame) -> DataFrame:
    """Verdict changes between the runs of each pair: added, removed, changed; regressions."""
    a = verdicts.select(F.col("run_id").alias("run_a"), "rule_id", F.col("verdict").alias("verdict_a"))
    b = verdicts.select(F.col("run_id").alias("run_b"), "rule_id", F.col("verdict").alias("verdict_b"))
    keys = ["target", "run_a", "run_b", "rule_id"]
    runs = pairs.select("target", "run_a", "run_b")
    left = runs.join(a, "run_a")
    right = runs.join(b, "run_b")
    change = (F.when(F.col("verdict_a").isNull(), "added").when(F.col("verdict_b").isNull(), "removed")
              .when(F.col("verdict_a") != F.col("verdict_b"), "changed"))
    regression = (F.col("verdict_a") == "passed") & (F.col("verdict_b") == "failed")
    return (left.join(right, keys, "full")
            .withColumn("change", change)
            .withColumn("regression", F.coalesce(regression, F.lit(False)))
            .where(F.col("change").isNotNull())
            .join(F.broadcast(pairs), ["target", "run_a", "run_b"]))


def diff_runs(spark: SparkSession, verdicts: DataFrame, run_a: str, run_b: str) -> DataFrame:
    """The changes from run A to run B (any two runs, same target or not)."""
    pair = spark.createDataFrame([("-", run_a, run_b, None)],
                                 "target STRING, run_a STRING, run_b STRING, started_b TIMESTAMP")
    return diff(verdicts, pair)


def history(verdicts: DataFrame, runs: DataFrame) -> DataFrame:
    """Every change between consecutive runs of every target."""
    return diff(verdicts, consecutive_pairs(runs))


def flakes(verdicts: DataFrame, min_flips: int = 2) -> DataFrame:
    """(rule, target) pairs whose verdict flips between passed and failed across runs."""
    order = Window.partitionBy("target", "rule_id").orderBy("started", "run_id")
    decisive = verdicts.where(F.col("verdict").isin("passed", "failed"))
    flips = decisive.withColumn("previous", F.lag("verdict").over(order)).withColumn(
        "flip", (F.col("previous").isNotNull() & (F.col("previous") != F.col("verdict"))).cast("int"))
    letter = F.when(F.col("verdict") == "passed", "P").otherwise("F")
    sequence = F.array_join(F.transform(F.array_sort(F.collect_list(F.struct("started", "run_id", letter.alias("l")))),
                                        lambda x: x["l"]), "")
    return (flips.groupBy("target", "rule_id", "area")
            .agg(F.count(F.lit(1)).alias("runs"), F.sum("flip").alias("flips"),
                 F.sum((F.col("verdict") == "failed").cast("int")).alias("failures"),
                 sequence.alias("sequence"), F.max_by("verdict", F.struct("started", "run_id")).alias("last"))
            .where(F.col("flips") >= min_flips)
            .withColumn("flip_rate", F.col("flips") / (F.col("runs") - 1)))
