"""The clients x scenarios matrix: client-side runs (`amqp-conformance clients`) from the lake.

Responsibility: `collect_clients(lake, failing)` finds the runs whose profile is `client-side`
(`conformance.plugin.results.CLIENT_PROFILE`), keeps each client's latest, and collects their
scenario verdicts (small: one row per scenario) into `reports.model.ClientsData`; a failing
scenario links to its test page, whose frame log the pipeline already pulls (`build.frame_logs`).

Rules: only the latest run of each client reaches the driver; None when the lake has no
client-side run (the report then has no clients pages).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.window import Window

from conformance.plugin.results import CLIENT_PROFILE
from reports.model import ClientColumn, ClientScenario, ClientsData, FailingTest


def scenario_of(test_id: str) -> str:
    """The scenario of a client-side test id ("clients/pika::server-cancel" gives "server-cancel")."""
    return test_id.rsplit("::", 1)[-1]


def collect_clients(lake: Any, failing: list[FailingTest]) -> ClientsData | None:
    newest = Window.partitionBy("client").orderBy(F.col("started").desc(), F.col("run_id").desc())
    runs = (lake.runs.where(F.col("profile") == CLIENT_PROFILE)
            .withColumn("rank", F.row_number().over(newest)).where("rank = 1")
            .select("run_id", "client", "client_version", "started").collect())
    if not runs:
        return None
    ids = [r.run_id for r in runs]
    tests = (lake.tests.where(F.col("run_id").isin(ids))
             .select("run_id", "test_id", "rule_ids", "verdict", "message", "duration").collect())
    pages = {(t.run_id, t.test_id): t.page for t in failing}
    by_run: dict[str, dict[str, ClientScenario]] = {r.run_id: {} for r in runs}
    rules: dict[str, list[str]] = {}
    for t in tests:
        name = scenario_of(t.test_id)
        rules.setdefault(name, list(t.rule_ids))
        by_run[t.run_id][name] = ClientScenario(name, list(t.rule_ids), t.verdict, t.message, float(t.duration),
                                                pages.get((t.run_id, t.test_id)))
    columns = [ClientColumn(r.client, r.client_version, r.run_id, r.started, by_run[r.run_id])
               for r in sorted(runs, key=lambda r: r.client)]
    order = sorted(rules, key=lambda name: (rules[name][0] if rules[name] else "", name))
    return ClientsData(columns, order, rules)
