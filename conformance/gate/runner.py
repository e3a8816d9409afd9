"""`amqp-conformance run`: the suite against one broker, judged as a CI gate (docs/design.md decision 8).

Responsibility: validate the options, start the embedded reference broker when no URL is
given, check that the broker answers, run the shipped suite in-process with the pytest plugin
(optionally across pytest-xdist workers), show progress, judge the verdicts against a
baseline, write JUnit XML, and return the exit status.

Rules:
- Exit statuses: 0 no unexpected result; 1 an unexpected `failed` verdict (or, with
  `--strict-baseline`, an XPASS); 2 a harness or environment error (a `broken` verdict, a
  collection error, pytest's internal error, an interrupt, a report that could not be built);
  3 the broker is unreachable or refuses the credentials (before the run: "authentication
  refused") or went down during it; 4 a usage error.
  The highest-priority condition wins: 4, then 3, then 2, then 1.
- Usage errors are found before anything starts and raised as `UsageError` with one line:
  a bad URL, profile, client, admin, baseline, selector, job count, timeout scale or budget.
- `--test-timeout` / `--run-timeout` (the plugin's `watchdog`) bound every rule test and
  the session: a test overrun makes that test `broken` (status 2) unless a fresh connection
  then fails too (broker down, status 3); a session overrun ends the run with status 3 and
  "broker down: watchdog: ..."; the stacks go to stderr.
- `--cluster-node embedded` starts the embedded broker as a 3-node cluster and hands pytest its
  nodes and node control; otherwise `--cluster-node`/`--node-control` pass through as given.
- The embedded broker serves the management API too, and is the `--broker-admin` unless one
  is given, so admin-dependent rules run.
- Output directory (`--out`): `results/` (the Parquet results lake, runs accumulate),
  `junit.xml` and `pytest-output.txt` (this run), `report/` (with `--report`, built by the
  `report` callable the front door passes: nothing here imports the reports).
- pytest's own terminal output goes to `pytest-output.txt`; the console shows `progress`.
- Every test the run announced is counted: one that ends without a verdict (a crashed worker)
  or never reports (the run ended first) is `broken`, saying so (`RunCollector.finished_tests`).
- The pytest configuration of the current directory does not change the run (`addopts` is
  cleared); slow tests are included.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import pytest
from rich.console import Console

from conformance.drivers.raw import DriverError, RawClient
from conformance.embedded import start as start_embedded
from conformance.gate.options import EnvironmentFailure, Outcome, Prepared, RunOptions, UsageError, prepare
from conformance.gate.progress import LiveProgress, summarise
from conformance.plugin.evidence import TestEvidence, from_report
from conformance.plugin.health import connect_failure
from conformance.plugin.session import HARNESS, GivenRun
from conformance.results.baseline import EXPECTED, Baseline, judge, judgement_json
from conformance.results.junit import RunInfo, write_junit
from conformance.results.records import redact_url
from conformance.results.verdicts import (
    EXIT_HARNESS,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    exit_status,
)
from conformance.run.config import RunConfig
from conformance.run.nodes import (
    EMBEDDED_NODES,
    embedded_cluster,
)
from conformance.suite import SUITE_DIR


class RunCollector:
    """A pytest plugin object (controller side) collecting each test's evidence as it finishes."""

    def __init__(self, progress: Any, baseline: Baseline | None, profile: str | None) -> None:
        self.progress, self.baseline, self.profile = progress, baseline, profile
        self.tests: list[TestEvidence] = []
        self.unjudged: dict[str, str] = {}  # failed reports that never got a verdict (a crashed worker)
        self.collected: list[str] = []  # the tests the run announced
        self.reported: set[str] = set()  # the tests that reached their teardown report
        self.collection_errors: list[str] = []
        self.internal_error = self.interrupted = False
        self.harness: Any = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:
            self.progress.set_total(len(session.items))
            self.collected = [item.nodeid for item in session.items]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.progress.done == 0:
            self.progress.set_total(len(ids))
        if not self.collected:
            self.collected = list(ids)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            last = str(report.longrepr).strip().splitlines()
            text = re.sub(r"^E\s+", "", last[-1]) if last else "error"
            self.collection_errors.append(f"{report.nodeid or '<session>'}: {text}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.reported.add(report.nodeid)
        found = from_report(report) if report.when == "teardown" else None
        if found is None:
            if report.failed:
                last = str(report.longrepr).strip().splitlines()
                self.unjudged[report.nodeid] = last[-1] if last else "failed without a verdict"
            return
        self.unjudged.pop(found.nodeid, None)
        self.tests.append(found)
        self.progress.update(found, self._live_outcome(found))

    def _live_outcome(self, test: TestEvidence) -> str:
        if test.verdict == "failed" and judge([test], self.baseline, self.profile).outcome(test) == EXPECTED:
            return EXPECTED
        return test.verdict

    def pytest_internalerror(self, excrepr: object, excinfo: object) -> None:
        self.internal_error = True

    def pytest_keyboard_interrupt(self, excinfo: object) -> None:
        self.interrupted = True

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.harness = session.config.stash.get(HARNESS, None)

    def finished_tests(self) -> list[TestEvidence]:
        """The tests with a verdict, plus a `broken` one for every test that never got one:
        a failed report without a verdict (a crashed worker) or no report at all (the run
        ended first, e.g. pytest-xdist's internal error), so every announced test is counted."""
        lost = [TestEvidence(nodeid, "broken", "unknown", (), f"no verdict: {text}") for nodeid, text in
                self.unjudged.items()]
        down = getattr(self.harness, "down", None)
        ended = "no verdict: the run ended before this test reported one" + (f" (broker down: {down})" if down else "")
        seen = self.reported | set(self.unjudged)
        never = [TestEvidence(nodeid, "broken", "unknown", (), ended) for nodeid in self.collected if nodeid not in seen]
        return [*self.tests, *lost, *never]


def pytest_args(prepared: Prepared, results: Path) -> list[str]:
    """pytest's own arguments; what the run is asked to do goes to the plugin as `GivenRun`."""
    options = prepared.options
    args = [str(options.suite or SUITE_DIR), "-p", "no:cacheprovider", "-o", "addopts=", "-q", "-rfE", "--tb=short",
            "--results-dir", str(results)]
    args += ["-p", "no:anyio"]  # the suite has no anyio tests; its plugin imports trio in every worker
    if prepared.jobs != "1":
        args += ["-n", prepared.jobs]  # long tests first, one at a time (conformance.plugin.schedule)
    return args


@contextlib.contextmanager
def broker_target(config: RunConfig) -> Iterator[tuple[RunConfig, str]]:
    """(the run aimed at the broker under test, its description); starts the embedded broker if no
    URL (as a cluster with `--cluster-node embedded`)."""
    if config.broker_url:
        yield config, redact_url(config.broker_url)
        return
    as_cluster = config.embedded_cluster
    try:
        embedded = start_embedded(management_port=0, **({"nodes": EMBEDDED_NODES} if as_cluster else {}))
    except Exception as exc:  # a port, a thread, the loop: the environment, not the user
        raise EnvironmentFailure(f"the embedded reference broker did not start: {type(exc).__name__}: {exc}") from None
    try:
        admin = config.broker_admin or embedded.management_url or "none"
        aimed = config.targeting(embedded.url, admin, embedded_cluster(embedded) if as_cluster else None)
        yield aimed, (f"embedded reference broker at {redact_url(embedded.url)}"
                      + (f" ({EMBEDDED_NODES} nodes)" if as_cluster else ""))
    finally:
        embedded.stop()


def probe(config: RunConfig) -> RunConfig:
    """The run's one probe of the broker: the run with its server-properties (OSError or DriverError
    when it does not answer)."""
    with RawClient(str(config.broker_url), timeout=config.timeout(5.0)) as client:
        return config.probed(client.server_properties)


def execute(prepared: Prepared, console: Console, log: TextIO) -> Outcome:
    """Run the suite (broker started, probed and stopped here); the gate outcome."""
    options = prepared.options
    results = options.out / "results"
    started = time.monotonic()
    with broker_target(options.config) as (config, description):
        try:
            config = probe(config)
        except (OSError, DriverError) as exc:
            return Outcome(EXIT_UNREACHABLE, problem=connect_failure(description, exc))
        judged_by = config.judged_by()
        profile = judged_by.base
        props = config.server_properties or {}
        product = " ".join(str(props.get(k, "")) for k in ("product", "version")).strip()
        console.print(f"broker: {description} ({product}), profile {judged_by.display}, client {config.client}, "
                      f"run {prepared.run_id}" + (f", {prepared.jobs} jobs" if prepared.jobs != "1" else ""),
                      soft_wrap=True, highlight=False, markup=False)
        for line in judged_by.explain():
            console.print(f"  profile: {line}", soft_wrap=True, highlight=False, markup=False)
        with LiveProgress(console, "amqp-conformance") as progress:
            collector = RunCollector(progress, prepared.baseline, profile)
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                given = GivenRun(config, _baseline_judgement(prepared, collector, profile))
                code = int(pytest.main(pytest_args(prepared, results), plugins=[collector, given]))
    tests = collector.finished_tests()
    outcome = Outcome(EXIT_OK, tests, judge(tests, prepared.baseline, profile), profile, harness=collector.harness,
                      seconds=time.monotonic() - started)
    outcome.exit_status, outcome.problem = _status(code, collector, outcome, options.strict_baseline, log)
    return outcome


def _baseline_judgement(prepared: Prepared, collector: RunCollector, profile: str) -> Callable[[], str | None] | None:
    """What the run record keeps of the baseline's judgement, asked by the plugin when it writes the
    record at the end of the session (its one writer), once every test has reported."""
    baseline = prepared.baseline
    if baseline is None:
        return None

    def judged() -> str | None:
        tests = collector.finished_tests()
        return judgement_json(baseline, judge(tests, baseline, profile)) if tests else None

    return judged


def _status(code: int, collector: RunCollector, outcome: Outcome, strict: bool, log: TextIO) -> tuple[int, str | None]:
    """The run's facts as pytest and the collector saw them, judged by the kernel's one exit status."""
    down = getattr(collector.harness, "down", None)
    usage = harness = None
    if code == pytest.ExitCode.USAGE_ERROR:
        usage = _pytest_error(log) or "pytest refused the options (see pytest-output.txt)"
    elif not down and code == pytest.ExitCode.NO_TESTS_COLLECTED:
        usage = "no tests selected (see --select and `amqp-conformance rules`)"
    if collector.internal_error or code == pytest.ExitCode.INTERNAL_ERROR:
        harness = "pytest internal error (see pytest-output.txt)"
    elif collector.collection_errors:
        harness = f"the suite could not be collected: {collector.collection_errors[0]}"
    elif collector.interrupted:
        harness = "interrupted"
    judged = outcome.judgement
    return exit_status(usage_error=usage, broker_down=f"broker down: {down}" if down else None, harness_error=harness,
                       outcomes={judged.outcome(t) for t in outcome.tests}, strict=strict, xpasses=bool(judged.xpasses))


def _pytest_error(log: TextIO) -> str | None:
    with contextlib.suppress(OSError, ValueError):
        log.flush()
        text = Path(log.name).read_text(encoding="utf-8", errors="replace")
        return next((line.removeprefix("ERROR: ").strip() for line in text.splitlines() if line.startswith("ERROR: ")),
                    None)
    return None


def console_stream() -> TextIO:
    """A stream to the real standard output that pytest's output capturing does not redirect."""
    try:
        return os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace")
    except OSError:
        return open(os.devnull, "w")  # closed by the caller, like the dup


def run(options: RunOptions, console: Console | None = None,
        report: Callable[[Path, Path], int] | None = None) -> int:
    """The whole `run` command: prepare, execute, write JUnit, summarise, and with `--report` build
    the report with `report(results_dir, out_dir)` (its exit status; None: no reports package)."""
    prepared = prepare(options)  # UsageError goes to the command line as one line and 4
    stream = console_stream() if console is None else None
    try:
        if console is None:
            console = Console(file=stream, width=None if stream is not None and stream.isatty() else 160)
        for warning in prepared.baseline.warnings if prepared.baseline else ():
            console.print(f"warning: {warning}", style="yellow", highlight=False, markup=False, soft_wrap=True)
        try:
            with open(options.out / "pytest-output.txt", "w", encoding="utf-8") as log:
                outcome = execute(prepared, console, log)
        except EnvironmentFailure as exc:
            _error(str(exc))
            return EXIT_HARNESS
        except KeyboardInterrupt:
            _error("interrupted")
            return EXIT_HARNESS
        if outcome.exit_status == EXIT_USAGE:
            raise UsageError(outcome.problem)
        if not outcome.tests and outcome.problem:
            _error(outcome.problem)
            return outcome.exit_status
        summarise(console, prepared, outcome, write_junit_for(prepared, outcome))
        if options.report:
            return _build_report(console, options, outcome.exit_status, report)
        return outcome.exit_status
    finally:
        if stream is not None:
            stream.close()


def write_junit_for(prepared: Prepared, outcome: Outcome) -> Path:
    options, record = prepared.options, getattr(outcome.harness, "run", None)
    info = RunInfo(prepared.run_id, options.config.client,
                   redact_url(options.config.broker_url) if options.config.broker_url else "embedded reference broker",
                   getattr(record, "product", None), getattr(record, "version", None), outcome.profile,
                   prepared.baseline.source if prepared.baseline else None, options.strict_baseline,
                   f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%S}")
    return write_junit(options.out / "junit.xml", outcome.tests, outcome.judgement, info)


def _build_report(console: Console, options: RunOptions, status: int,
                  report: Callable[[Path, Path], int] | None) -> int:
    if report is None:
        _error("report not available yet (the reports package is missing)")
        return max(status, EXIT_HARNESS)
    console.print("building the HTML report (Spark) ...", highlight=False)
    code = report(options.out / "results", options.out / "report")
    if code != EXIT_OK:
        _error(f"the report could not be built (exit status {code})")
        return max(status, EXIT_HARNESS)
    return status


def _error(text: str) -> None:
    print(f"amqp-conformance: {text}", file=sys.stderr)
