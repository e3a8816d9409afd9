"""The report's data: plain records between the Spark pipeline and the HTML renderer.

Responsibility: hold everything one report shows, as small JSON-able dataclasses, so the
renderer (`reports.render`) is tested without Spark and the collector (`reports.build`) without
templates.

Rules: no behaviour beyond naming (page slugs, target slugs) and the JSON summary; values
are already computed (scores are fractions in [0, 1] or None when nothing counts). A record of
the results lake is not written out again: a failing test is its `TestRecord` plus the report's
fields.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from conformance.catalogue.rules import Clause
from conformance.results.records import TestRecord

HISTORY_RUNS = 30
VERDICTS = ("passed", "failed", "non-strict", "unimplemented", "needs-admin", "needs-cluster", "unjudged",
            "not-applicable", "not-claimed", "broken")


def slug(text: str) -> str:
    """A file-name-safe slug: lower-case words joined by '-' (non-empty)."""
    words = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")
    return words or "x"


def page_for_test(run_id: str, test_id: str) -> str:
    """The page name of one test of one run: readable prefix + stable hash."""
    digest = hashlib.sha1(f"{run_id}\0{test_id}".encode()).hexdigest()[:10]
    name = test_id.rsplit("::", 1)[-1]
    return f"{slug(name)[:48]}-{digest}"


@dataclass
class Target:
    label: str
    run_id: str
    started: datetime
    product: str | None
    version: str | None
    profile: str | None
    client: str
    broker_url: str
    runs: int
    score: float | None
    counts: dict[str, int]
    areas: dict[str, float | None]  # area -> score in the latest run
    profile_detail: str | None = None  # why that profile: base, claims, rules each adds (one per line)
    client_version: str | None = None  # the client library's version, when the run recorded it
    baseline: list[BaselineEntry] = field(default_factory=list)  # the latest run's baseline entries
    cluster_nodes: list[str] = field(default_factory=list)  # a cluster run: its nodes (URLs without the password)

    @property
    def slug(self) -> str:
        return slug(self.label)


@dataclass
class BaselineEntry:
    """One baseline entry of a target's latest run, and how often the target's runs with a baseline saw it."""

    rule: str
    tests: list[str]
    message: str | None
    intermittent: bool
    reason: str
    seen_now: bool  # matched a failure in the latest run
    seen_runs: int  # runs of this target (with this entry) in which it matched a failure
    runs: int  # runs of this target judged with this entry


@dataclass
class RunPoint:
    run_id: str
    target: str
    started: datetime
    ordinal: int
    score: float | None
    counts: dict[str, int]


@dataclass
class Cell:
    verdict: str
    run_id: str
    tests: int
    failing_tests: int
    pages: list[str] = field(default_factory=list)  # failing test pages of this rule and target


@dataclass
class Rule:
    id: str
    area: str
    title: str
    text: str
    source: str
    tags: tuple[str, ...] = ()
    seeds: tuple[str, ...] = ()
    expect: dict[str, str] = field(default_factory=dict)
    in_catalogue: bool = True
    clauses: tuple[Clause, ...] = ()  # the behaviours the rule promises (catalogue clauses)


@dataclass(frozen=True)
class ClauseTest:
    """A test of a target's latest run that names a clause, with its verdict there."""

    target: str
    test_id: str
    verdict: str


@dataclass
class Reply:
    scope: str | None
    code: int | None
    text: str | None
    class_id: int | None
    method_id: int | None

    def __bool__(self) -> bool:
        return self.code is not None


@dataclass
class Violation:
    target: str
    run_id: str
    test_id: str
    connection: int
    channel: int
    seq: int
    kind: str
    rule_id: str
    severity: str
    detail: str
    page: str | None = None  # the test's page, when it has one
    window: list[EvidenceFrame] = field(default_factory=list)  # the channel's frames around `seq`


@dataclass(frozen=True)
class EvidenceFrame:
    """One recorded frame shown as evidence of a finding."""

    seq: int
    direction: str
    what: str  # the method, or the frame type
    fields: str  # the key fields, e.g. "delivery_tag=3 multiple"


@dataclass(kw_only=True)
class FailingTest(TestRecord):
    """A failed or broken test of a target's latest run: its results record (the fields of
    `conformance.results.records.TestRecord`, as the lake holds them) and what the report adds."""

    page: str
    target: str
    profile: str | None  # the run's base profile
    expected: list[tuple[str, str, str]] = field(default_factory=list)  # (rule, judging profile, expectation)
    violations: list[Violation] = field(default_factory=list)

    @property
    def reply(self) -> Reply:
        """The broker's last close, if any (false when there was none)."""
        return Reply(self.reply_scope, self.reply_code, self.reply_text, self.reply_class_id, self.reply_method_id)


@dataclass
class Change:
    target: str
    run_a: str | None
    run_b: str | None
    rule_id: str
    verdict_a: str | None
    verdict_b: str | None
    change: str
    regression: bool


@dataclass
class Flake:
    target: str
    rule_id: str
    area: str | None
    runs: int
    flips: int
    failures: int
    sequence: str
    last: str
    flip_rate: float


@dataclass
class ClientScenario:
    """One scenario's verdict for one client (the latest client-side run of that client)."""

    scenario: str
    rule_ids: list[str]
    verdict: str
    message: str | None
    duration: float
    page: str | None = None  # the failing test's page (tests/<page>.html, frames/<page>.js)
    frames: list[dict[str, Any]] = field(default_factory=list)  # its frame log, seq order (the client's directions)


