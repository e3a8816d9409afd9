"""Rule coverage: which catalogue rules the suite has tests for.

Responsibility: collect a suite (the shipped `conformance/suite` unless told otherwise) with
pytest's own collection, read every test's `rules` marker, and count tests per rule and per
area against the catalogue.

Rules:
- Collection is pytest's (`--collect-only`, in-process, `--import-mode=importlib`), so
  parametrisation, class markers and `pytestmark` count exactly as in a run; no test runs and
  no broker is contacted.
- A rule is covered when at least one collected test names it; the client rules are covered
  by the client-side scenarios (`conformance.client_judge`), named "clients::<scenario>", which
  ship with (and are counted with) the shipped suite. Rule IDs that are not in the
  catalogue, and modules that fail to collect, are reported (`unknown`, `errors`), never
  dropped silently.
- Pytest's own output during collection is swallowed; only the result is returned.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.catalogue.rules import AREAS, Rule, all_rules
from conformance.client_judge.scenario import SCENARIOS
from conformance.client_judge.scenarios import AREA_MODULES
from conformance.suite import SUITE_DIR


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


class _Collector:
    """A pytest plugin object that keeps each collected item's rule ids and collection errors."""

    def __init__(self) -> None:
        self.tests: dict[str, list[str]] = {}
        self.errors: list[str] = []

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            last = str(report.longrepr).strip().splitlines()
            self.errors.append(f"{report.nodeid or '<session>'}: {last[-1] if last else 'collection failed'}")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            marker = item.get_closest_marker("rules")
            if marker is not None:
                self.tests[item.nodeid] = [str(a) for a in marker.args]


def collect(suite: Path = SUITE_DIR, extra_args: Sequence[str] = ()) -> tuple[dict[str, list[str]], list[str]]:
    """(node id -> rule ids, collection errors) for the tests under `suite`."""
    collector = _Collector()
    # -m "": every test counts for coverage, slow ones included (the repo default deselects them)
    args = [str(suite), "--collect-only", "-q", "-p", "no:cacheprovider", "--import-mode=importlib", "-m", "",
            *extra_args]
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code: Any = pytest.main(args, plugins=[collector])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED, pytest.ExitCode.INTERRUPTED) \
            and not collector.errors:
        collector.errors.append(f"pytest collection exited {int(code)}: {sink.getvalue().strip()[-300:]}")
    return collector.tests, collector.errors


def scenario_tests() -> dict[str, list[str]]:
    """The client-side scenarios (`amqp-conformance clients`) as tests of the client rules."""
    assert AREA_MODULES  # importing the package registered every scenario
    return {f"clients::{s.id}": list(s.rules) for s in SCENARIOS.values()}


def suite_coverage(suite: Path = SUITE_DIR) -> Coverage:
    tests, errors = collect(suite)
    if suite == SUITE_DIR:  # the shipped suite comes with the shipped client-side scenarios
        tests = {**tests, **scenario_tests()}
    return compute(tests, errors=errors)
