"""Build the report: run the Spark jobs on a results directory, collect, render.

Responsibility: `build_report(spark, results_dir, out)` reads the lake, runs the jobs of
`reports.jobs` and the trace audit (`reports.audit.plan`, its findings shown with their frames by
`reports.audit.findings`), collects the small results into
`reports.model.ReportData` (with the clients x scenarios matrix of client-side runs,
`reports.clients`) and the client x rule matrix of each broker run raw and through client
libraries (`reports.through_clients`), pulls the frames of the failing tests, and writes the site with
`reports.render.render_site`.

Rules:
- Only aggregates, the latest runs' failing tests and their frames reach the driver; the
  frames of passing tests never leave Spark.
- Failing test pages cover each target's latest run, verdicts `failed` and `broken`, at most
  `max_failure_pages` of them (oldest test ids first, the rest listed without a page).
- The audit plan (`reports.audit.plan.PLANS`): "by-run" (default, shuffle-free, on the
  executors), "grouped" (per channel, reads only through Spark), or "driver" (in this process:
  the same checker with no Python worker to start; for a small lake on a local master, see `cli`).
- Jobs a lake cannot need are not run: history and flakes when no target has two runs (both
  are empty then), the frames table when no test failed and the audit does not read it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from conformance.catalogue.rules import AREAS, PROFILES, all_rules, rule
from conformance.results.records import CLIENT_PROFILE, TestRecord
from reports import jobs
from reports.audit.findings import attach_evidence, report_violations
from reports.audit.plan import PLANS, audit_findings
from reports.clients import collect_clients
from reports.model import (
    HISTORY_RUNS,
    BaselineEntry,
    Cell,
    Change,
    ClauseTest,
    FailingTest,
    Flake,
    ReportData,
    Rule,
    RunPoint,
    Target,
    page_for_test,
)
from reports.render import FrameLog, render_site
from reports.spark import read_results
from reports.through_clients import client_matrices, collect_reasons, reasons_of, runs_to_explain


@dataclass
class Lake:
    spark: SparkSession
    root: str | Path
    runs: DataFrame
    tests: DataFrame

    @cached_property
    def frames(self) -> DataFrame:
        """Read on first use: a report without failing tests may never need it."""
        return read_results(self.spark, self.root, "frames")


def read_lake(spark: SparkSession, root: str | Path) -> Lake:
    return Lake(spark, root, read_results(spark, root, "runs"), read_results(spark, root, "tests"))


def build_report(spark: SparkSession, results_dir: str | Path, out: str | Path, *,
                 max_failure_pages: int = 5000, audit_plan: str = "by-run") -> ReportData:
    """Compute and write the report for every run under `results_dir`; return its data."""
    lake = read_lake(spark, results_dir)
    verdicts = jobs.rule_verdicts(lake.tests, lake.runs, jobs.catalogue_frame(spark)).cache()
    try:
        data = collect(spark, lake, verdicts, str(results_dir), max_failure_pages, audit_plan)
        if any(t.profile == CLIENT_PROFILE for t in data.targets):  # else no client-side run: no job
            data.clients = collect_clients(lake, data.failing)
        render_site(data, out, frame_logs(lake.frames, data.failing) if data.failing else [])
    finally:
        verdicts.unpersist()
    return data


def collect(spark: SparkSession, lake: Lake, verdicts: DataFrame, results_dir: str, max_failure_pages: int,
            audit_plan: str) -> ReportData:
    if audit_plan not in PLANS:
        raise ValueError(f"audit plan {audit_plan!r}: one of {', '.join(PLANS)}")
    runs = [r.asDict() for r in jobs.runs_with_targets(lake.runs).collect()]
    repeated = max(Counter(r["target"] for r in runs).values(), default=0) > 1
    explained = runs_to_explain(runs)  # brokers run raw and through client libraries
    # Independent Spark jobs run concurrently: on small lakes the time goes to per-job latency.
    found = _concurrently({
        "scores": lambda: jobs.run_scores(verdicts).collect(),
        "areas": lambda: jobs.area_scores(verdicts).where("latest").collect(),
        "matrix": lambda: jobs.matrix(verdicts).collect(),
        "history": lambda: jobs.history(verdicts, lake.runs).collect() if repeated else [],
        "flakes": lambda: (jobs.flakes(verdicts).orderBy(F.desc("flips"), "target", "rule_id").collect()
                           if repeated else []),
        "recent": lambda: _recent_verdicts(verdicts).collect(),
        "tests": lambda: lake.tests.count(),
        "audit": lambda: audit_findings(spark, results_dir, audit_plan, lambda: lake.frames),
        "reasons": lambda: collect_reasons(lake.tests, explained) if explained else [],
    })
    latest = {r["run_id"]: r for r in runs if r["latest"]}
    clause_tests = _clause_tests(lake.tests, latest)
    failing = _failing_tests(lake.tests, latest, max_failure_pages)
    violations = report_violations(found["audit"], {r["run_id"]: r["target"] for r in runs},
                                   {(t.run_id, t.test_id): t for t in failing})
    if violations:
        attach_evidence(lake.frames, violations)
    changes = [_change(r) for r in found["history"]]
    latest_pairs = {(r, v["target"]) for r, v in latest.items()}
    recent = found["recent"]
    targets, rules = _targets(runs, found["scores"], found["areas"]), _rules(recent)
    matrix = _matrix(found["matrix"], failing)
    return ReportData(
        generated=datetime.now(UTC), results_dir=results_dir, runs=len(runs), tests=found["tests"],
        areas=_areas(recent), targets=targets, rules=rules, matrix=matrix, trend=[_point(r) for r in found["scores"]],
        changes=sorted((c for c in changes if (c.run_b, c.target) in latest_pairs),
                       key=lambda c: (not c.regression, _CHANGE_ORDER[c.change], c.target, c.rule_id)),
        regressions=sorted((c for c in changes if c.regression), key=lambda c: (c.run_b or "", c.rule_id),
                           reverse=True),
        flakes=[_flake(r) for r in found["flakes"]], violations=violations, failing=failing,
        rule_history=_rule_history(recent),
        client_matrices=client_matrices(targets, matrix, [r.id for r in rules], reasons_of(found["reasons"])),
        clause_tests=clause_tests)


_CHANGE_ORDER = {"changed": 0, "removed": 1, "added": 2}


def _concurrently(thunks: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="report-job") as pool:
        futures = {name: pool.submit(thunk) for name, thunk in thunks.items()}
        return {name: future.result() for name, future in futures.items()}


def _recent_verdicts(verdicts: DataFrame) -> DataFrame:
    """Each target's last `HISTORY_RUNS` runs: rule verdicts for the history dots, areas, unknown rules."""
    newest = F.max("ordinal").over(Window.partitionBy("target"))
    return (verdicts.withColumn("newest", newest).where(F.col("ordinal") > F.col("newest") - HISTORY_RUNS)
            .select("rule_id", "area", "target", "ordinal", "run_id", "verdict"))


