"""The grid page (grid.html): brokers x rules grouped by area, clients x brokers, the interop
score and what changed since each target's previous run.

Responsibility: `grid_data(data)` lays out, from what the report already collected with Spark
(`ReportData`: the targets, the rule x target matrix, each rule's recent history per target and
the flakes), the grid of `amqp-conformance grid` (or of any lake with several targets).

Rules:
- A broker column is a target run raw (client `raw`, or empty in older lakes); a client run of
  the same broker (product, version, profile) is a cell of the clients x brokers table: its score,
  linking to the broker's rules x clients page (through/<slug>.html) when it has one.
- One letter per cell: P passed, F failed, S non-strict, U unimplemented, A not run (needs admin
  or a cluster), N not applicable, C not claimed, B broken, blank when the target has no verdict.
  A cell links to the failing test's page when it has one, else to the rule's page.
- The interop score is the share of rules that every RabbitMQ-compatible broker column (profile
  not `amqp-0-9-1`) passes, among the rules at least one of them judged (a scored verdict),
  overall and per area, beside each broker's own score.
- A cell whose verdict differs from the target's previous run of it is marked; the same target
  has the same version, so no version explains it: a regression (passed before, failed now), or,
  when the rule flips in that target's history (`ReportData.flakes`), a flake, else a change.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from conformance.results.records import CLIENT_PROFILE
from conformance.results.verdicts import SCORED
from reports.model import ReportData, Target
from reports.through_clients import RAW_CLIENTS, broker_label

LETTERS = {"passed": "P", "failed": "F", "non-strict": "S", "unimplemented": "U", "needs-admin": "A",
           "needs-cluster": "A", "unjudged": "A", "not-applicable": "N", "not-claimed": "C", "broken": "B"}
PLAIN = "amqp-0-9-1"


@dataclass
class GridCell:
    letter: str
    verdict: str
    href: str
    change: str | None = None  # "regression", "flake" or "change" (since the previous run)
    before: str | None = None  # the previous run's verdict, when it changed


@dataclass
class GridArea:
    area: str
    rules: list[tuple[str, str, list[GridCell | None]]]  # (rule id, title, one cell per broker)
    interop: float | None
    changed: int


@dataclass
class ClientRow:
    client: str
    cells: list[tuple[float | None, str] | None]  # per broker: (score, href)


@dataclass
class GridData:
    brokers: list[Target]
    compatible: list[bool]  # per broker: judged for the interop score
    areas: list[GridArea]
    clients: list[ClientRow]
    interop: float | None
    changed: int = 0
    flakes: list[str] = field(default_factory=list)


def _is_raw(target: Target) -> bool:
    return target.client in RAW_CLIENTS and target.profile != CLIENT_PROFILE


def _share(passed: int, judged: int) -> float | None:
    return passed / judged if judged else None


def grid_data(data: ReportData) -> GridData | None:
    """The grid of the lake's latest runs; None without any broker target."""
    brokers = sorted((t for t in data.targets if _is_raw(t)), key=lambda t: t.label)
    if not brokers:
        return None
    compatible = [t.profile != PLAIN for t in brokers]
    flaky = {(f.target, f.rule_id) for f in data.flakes}
    by_area: dict[str, list[tuple[str, str, list[GridCell | None]]]] = defaultdict(list)
    passed_all: dict[str, int] = defaultdict(int)
    judged_any: dict[str, int] = defaultdict(int)
    changed = 0
    for rule in data.rules:
        row: list[GridCell | None] = []
        for target in brokers:
            cell = data.matrix.get(rule.id, {}).get(target.label)
            if cell is None:
                row.append(None)
                continue
            href = f"tests/{cell.pages[0]}.html" if cell.pages else f"rules/{rule.id}.html"
            found = GridCell(LETTERS.get(cell.verdict, "?"), cell.verdict, href)
            history = data.rule_history.get(rule.id, {}).get(target.label, [])
            if len(history) >= 2 and history[-2][1] != history[-1][1]:
                found.before = history[-2][1]
                found.change = ("flake" if (target.label, rule.id) in flaky else
                                "regression" if (found.before, cell.verdict) == ("passed", "failed") else "change")
                changed += 1
            row.append(found)
        scored = [c for c, ok in zip(row, compatible, strict=True) if ok and c is not None and c.verdict in SCORED]
        if scored:
            judged_any[rule.area] += 1
            everyone = [c for c, ok in zip(row, compatible, strict=True) if ok]
            if all(c is not None and c.verdict == "passed" for c in everyone):
                passed_all[rule.area] += 1
        if any(c is not None for c in row):
            by_area[rule.area].append((rule.id, rule.title, row))
    areas = [GridArea(a, by_area[a], _share(passed_all[a], judged_any[a]),
                      sum(1 for _, _, r in by_area[a] for c in r if c is not None and c.change))
             for a in data.areas if by_area.get(a)]
    return GridData(brokers, compatible, areas, _client_rows(data, brokers),
                    _share(sum(passed_all.values()), sum(judged_any.values())), changed,
                    sorted(f"{f.rule_id} on {f.target}" for f in data.flakes))


def _client_rows(data: ReportData, brokers: list[Target]) -> list[ClientRow]:
    pages = {m.broker: f"through/{m.slug}.html" for m in data.client_matrices}
    keys = [(t.product, t.version, t.profile) for t in brokers]
    runs: dict[str, dict[tuple[str | None, str | None, str | None], Target]] = defaultdict(dict)
    for target in data.targets:
        if target.profile == CLIENT_PROFILE:
            continue
        runs[target.client or "raw"][(target.product, target.version, target.profile)] = target
    rows = []
    for client in sorted(runs, key=lambda c: (c not in RAW_CLIENTS, c)):
        cells: list[tuple[float | None, str] | None] = []
        for key in keys:
            found = runs[client].get(key)
            cells.append(None if found is None else
                         (found.score, pages.get(broker_label(found), f"badges/{found.slug}.svg")))
        rows.append(ClientRow(client, cells))
    return rows
