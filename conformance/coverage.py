"""Rule coverage: which catalogue rules the suite has tests for.

Responsibility: count tests per rule and per area against the catalogue, from what a collection
of the suite found (node id -> the rule ids of its `rules` marker). Collecting is pytest's and
belongs to the in-process runner (`conformance.gate.collect`); nothing here imports pytest.

Rules:
- A rule is covered when at least one collected test names it; the client rules are covered
  by the client-side scenarios (`conformance.client_judge`), named "clients::<scenario>", which
  ship with (and are counted with) the shipped suite. Rule IDs that are not in the
  catalogue, and modules that fail to collect, are reported (`unknown`, `errors`), never
  dropped silently.
- Clause coverage: a test names the clauses it checks (`clauses` marker, node id -> clause
  ids). A clause is tested when a collected test names it, `untestable` when the catalogue
  says no wire test can observe it, else it is a clause without a test. A clause id the
  catalogue lacks, or whose rule is not among the test's rules, is a `clause_problems` line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from conformance.catalogue.rules import AREAS, Clause, Rule, all_rules, clause_problem
from conformance.client_judge.scenario import SCENARIOS
from conformance.client_judge.scenarios import AREA_MODULES


@dataclass(frozen=True)
class RuleCoverage:
    rule: Rule
    tests: tuple[str, ...]  # node ids

    @property
    def covered(self) -> bool:
        return bool(self.tests)


@dataclass(frozen=True)
class ClauseCoverage:
    rule: Rule
    clause: Clause
    tests: tuple[str, ...]  # node ids of the tests that name the clause

    @property
    def untested(self) -> bool:
        """No test checks it and the catalogue does not call it untestable."""
        return not self.tests and self.clause.untestable is None


@dataclass(frozen=True)
class AreaCoverage:
    area: str
    rules: int
    covered: int
    tests: int  # tests with at least one rule of the area

    @property
    def percent(self) -> float:
        return 100.0 * self.covered / self.rules if self.rules else 0.0


@dataclass(frozen=True)
class Coverage:
    rules: tuple[RuleCoverage, ...]
    unknown: dict[str, tuple[str, ...]] = field(default_factory=dict)  # rule id -> node ids
    errors: tuple[str, ...] = ()  # collection errors, one line each
    clauses: tuple[ClauseCoverage, ...] = ()  # every clause of every rule, in catalogue order
    clause_problems: tuple[str, ...] = ()  # "<node id>: <what is wrong with its clauses marker>"

    def clauses_of(self, rule_id: str) -> list[ClauseCoverage]:
        return [c for c in self.clauses if c.rule.id == rule_id]

    def untested_clauses(self, area: str | None = None) -> list[ClauseCoverage]:
        return [c for c in self.clauses if c.untested and area in (None, c.rule.area)]

    def areas(self) -> list[AreaCoverage]:
        result = []
        for area in AREAS:
            entries = [r for r in self.rules if r.rule.area == area]
            if entries:
                tests = {t for r in entries for t in r.tests}
                result.append(AreaCoverage(area, len(entries), sum(r.covered for r in entries), len(tests)))
        return result

    def select(self, area: str | None = None, uncovered: bool = False) -> list[RuleCoverage]:
        return [r for r in self.rules if (area is None or r.rule.area == area) and not (uncovered and r.covered)]


def compute(tests: Mapping[str, Sequence[str]], catalogue: Sequence[Rule] | None = None,
            errors: Sequence[str] = (), clauses: Mapping[str, Sequence[str]] | None = None) -> Coverage:
    """Coverage from a mapping node id -> rule ids (and node id -> clause ids)."""
    rules = tuple(all_rules() if catalogue is None else catalogue)
    known = {r.id for r in rules}
    by_rule: dict[str, list[str]] = {}
    unknown: dict[str, list[str]] = {}
    for nodeid, ids in tests.items():
        for rule_id in dict.fromkeys(ids):
            (by_rule if rule_id in known else unknown).setdefault(rule_id, []).append(nodeid)
    by_clause, problems = _clause_tests(rules, tests, clauses or {})
    return Coverage(tuple(RuleCoverage(r, tuple(by_rule.get(r.id, ()))) for r in rules),
                    {k: tuple(v) for k, v in unknown.items()}, tuple(errors),
                    tuple(ClauseCoverage(r, c, tuple(by_clause.get(c.id, ()))) for r in rules for c in r.clauses),
                    tuple(problems))


def _clause_tests(rules: Sequence[Rule], tests: Mapping[str, Sequence[str]],
                  clauses: Mapping[str, Sequence[str]]) -> tuple[dict[str, list[str]], list[str]]:
    known = {c.id: c for r in rules for c in r.clauses}
    by_clause: dict[str, list[str]] = {}
    problems = []
    for nodeid, ids in clauses.items():
        for clause_id in dict.fromkeys(ids):
            problem = clause_problem(clause_id, tests.get(nodeid, ()), known)
            if problem:
                problems.append(f"{nodeid}: {problem}")
            else:
                by_clause.setdefault(clause_id, []).append(nodeid)
    return by_clause, problems


def short_names(nodeids: Sequence[str]) -> list[str]:
    """Test node ids as "<file>::<test>", once per test however it is parametrised."""
    return list(dict.fromkeys(n.rsplit("/", 1)[-1].split("[", 1)[0] for n in nodeids))


def scenario_tests() -> dict[str, list[str]]:
    """The client-side scenarios (`amqp-conformance clients`) as tests of the client rules."""
    assert AREA_MODULES  # importing the package registered every scenario
    return {f"clients::{s.id}": list(s.rules) for s in SCENARIOS.values()}
