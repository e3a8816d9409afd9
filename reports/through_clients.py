"""The client x rule matrix: one broker's suite run raw and through client libraries.

Responsibility: `runs_to_explain(runs)` names the latest runs of every broker that more than one
client ran (a broker is (product, version, profile); a target adds the client), `collect_reasons`
collects those runs' non-passing test rows (one small Spark job, only when such a broker exists),
`reasons_of` groups their messages per (run, rule, verdict), and `client_matrices` lays out, per
broker, rules x clients from the rule verdicts the report already collected (`ReportData.matrix`).

Rules:
- The grouping is plain Python over collected rows: no Spark job per client or per broker.
- Columns: the raw driver's run first (client `raw`, or empty in older lakes), then the libraries
  by name; each column is that target's latest run. Client-side runs (`amqp-conformance clients`,
  the other direction) are no column.
- A cell is flagged when the raw run passes the rule and the client's run fails it: a bug of the
  client library, or a rule the library cannot express (its API sends something else).
- A cell's reasons are the distinct messages of the run's tests of the rule whose verdict is the
  rule's verdict (at most `MAX_REASONS`), e.g. why the rule is not-applicable through pika.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from conformance.results.records import CLIENT_PROFILE, RAW_CLIENT
from reports.model import Cell, ClientMatrix, ClientRuleCell, Target

RAW_CLIENTS = (RAW_CLIENT, "")
MAX_REASONS = 3
BrokerKey = tuple[str | None, str | None, str | None]  # product, version, profile
Reasons = dict[tuple[str, str, str], list[str]]  # (run id, rule id, verdict) -> distinct messages


def _shared(items: Iterable[Any], key: Any) -> list[list[Any]]:
    """The groups of `items` by broker that hold more than one client, client-side runs left out."""
    groups: dict[BrokerKey, list[Any]] = defaultdict(list)
    for item in items:
        product, version, profile, _client = key(item)
        if profile != CLIENT_PROFILE:
            groups[product, version, profile].append(item)
    return [group for _, group in sorted(groups.items(), key=lambda kv: tuple(str(k) for k in kv[0]))
            if len({key(item)[3] for item in group}) > 1]


def runs_to_explain(runs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The latest run of each client of every broker run by more than one client."""
    latest = [r for r in runs if r["latest"]]
    groups = _shared(latest, lambda r: (r["product"], r["version"], r["profile"], r["client"]))
    return sorted(r["run_id"] for group in groups for r in group)


def collect_reasons(tests: DataFrame, run_ids: list[str]) -> list[Row]:
    """The non-passing test rows of `run_ids`: a few hundred per run, collected once."""
    return (tests.where(F.col("run_id").isin(run_ids) & (F.col("verdict") != "passed"))
            .select("run_id", "rule_ids", "verdict", "message").collect())


def reasons_of(rows: Iterable[Any]) -> Reasons:
    found: Reasons = defaultdict(list)
    for r in rows:
        if not r.message:
            continue
        for rule_id in r.rule_ids:
            messages = found[r.run_id, rule_id, r.verdict]
            if r.message not in messages and len(messages) < MAX_REASONS:
                messages.append(r.message)
    return dict(found)


def broker_label(target: Target) -> str:
    """The target's label without its client: "RabbitMQ 3.10.8 · rabbitmq-3.10"."""
    return target.label.rsplit(" · ", 1)[0]


def client_matrices(targets: Iterable[Target], matrix: Mapping[str, Mapping[str, Cell]], rule_order: Iterable[str],
                    reasons: Reasons) -> list[ClientMatrix]:
    """One rules x clients matrix per broker run by more than one client."""
    order = list(rule_order)
    found = []
    for group in _shared(targets, lambda t: (t.product, t.version, t.profile, t.client)):
        columns = sorted(group, key=lambda t: (t.client not in RAW_CLIENTS, t.client))
        raw = columns[0].client if columns[0].client in RAW_CLIENTS else None
        cells: dict[str, dict[str, ClientRuleCell]] = {}
        for rule_id in order:
            row = {t.client: _cell(matrix[rule_id][t.label], rule_id, reasons)
                   for t in columns if t.label in matrix.get(rule_id, {})}
            if row:
                _flag(row, raw)
                cells[rule_id] = row
        found.append(ClientMatrix(broker_label(columns[0]), columns, [r for r in order if r in cells], cells, raw))
    return found


def _cell(cell: Cell, rule_id: str, reasons: Reasons) -> ClientRuleCell:
    return ClientRuleCell(cell.verdict, cell.run_id, reasons.get((cell.run_id, rule_id, cell.verdict), []),
                          list(cell.pages))


def _flag(row: dict[str, ClientRuleCell], raw: str | None) -> None:
    """Flag the clients that fail a rule the raw run passes."""
    if raw is None or raw not in row or row[raw].verdict != "passed":
        return
    for client, cell in row.items():
        cell.flagged = client != raw and cell.verdict == "failed"