def _areas(recent: list[Row]) -> list[str]:
    found = {r.area for r in recent if r.area}
    return [a for a in AREAS if a in found] + sorted(found - set(AREAS))


def _targets(runs: list[dict[str, Any]], scores: list[Row], areas: list[Row]) -> list[Target]:
    by_run = {r.run_id: r for r in scores}
    area_scores: dict[str, dict[str, float | None]] = defaultdict(dict)
    for row in areas:
        area_scores[row.run_id][row.area] = row.score
    counted: dict[str, int] = defaultdict(int)
    for run in runs:
        counted[run["target"]] += 1
    targets = []
    for run in sorted((r for r in runs if r["latest"]), key=lambda r: r["target"]):
        score = by_run.get(run["run_id"])
        targets.append(Target(
            label=run["target"], run_id=run["run_id"], started=_utc(run["started"]), product=run["product"],
            version=run["version"], profile=run["profile"], client=run["client"], broker_url=run["broker_url"],
            profile_detail=run["profile_detail"], client_version=run.get("client_version"),
            runs=counted[run["target"]], score=score.score if score else None,
            counts={v: getattr(score, v) for v in jobs.VERDICT_ORDER} if score else {},
            areas=area_scores.get(run["run_id"], {}), baseline=_baseline_entries(run, runs),
            cluster_nodes=list(run.get("cluster_nodes") or [])))
    return targets


