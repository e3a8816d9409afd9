"""What `amqp-conformance run` shows: live progress per area, then the summary (rich).

Responsibility: render the gate outcomes of a run as they arrive (a progress bar and a table
of counts per area), print unexpected failures and broken tests the moment they happen, and
print the final area x outcome table.

Rules:
- On a terminal the display is a rich `Live` refreshed from the reporting hooks (never from a
  background thread, so nothing is written while pytest captures a test's output), at most
  `REFRESH_PER_SECOND` times a second. Elsewhere (CI logs) it prints one line per unexpected
  failure or broken test and a count line every `LOG_EVERY` tests.
- Columns are the gate outcomes in `OUTCOMES` order; rows are the areas in catalogue order,
  then a total row. Zero counts print as ".".
- The summary (`summarise`) ends with the paths of the results, JUnit XML and pytest output,
  and the exit status with its meaning.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from conformance.catalogue.rules import AREAS
from conformance.gate.options import Outcome, Prepared
from conformance.results.baseline import EXPECTED, XPASS, lake_history
from conformance.results.evidence import TestEvidence
from conformance.results.verdicts import STATUS_TEXT, admin_hint, cluster_hint
from conformance.results.wording import plural

OUTCOMES = ("passed", XPASS, "failed", EXPECTED, "non-strict", "unimplemented", "needs-admin", "needs-cluster",
            "not-applicable", "not-claimed", "broken")
STYLES = {"passed": "green", XPASS: "cyan", "failed": "bold red", EXPECTED: "yellow", "non-strict": "magenta",
          "unimplemented": "blue", "needs-admin": "dim", "needs-cluster": "dim", "not-applicable": "dim",
          "not-claimed": "dim italic",
          "broken": "bold yellow"}
REFRESH_PER_SECOND = 8
LOG_EVERY = 50


def outcome_table(counts: Counter[tuple[str, str]], title: str | None = None) -> Table:
    """Areas x gate outcomes, with a total row."""
    table = Table(title=title, title_justify="left")
    table.add_column("area")
    for outcome in OUTCOMES:
        table.add_column(outcome, justify="right", style=STYLES[outcome])
    areas = [a for a in AREAS if any(counts[a, o] for o in OUTCOMES)]
    areas += sorted({a for a, _ in counts} - set(areas))
    for area in areas:
        table.add_row(area, *(str(counts[area, o] or ".") for o in OUTCOMES))
    table.add_row("total", *(str(sum(counts[a, o] for a in areas) or ".") for o in OUTCOMES), style="bold",
                  end_section=False)
    return table


class LiveProgress:
    """The running display; `update` after every finished test."""

    def __init__(self, console: Console, title: str) -> None:
        self.console, self.title = console, title
        self.counts: Counter[tuple[str, str]] = Counter()
        self.done = 0
        self.interactive = console.is_terminal
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             console=console)
        self._task = self._bar.add_task(title, total=None)
        self._live: Live | None = None
        self._last = 0.0

    def __enter__(self) -> LiveProgress:
        if self.interactive:
            self._live = Live(self._render(), console=self.console, auto_refresh=False, transient=True)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def set_total(self, total: int) -> None:
        known = self._bar.tasks[0].total
        self._bar.update(self._task, total=total)
        if not self.interactive and known != total:  # every pytest-xdist worker reports the same total
            self.console.print(f"{self.title}: {plural(total, 'test')}")
        self._refresh(force=True)

    def update(self, test: TestEvidence, outcome: str) -> None:
        self.done += 1
        self.counts[test.area, outcome] += 1
        self._bar.advance(self._task)
        if outcome in ("failed", "broken"):
            self._print_problem(test, outcome)
        if not self.interactive and self.done % LOG_EVERY == 0:
            total = self._bar.tasks[0].total
            self.console.print(f"{self.done}/{int(total) if total else '?'} tests: {self._counts_line()}")
        self._refresh()

    def _print_problem(self, test: TestEvidence, outcome: str) -> None:
        rules, first = test.headline()
        label = "FAILED" if outcome == "failed" else "BROKEN"
        line = Text.assemble((label, STYLES[outcome]), f" {rules} {test.test_key}: {first}")
        self.console.print(line, highlight=False, soft_wrap=True)

    def _counts_line(self) -> str:
        totals: Counter[str] = Counter()
        for (_, outcome), n in self.counts.items():
            totals[outcome] += n
        return ", ".join(f"{totals[o]} {o}" for o in OUTCOMES if totals[o])

    def _render(self) -> Group:
        return Group(self._bar.get_renderable(), outcome_table(self.counts))

    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._live is None or (not force and now - self._last < 1 / REFRESH_PER_SECOND):
            return
        self._last = now
        self._live.update(self._render(), refresh=True)


def problem_lines(tests: Iterable[tuple[TestEvidence, str]], limit: int = 25) -> list[str]:
    """One line per test with its outcome, rules and first message line (at most `limit`)."""
    lines = []
    items = list(tests)
    for test, outcome in items[:limit]:
        rules, first = test.headline()
        lines.append(f"{outcome}: {rules} {test.test_key}: {first}")
    if len(items) > limit:
        lines.append(f"... and {len(items) - limit} more (see the JUnit XML and the pytest output)")
    return lines


def summarise(console: Console, prepared: Prepared, outcome: Outcome, junit: Path) -> None:
    """The end of a run: the area x outcome table, the problems, XPASS entries, and where things are."""
    judged, options = outcome.judgement, prepared.options
    counts: Counter[tuple[str, str]] = Counter((t.area, judged.outcome(t)) for t in outcome.tests)
    console.print(outcome_table(counts, title=f"amqp-conformance: {plural(len(outcome.tests), 'test')}, profile "
                                              f"{outcome.profile}"))
    problems = [(t, judged.outcome(t)) for t in outcome.tests if judged.outcome(t) in ("failed", "broken")]
    for line in problem_lines(problems):
        console.print(line, style="red" if line.startswith("failed") else "yellow", highlight=False, markup=False,
                      soft_wrap=True)
    source = prepared.baseline.source if prepared.baseline else ""
    for deviation, pattern, nodeids in judged.xpasses:
        console.print(f"XPASS {deviation.describe(pattern)}: listed in {source} but passed "
                      f"({plural(len(nodeids), 'test')}); remove the entry to tighten the baseline", style="cyan", highlight=False, markup=False,
                      soft_wrap=True)
    expected = sum(judged.outcome(t) == EXPECTED for t in outcome.tests)
    if prepared.baseline is not None:
        console.print(f"baseline {source}: {plural(expected, 'expected failure')}, {len(judged.xpasses)} XPASS, "
                      f"{plural(len(judged.unexercised), 'entry', 'entries')} not exercised by this run",
                      highlight=False, markup=False)
    record = getattr(outcome.harness, "run", None)
    history = lake_history(options.out / "results", getattr(record, "broker_url", None)) if prepared.baseline else {}
    for line in judged.intermittent_lines(history):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    for wanting, hint in (("needs-admin", admin_hint), ("needs-cluster", cluster_hint)):
        if needing := sum(judged.outcome(t) == wanting for t in outcome.tests):
            console.print(hint(needing), style="bold", highlight=False, markup=False, soft_wrap=True)
    for line in _leak_lines(outcome.harness):
        console.print(line, style="yellow", highlight=False, markup=False)
    for line in time_lines(outcome.tests, outcome.seconds):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    results = options.out / "results"
    console.print(f"results: {results} (run {prepared.run_id})\njunit:   {junit}\npytest:  "
                  f"{options.out / 'pytest-output.txt'}", highlight=False, markup=False)
    if not options.report:
        console.print(f"report:  amqp-conformance report {results} --out {options.out / 'report'}",
                      highlight=False, markup=False)
    if outcome.problem:
        console.print(outcome.problem, style="bold yellow", highlight=False, markup=False)
    console.print(f"exit status {outcome.exit_status}: {STATUS_TEXT[outcome.exit_status]}", style="bold",
                  highlight=False, markup=False)




def time_lines(tests: Sequence[TestEvidence], seconds: float, shown: int = 3) -> list[str]:
    """Where the time went: the run's wall time, then the areas and the tests that took longest (test
    time summed per area, setup and teardown included; with --jobs the sums exceed the wall time)."""
    if not tests:
        return []
    areas: dict[str, float] = {}
    for test in tests:
        areas[test.area] = areas.get(test.area, 0.0) + test.duration
    slowest = sorted(tests, key=lambda t: t.duration, reverse=True)[:shown]
    return [f"time: {seconds:.0f} s; slowest areas: "
            + ", ".join(f"{area} {spent:.0f} s" for area, spent in sorted(areas.items(), key=lambda a: -a[1])[:shown]),
            "      slowest tests: " + ", ".join(f"{t.test_key} {t.duration:.1f} s" for t in slowest)]


def _leak_lines(harness: Any) -> list[str]:
    leaks = getattr(harness, "leaks", None)
    if leaks is None or leaks.clean:
        return []
    lines = [f"leftover (this run, found by {leaks.method}): {e}" for e in leaks.ours]
    return lines + ([f"leak check: {leaks.error}"] if leaks.error else [])
