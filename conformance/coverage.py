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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from conformance.catalogue.rules import AREAS, Rule, all_rules
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
            errors: Sequence[str] = ()) -> Coverage:
    """Coverage from a mapping node id -> rule ids."""
    rules = tuple(all_rules() if catalogue is None else catalogue)
    known = {r.id for r in rules}
    by_rule: dict[str, list[str]] = {}
    unknown: dict[str, list[str]] = {}
    for nodeid, ids in tests.items():
        for rule_id in dict.fromkeys(ids):
            (by_rule if rule_id in known else unknown).setdefault(rule_id, []).append(nodeid)
    return Coverage(tuple(RuleCoverage(r, tuple(by_rule.get(r.id, ()))) for r in rules),
                    {k: tuple(v) for k, v in unknown.items()}, tuple(errors))


def scenario_tests() -> dict[str, list[str]]:
    """The client-side scenarios (`amqp-conformance clients`) as tests of the client rules."""
    assert AREA_MODULES  # importing the package registered every scenario
    return {f"clients::{s.id}": list(s.rules) for s in SCENARIOS.values()}