def _baseline_entries(latest: dict[str, Any], runs: list[dict[str, Any]]) -> list[BaselineEntry]:
    """The latest run's baseline entries, each seen k of n over the target's runs judged with it."""
    def entries(run: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            return list(json.loads(run.get("baseline") or "{}").get("entries", []))
        except (ValueError, AttributeError):
            return []

    def key(entry: dict[str, Any]) -> tuple[Any, ...]:
        return entry["rule"], tuple(entry["tests"]), entry.get("message")

    history: dict[tuple[Any, ...], list[bool]] = defaultdict(list)
    for run in runs:
        if run["target"] == latest["target"]:
            for entry in entries(run):
                history[key(entry)].append(bool(entry["matched"]))
    return [BaselineEntry(e["rule"], list(e["tests"]), e.get("message"), bool(e["intermittent"]), e["reason"],
                          bool(e["matched"]), sum(history[key(e)]), len(history[key(e)])) for e in entries(latest)]


def _rules(recent: list[Row]) -> list[Rule]:
    catalogue = [Rule(r.id, r.area, r.title, r.text, r.source, r.tags, r.seeds, dict(r.expect), clauses=r.clauses)
                 for r in all_rules()]
    known = {r.id for r in catalogue}
    extra = sorted({(r.rule_id, r.area or "?") for r in recent if r.rule_id not in known})
    return catalogue + [Rule(rule_id, area, "(not in the catalogue)", "", "?", in_catalogue=False)
                        for rule_id, area in extra]


def _matrix(rows: list[Row], failing: list[FailingTest]) -> dict[str, dict[str, Cell]]:
    pages: dict[tuple[str, str], list[str]] = defaultdict(list)
    for test in failing:  # under the rules its failure names first, then the ones it left unjudged
        for rule_id in dict.fromkeys([*(test.failed_rules or ()), *test.rule_ids]):
            pages[rule_id, test.target].append(test.page)
    matrix: dict[str, dict[str, Cell]] = defaultdict(dict)
    for r in rows:
        matrix[r.rule_id][r.target] = Cell(r.verdict, r.run_id, r.tests, r.failing_tests or 0,
                                           pages.get((r.rule_id, r.target), []))
    return dict(matrix)


def _utc(value: datetime) -> datetime:
    """An aware UTC datetime: `collect()` hands back naive datetimes in the process's local time."""
    return value.astimezone(UTC)


def _point(r: Row) -> RunPoint:
    return RunPoint(r.run_id, r.target, _utc(r.started), r.ordinal, r.score, {v: getattr(r, v) for v in jobs.VERDICT_ORDER})


def _change(r: Row) -> Change:
    return Change(r.target, r.run_a, r.run_b, r.rule_id, r.verdict_a, r.verdict_b, r.change, bool(r.regression))


def _flake(r: Row) -> Flake:
    return Flake(r.target, r.rule_id, r.area, r.runs, r.flips, r.failures, r.sequence, r.last, float(r.flip_rate))


def _rule_history(recent: list[Row]) -> dict[str, dict[str, list[tuple[str, str]]]]:
    history: dict[str, dict[str, list[tuple[str, str]]]] = defaultdict(lambda: defaultdict(list))
    for r in sorted(recent, key=lambda r: r.ordinal):
        history[r.rule_id][r.target].append((r.run_id, r.verdict))
    return {rule: dict(targets) for rule, targets in history.items()}


def _clause_tests(tests: DataFrame, latest: dict[str, dict[str, Any]]) -> dict[str, list[ClauseTest]]:
    """Clause id -> the tests of the latest runs that name it (target order, then test id)."""
    rows = (tests.where(F.col("run_id").isin(list(latest)) & F.col("clause_ids").isNotNull())
            .select("run_id", "test_id", "verdict", F.explode("clause_ids").alias("clause_id")).collect())
    found: dict[str, list[ClauseTest]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (latest[r.run_id]["target"], r.test_id)):
        found[r.clause_id].append(ClauseTest(latest[r.run_id]["target"], r.test_id, r.verdict))
    return dict(found)


def _failing_tests(tests: DataFrame, latest: dict[str, dict[str, Any]], limit: int) -> list[FailingTest]:
    rows = (tests.where(F.col("run_id").isin(list(latest)) & F.col("verdict").isin("failed", "broken"))
            .orderBy("run_id", "test_id").limit(limit).collect())
    failing = []
    for r in rows:
        run = latest[r.run_id]
        record = {name: value for name, value in r.asDict().items() if name in _RECORD_FIELDS}
        record.update(started=_utc(r.started), failed_rules=list(record.get("failed_rules") or []))
        failing.append(FailingTest(**record, page=page_for_test(r.run_id, r.test_id), target=run["target"],
                                   profile=run["profile"], expected=_expected(r, run["profile"])))
    return failing


_RECORD_FIELDS = frozenset(f.name for f in fields(TestRecord))  # the lake's columns a failing test keeps


def _expected(r: Row, profile: str | None) -> list[tuple[str, str, str]]:
    """(rule, the profile that judged it, its expectation there): the broken rules first, as the run
    recorded them (base or extension profile); older lakes: every rule on the run's base profile."""
    judged = getattr(r, "judged_by", None)
    if judged:
        return [(parts[0], parts[1], parts[2]) for parts in (j.split(" ", 2) for j in judged) if len(parts) == 3]
    failed = list(getattr(r, "failed_rules", None) or [])
    return [(rule_id, profile or "?", _expectation(rule_id, profile))
            for rule_id in dict.fromkeys([*failed, *r.rule_ids])]


def _expectation(rule_id: str, profile: str | None) -> str:
    if profile not in PROFILES:
        return "see the rule"
    try:
        return rule(rule_id).expect[profile or ""]
    except KeyError:
        return "unknown rule"


def frame_logs(frames: DataFrame, failing: list[FailingTest]) -> list[FrameLog]:
    """The frames of the failing tests, one log per test page, in seq order."""
    if not failing:
        return []
    spark = frames.sparkSession
    keys = spark.createDataFrame([(t.run_id, t.test_id) for t in failing], "run_id STRING, test_id STRING")
    wanted = frames.join(F.broadcast(keys), ["run_id", "test_id"]).drop("run")
    table = wanted.toArrow()
    rows: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in table.sort_by([("run_id", "ascending"), ("test_id", "ascending"), ("seq", "ascending")]).to_pylist():
        rows[row["run_id"], row["test_id"]].append(row)
    return [(t.page, rows.get((t.run_id, t.test_id), [])) for t in failing]
