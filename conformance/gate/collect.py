"""Collecting the suite the way a run would, for `amqp-conformance rules` (rule coverage).

Responsibility: pytest's own collection of a suite (the shipped `conformance/suite` unless told
otherwise), read every test's `rules` marker, and hand the result to the pure count
(`conformance.coverage.compute`).

Rules:
- Each test's `clauses` marker is read too (clause coverage, `Coverage.clauses`).
- Collection is pytest's (`--collect-only`, in-process, `--import-mode=importlib`), so
  parametrisation, class markers and `pytestmark` count exactly as in a run; no test runs and
  no broker is contacted.
- The shipped suite comes with the shipped client-side scenarios (`coverage.scenario_tests`).
- Pytest's own output during collection is swallowed; a module that fails to collect is
  reported as an error line, never dropped.
- `python -m conformance.gate.collect --count [--suite DIR] SELECTOR...` prints how many tests
  of the suite a selection keeps (`amqp-conformance run` sizes its default worker count so,
  in a process of its own: `conformance.gate.options.selected_tests`).
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from conformance.catalogue.selection import parse_selection
from conformance.coverage import Coverage, compute, scenario_tests
from conformance.results.verdicts import EXIT_OK, EXIT_USAGE
from conformance.suite import SUITE_DIR


class _Collector:
    """A pytest plugin object that keeps each collected item's rule ids and collection errors."""

    def __init__(self) -> None:
        self.tests: dict[str, list[str]] = {}
        self.clauses: dict[str, list[str]] = {}
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
            clauses = item.get_closest_marker("clauses")
            if clauses is not None:
                self.clauses[item.nodeid] = [str(a) for a in clauses.args]


def collect(suite: Path = SUITE_DIR, extra_args: Sequence[str] = ()) -> tuple[dict[str, list[str]], list[str]]:
    """(node id -> rule ids, collection errors) for the tests under `suite`."""
    collector = _collect(suite, extra_args)
    return collector.tests, collector.errors


def _collect(suite: Path, extra_args: Sequence[str] = ()) -> _Collector:
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
    return collector


def suite_coverage(suite: Path = SUITE_DIR) -> Coverage:
    """The rule coverage of the tests under `suite`."""
    collector = _collect(suite)
    tests = collector.tests
    if suite == SUITE_DIR:  # the shipped suite comes with the shipped client-side scenarios
        tests = {**tests, **scenario_tests()}
    return compute(tests, errors=collector.errors, clauses=collector.clauses)


def count_selected(selectors: Sequence[str], suite: Path = SUITE_DIR) -> int:
    """How many tests under `suite` the selection `selectors` keeps (conformance.catalogue.selection)."""
    selection = parse_selection(selectors)
    tests, _errors = collect(suite)
    return sum(1 for rules in tests.values() if selection.keeps(rules))


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[:1] != ["--count"]:
        print("usage: python -m conformance.gate.collect --count [--suite DIR] SELECTOR...", file=sys.stderr)
        return EXIT_USAGE
    args = args[1:]
    suite = SUITE_DIR
    if args[:1] == ["--suite"] and len(args) >= 2:
        suite, args = Path(args[1]), args[2:]
    print(count_selected(args, suite))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
