"""The clients x scenarios matrix: client-side runs (`amqp-conformance clients`) from the lake.

Responsibility: `collect_clients(lake, failing)` finds the runs whose profile is `client-side`
(`conformance.results.records.CLIENT_PROFILE`), keeps each client's latest, and collects their
scenario verdicts (one row per scenario) and every scenario's frame log into
`reports.model.ClientsData`: columns grouped by the client's language, rows in the order the
scenarios were played. A failing scenario also links to its test page (`build.frame_logs`).

Rules:
- Only the latest run of each client reaches the driver, with its frames (a scenario's log is
  bounded by the scenario: a few hundred frames at most); None when the lake has no
  client-side run (the report then has no clients pages).
- Everything shown comes from the lake, nothing from the client judge: a client's language is
  the one its run recorded (`client_runs.language_of`), else "?"; languages are ordered as in
  `LANGUAGE_NAMES` (Python first), unknown ones after them by name, and a language's clients by
  name. A scenario's title is the one its test recorded; scenarios are ordered by their place
  in the runs that played them (the judge plays them in its registry's order: one topic
  together), then by name.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.window import Window

from conformance.results.client_runs import language_of, scenario_of
from conformance.results.records import CLIENT_PROFILE
from reports.model import ClientColumn, ClientScenario, ClientsData, FailingTest

LANGUAGE_NAMES = {"python": "Python", "node": "Node.js", "go": "Go", "java": "Java", "c": "C", "ruby": "Ruby",
                  "php": "PHP"}
# the frame columns a scenario's log shows (render.frame_log_rows picks the fields it knows of these)
FRAME_COLUMNS = ("run_id", "test_id", "seq", "ts", "connection", "channel", "direction", "frame_type", "method",
                 "delivery_tag", "multiple", "requeue", "redelivered", "consumer_tag", "reply_code", "reply_text",
                 "body_size", "queue", "prefetch_count", "no_ack", "capabilities", "product", "version")


def language_name(recorded: str | None) -> str:
    """How a client's language is shown: the recorded one, else "?"."""
    if not recorded:
        return "?"
    return LANGUAGE_NAMES.get(recorded, recorded)


def column_order(column: ClientColumn) -> tuple[int, str, str]:
    """Languages in `LANGUAGE_NAMES`'s order (unknown ones after, by name); within one, by client name."""
    languages = list(LANGUAGE_NAMES.values())
    known = languages.index(column.language) if column.language in languages else len(languages)
    return (known, column.language, column.client)


def scenario_order(places: dict[str, int]) -> list[str]:
    """Scenarios by their earliest place in a run that played them, then by name."""
    return sorted(places, key=lambda name: (places[name], name))


def collect_clients(lake: Any, failing: list[FailingTest]) -> ClientsData | None:
    newest = Window.partitionBy("client").orderBy(F.col("started").desc(), F.col("run_id").desc())
    runs = (lake.runs.where(F.col("profile") == CLIENT_PROFILE)
            .withColumn("rank", F.row_number().over(newest)).where("rank = 1")
            .select("run_id", "client", "client_version", "started", "profile_detail").collect())
    if not runs:
        return None
    ids = [r.run_id for r in runs]
    tests = (lake.tests.where(F.col("run_id").isin(ids))
             .select("run_id", "test_id", "rule_ids", "verdict", "message", "duration", "title", "started").collect())
    logs = _frame_logs(lake, ids)
    pages = {(t.run_id, t.test_id): t.page for t in failing}
    by_run: dict[str, dict[str, ClientScenario]] = {r.run_id: {} for r in runs}
    rules: dict[str, list[str]] = {}
    titles: dict[str, str] = {}
    places: dict[str, int] = {}
    played: dict[str, int] = defaultdict(int)  # run id -> scenarios placed so far
    for t in sorted(tests, key=lambda t: (t.run_id, t.started, t.test_id)):
        name = scenario_of(t.test_id)
        rules.setdefault(name, list(t.rule_ids))
        if t.title:
            titles.setdefault(name, t.title)
        places[name] = min(places.get(name, played[t.run_id]), played[t.run_id])
        played[t.run_id] += 1
        by_run[t.run_id][name] = ClientScenario(name, list(t.rule_ids), t.verdict, t.message, float(t.duration),
                                                pages.get((t.run_id, t.test_id)), logs.get((t.run_id, t.test_id), []))
    columns = [ClientColumn(r.client, r.client_version, r.run_id, r.started, by_run[r.run_id],
                            language_name(language_of(r.profile_detail))) for r in runs]
    return ClientsData(sorted(columns, key=column_order), scenario_order(places), rules, titles)


def _frame_logs(lake: Any, run_ids: list[str]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(run id, test id) -> its frames in seq order, for every test of these runs."""
    frames = lake.frames
    wanted = frames.where(F.col("run_id").isin(run_ids)).select(*(c for c in FRAME_COLUMNS if c in frames.columns))
    table = wanted.toArrow()
    logs: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in table.sort_by([("run_id", "ascending"), ("test_id", "ascending"), ("seq", "ascending")]).to_pylist():
        logs[row["run_id"], row["test_id"]].append(row)
    return logs