@dataclass
class ClientColumn:
    client: str
    version: str | None
    run_id: str
    started: datetime
    scenarios: dict[str, ClientScenario]  # scenario id -> verdict
    language: str = "?"  # as shown: "Python", "Go", "Node.js"

    @property
    def slug(self) -> str:
        return slug(self.client)

    def count(self, verdict: str) -> int:
        return sum(s.verdict == verdict for s in self.scenarios.values())

    def log_page(self, scenario: str) -> str:
        """The (client, scenario) page, relative to the site root: its verdict and frame log."""
        return f"clients/{self.slug}/{slug(scenario)}.html"


@dataclass
class ClientsData:
    """The clients x scenarios matrix (client-side runs, `amqp-conformance clients`).

    `clients` is in column order: grouped by language (`groups`), the languages in the registry's order.
    """

    clients: list[ClientColumn]
    scenarios: list[str]  # row order
    rules: dict[str, list[str]]  # scenario -> rule ids
    titles: dict[str, str] = field(default_factory=dict)  # scenario -> what it plays

    @property
    def groups(self) -> list[tuple[str, list[ClientColumn]]]:
        """(language, its columns) in column order; a language whose columns are not adjacent repeats."""
        found: list[tuple[str, list[ClientColumn]]] = []
        for column in self.clients:
            if found and found[-1][0] == column.language:
                found[-1][1].append(column)
            else:
                found.append((column.language, [column]))
        return found

    def first_of_group(self, column: ClientColumn) -> bool:
        return any(columns[0] is column for _language, columns in self.groups)

    def total(self, verdict: str) -> int:
        return sum(column.count(verdict) for column in self.clients)


@dataclass
class ClientRuleCell:
    """One rule's verdict in the latest run of one client of a broker (`ClientMatrix`)."""

    verdict: str
    run_id: str
    reasons: list[str] = field(default_factory=list)  # distinct messages of its tests with that verdict
    pages: list[str] = field(default_factory=list)  # failing test pages (tests/<page>.html)
    flagged: bool = False  # the raw run passes the rule, this client fails it


@dataclass
class ClientMatrix:
    """Rules x clients of one broker (product, version, profile): the suite raw and through libraries."""

    broker: str  # "RabbitMQ 3.10.8 · rabbitmq-3.10"
    columns: list[Target]  # one per client, raw first
    rules: list[str]  # row order: the catalogue's
    cells: dict[str, dict[str, ClientRuleCell]]  # rule id -> client -> cell
    raw: str | None = None  # the raw driver's column ("raw"), None when the broker has no raw run

    @property
    def slug(self) -> str:
        return slug(self.broker)

    @property
    def flagged(self) -> list[tuple[str, str]]:
        """(rule id, client) of every cell that passes raw and fails through the client."""
        return [(rule_id, client) for rule_id in self.rules for client, cell in self.cells[rule_id].items()
                if cell.flagged]

    def library_judged(self, rule_id: str) -> bool:
        """Whether some client library (not the raw driver) ran a check of the rule."""
        return any(client != self.raw and cell.verdict not in ("not-applicable", "not-claimed")
                   for client, cell in self.cells.get(rule_id, {}).items())


@dataclass
class ReportData:
    generated: datetime
    results_dir: str
    runs: int
    tests: int
    areas: list[str]
    targets: list[Target]
    rules: list[Rule]
    matrix: dict[str, dict[str, Cell]]  # rule id -> target label -> cell
    trend: list[RunPoint]
    changes: list[Change]  # between each target's two latest runs
    regressions: list[Change]  # every regression in the history
    flakes: list[Flake]
    violations: list[Violation]
    failing: list[FailingTest]
    # rule id -> target -> [(run id, verdict)], oldest first (the target's last `HISTORY_RUNS` runs)
    rule_history: dict[str, dict[str, list[tuple[str, str]]]] = field(default_factory=dict)
    clients: ClientsData | None = None  # client-side runs, when the lake holds any
    client_matrices: list[ClientMatrix] = field(default_factory=list)  # brokers run raw and through libraries
    clause_tests: dict[str, list[ClauseTest]] = field(default_factory=dict)  # clause id -> latest runs' tests

    def untested_clauses(self) -> list[tuple[Rule, Clause]]:
        """The clauses no test of a latest run names and the catalogue does not call untestable."""
        return [(r, c) for r in self.rules for c in r.clauses
                if c.untestable is None and not self.clause_tests.get(c.id)]

    def clause_counts(self) -> dict[str, Any]:
        """The catalogue's clauses: how many, how many untestable, the ids without a test."""
        return {"total": sum(len(r.clauses) for r in self.rules),
                "untestable": sum(c.untestable is not None for r in self.rules for c in r.clauses),
                "without_test": [c.id for _, c in self.untested_clauses()]}

    def summary(self) -> dict[str, Any]:
        """The JSON summary (summary.json): one entry per target, and the totals."""
        return {
            "generated": self.generated.isoformat(),
            "runs": self.runs,
            "tests": self.tests,
            "targets": [
                {"target": t.label, "slug": t.slug, "run_id": t.run_id, "started": t.started.isoformat(),
                 "product": t.product, "version": t.version, "profile": t.profile, "client": t.client,
                 "runs": t.runs, "score": t.score, "counts": t.counts, "areas": t.areas,
                 "badge": f"badges/{t.slug}.svg"}
                for t in self.targets
            ],
            "regressions": len(self.regressions),
            "flakes": len(self.flakes),
            "violations": {"errors": sum(v.severity == "error" for v in self.violations),
                           "warnings": sum(v.severity == "warning" for v in self.violations),
                           "unjudged": sum(v.severity == "unjudged" for v in self.violations)},
            "failing_tests": len(self.failing),
            "clauses": self.clause_counts(),
            "through_clients": [
                {"broker": m.broker, "page": f"through/{m.slug}.html", "clients": [t.client for t in m.columns],
                 "flagged": [list(pair) for pair in m.flagged]}
                for m in self.client_matrices
            ],
        }
