"""The pytest plugin (entry point `amqp_conformance`): options, the broker target, fixtures, verdicts.

Rules:
- `--broker-url` selects the broker; without it an embedded reference broker starts on a
  free port for the session. `--profile auto` reads server-properties (`profiles.detect`).
- Every suite test carries `@pytest.mark.rules("ID", ...)`; IDs must exist in the catalogue
  (an unknown ID makes that test `broken`). Each test gets the marker `area_<area>` of its
  rules (`-m area_qos`). A test whose rules are all `not-applicable` on the profile is
  skipped with that verdict.
- Fixtures: `target` (session: url, profile, timeout scale, admin), `connect` (factory of
  connected `RawClient`s sharing the test's frame `recorder`, closed at teardown),
  `names` (unique "amqpc." names; queues/exchanges named through it are deleted at
  teardown), `admin` (the `--broker-admin` adapter; every change is undone at teardown),
  `cluster` (the broker's other nodes and their node control: `cluster`, `nodes`).
- Every rule test gets a verdict (`classify`), counted per area in the terminal summary and,
  with `--results-dir`, written as records (`results`). With `--alluredir`, tests are
  labelled epic = area, feature = rule group, story = rule, and get their frame log attached.
- Between broker tests a health probe runs (`health`); once the broker is wedged or gone,
  every following broker test is `broken` without touching the network, and the session
  exits 3. Otherwise any `broken` verdict makes the exit status 2 (docs/design.md decision 8).
- A rule test that overruns `--test-timeout` is interrupted by the `watchdog` and ends
  `broken`; then a fresh connection probes the broker (`HealthProbe.fresh`): if it answers,
  only that test is broken and the run goes on (exit 2); if not, the broker is down (exit 3).
  A session that overruns `--run-timeout` ends the run: the broker counts as down (the rest
  is `broken`, exit 3). A run the interrupt cannot end exits 3 after a grace period.
- `admin.Unavailable` raised by a test or fixture becomes the `needs-admin` verdict (not run,
  left out of the score); the terminal summary then suggests `--broker-admin`.
- `pytest --broker-url URL` with no paths runs the shipped suite (`conformance/suite`).
- A rule test's teardown report carries its `evidence` (for `amqp-conformance run`); under
  pytest-xdist, workers and controller act as one session (`distributed`).
"""

from __future__ import annotations

import contextlib
import gc
import uuid
from collections import Counter
from collections.abc import Generator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conformance import SUITE_DIR
from conformance.catalogue.rules import AREAS, REQUIRED, VARIANT, rule
from conformance.drivers.probes import PROBE_SUPPORT
from conformance.drivers.raw import Recorder
from conformance.drivers.registry import client_version
from conformance.drivers.silence import SILENCES
from conformance.plugin import classify, clause_marks, distributed, evidence, schedule, selection
from conformance.plugin.cluster import STOPPED_NODES
from conformance.plugin.explain import explain_comparison, force_full_assertions
from conformance.plugin.health import close_quietly
from conformance.plugin.session import HARNESS, GivenRun, Harness, harness
from conformance.plugin.verdicts import needs_admin
from conformance.plugin.watchdog import Budgets, Watchdog, WatchdogExpired
from conformance.results.parts import ResultsWriter, publish_staged
from conformance.results.records import RunRecord, harness_version, redact_url
from conformance.results.verdicts import (
    HarnessError,
    Verdict,
    admin_hint,
    closing_line,
    cluster_hint,
    exit_status,
)
from conformance.run import janitor
from conformance.run.admin import Unavailable, parse_admin
from conformance.run.config import ConfigError, RunConfig, from_values
from conformance.run.nodes import cluster_urls
from conformance.run.options import PLUGIN_OPTIONS, RUN_OPTIONS, add_to_pytest

pytest_plugins = ["conformance.plugin.fixtures", "conformance.plugin.through_clients",  # the fixtures tests use (target, connect, names, admin,
                  "conformance.plugin.cluster"]  # cluster)
AREA_MARKER = "area_"  # `-m area_qos` selects an area


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("amqp-conformance")
    add_to_pytest(group, (*RUN_OPTIONS, *PLUGIN_OPTIONS))


STATE = pytest.StashKey[classify.TestState]()
RULE_ERROR = pytest.StashKey[str]()
IN_RULE_TEST = pytest.StashKey[bool]()  # a rule test is running: its assertions follow `observed == expected`


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.is_registered(selection):  # --select is this plugin's: honoured in plain pytest too
        config.pluginmanager.register(selection, "amqpc-selection")
    force_full_assertions(config)  # a failure's message is read by people: never cut inside a value
    config.addinivalue_line("markers", "rules(*ids): the catalogue rule IDs a test checks")
    config.addinivalue_line("markers", clause_marks.DESCRIPTION)
    config.addinivalue_line("markers", "slow: long-running tests")  # the suite runs outside this repo too
    config.addinivalue_line("markers", f"{schedule.LONG_WAIT}: spends seconds on the broker's clock (started first)")
    config.addinivalue_line("markers", f"{schedule.TAKES}(seconds): takes about that long on RabbitMQ, measured "
                                       "(started first, longest first; not a limit)")
    config.addinivalue_line("markers", f"{schedule.BOUND}(seconds): the test's longest bound for a reply, waited "
                                       "out only when the broker never sends it (handed out before the other plain tests)")
    config.addinivalue_line("markers", f"{schedule.BROKER_WIDE}: may change a setting every connection sees "
                                       "(runs alone when it does, at the end)")
    config.addinivalue_line("markers", f"{schedule.BESIDE}(reason): nothing a broker-wide change touches reaches "
                                       "the test (it runs beside broker-wide tests; the reason cites why)")
    for area in AREAS:  # "area_" because a bare `timeout` would be pytest-timeout's marker
        config.addinivalue_line("markers", f"{AREA_MARKER}{area}: conformance tests of the {area} area")
    run = run_config(config)
    run_id = run.run_id or distributed.worker_run_id(config) or str(uuid.uuid4())
    run = replace(run, run_id=run_id)
    url = run.broker_url
    state = Harness(run_id, parse_admin(run.broker_admin or "none", url or ""),
                    allure=bool(config.getoption("allure_report_dir", None)), worker=distributed.is_worker(config),
                    cluster=run.cluster, embedded_cluster=run.embedded_cluster, config=run,
                    run_baseline=getattr(given_run(config), "run_baseline", None))
    budgets = Budgets.from_run(run)
    results = config.getoption("--results-dir")
    if results and not config.option.collectonly:
        try:
            Path(results).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise pytest.UsageError(f"--results-dir {results}: {exc}") from None
        state.writer = ResultsWriter(Path(results), run_id, staged=state.worker)  # workers stage (parts.py)
        state.run = RunRecord(run_id, redact_url(url) if url else "embedded", run.client,
                              harness_version(), run.timeout_scale, datetime.now(UTC),
                              admin=redact_url(run.broker_admin or "none"),
                              client_version=client_version(run.client),
                              cluster_nodes=cluster_urls(run.cluster))
    if not config.option.collectonly:
        state.watchdog = Watchdog(budgets, lambda reason, session: _watchdog_expired(state, reason, session))
        if run.broker_admin not in (None, "", "none") and url and not state.worker:
            state.janitor = janitor.start(run.broker_admin, url, run_id)  # a killed run's changes undone
    config.stash[HARNESS] = state
    distributed.register(config, state)


def given_run(config: pytest.Config) -> GivenRun | None:
    """What `amqp-conformance run` handed the plugin, if it runs the session."""
    return next((p for p in config.pluginmanager.get_plugins() if isinstance(p, GivenRun)), None)


def run_config(config: pytest.Config) -> RunConfig:
    """The run's configuration: the one `amqp-conformance run` built and handed in (`GivenRun`), the
    controller's (a pytest-xdist worker), or, in plain pytest, built from the plugin's own options."""
    given = given_run(config)
    if given is not None:
        return given.config
    handed = distributed.worker_config(config)
    if handed is not None:
        return RunConfig.from_plain(handed)
    try:
        return from_values(config.getoption)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def _watchdog_expired(state: Harness, reason: str, session: bool) -> None:
    """Called from the watchdog's thread: a session overrun ends the run as with a wedged
    broker; a test overrun is judged once the test has ended (`_judge_stuck`)."""
    if session and state.down is None:
        state.down = f"watchdog: {reason}"
    elif not session:
        state.stuck = reason


def _judge_stuck(state: Harness, message: str | None) -> str | None:
    """After the watchdog interrupted a test: a fresh connection tells a stuck test (the run
    goes on) from a broker that no longer takes new work (down, exit 3)."""
    reason, state.stuck = state.stuck, None
    if reason is None or state.down is not None or state.probe is None:
        return message
    failed = state.probe.fresh()
    if failed is not None:
        state.down = f"watchdog: {reason}; a fresh connection then failed: {failed}"
        return message
    return (f"{message}; the broker still answered a fresh connection (connect, channel.open, "
            "queue.declare and queue.delete), so only this test is broken")


@pytest.hookimpl(tryfirst=True)
def pytest_assertrepr_compare(config: pytest.Config, op: str, left: object, right: object) -> list[str] | None:
    """Suite assertions read as "got X, expected Y", written in full (`explain`)."""
    return explain_comparison(op, left, right, rule_test=config.stash.get(IN_RULE_TEST, False))


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(HARNESS, None)
    if state is not None and state.watchdog is not None:
        state.watchdog.stop()
    if state is not None and state.janitor is not None:
        state.janitor.finish()


def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """`pytest --broker-url URL` with no paths (nor --pyargs) runs the shipped suite."""
    has_url = any(a == "--broker-url" or a.startswith("--broker-url=") for a in args)
    known = early_config.known_args_namespace  # parsed by pytest: option values are not paths
    if has_url and not (getattr(known, "file_or_dir", None) or getattr(known, "pyargs", False)):
        args.append(str(SUITE_DIR))


def pytest_sessionstart(session: pytest.Session) -> None:
    SILENCES.forget()  # what a broker never answers is learned anew in each run (drivers/silence.py)
    PROBE_SUPPORT.forget()  # and whether it answers the driver's probe (drivers/probes.py)
    state = harness(session.config)
    if state.writer is not None and state.run is not None and not state.worker:
        state.writer.write_run(state.run)


def pytest_collection_finish(session: pytest.Session) -> None:
    state = harness(session.config)
    if state.watchdog is not None:
        state.watchdog.start_session(len(session.items))
    # What is alive now (the harness, the suite's modules, the collected tests) lives as long as the
    # process: out of the collector's sight, the full collections after it (Hypothesis's
    # register_random, pytest's at unconfigure, Python's own) scan only what the tests create.
    gc.freeze()


@pytest.hookimpl(wrapper=True, trylast=True)  # innermost: an xdist worker's wait for the broker lock is not counted
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    dog = harness(item.config).watchdog
    if item.get_closest_marker("rules") is None:
        return (yield)
    item.config.stash[IN_RULE_TEST] = True  # its assertions are explained in full (explain.py)
    SILENCES.test = item.nodeid  # a method the broker never answers is waited for once per run
    if dog is not None:
        dog.arm(item.nodeid)
    try:
        return (yield)
    finally:
        item.config.stash[IN_RULE_TEST] = False
        SILENCES.test = None
        if dog is not None:
            dog.disarm()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    allure = harness(config).allure
    for item in items:
        marker = item.get_closest_marker("rules")
        if marker is None:
            continue
        for rule_id in marker.args:
            try:
                item.add_marker(getattr(pytest.mark, AREA_MARKER + rule(rule_id).area))
            except KeyError as exc:
                item.stash[RULE_ERROR] = str(exc.args[0])
        if (problem := clause_marks.problem(item) or schedule.mark_problem(item)) and RULE_ERROR not in item.stash:
            item.stash[RULE_ERROR] = problem
        for label in classify.allure_labels(_area(item), [str(r) for r in marker.args]) if allure else ():
            item.add_marker(label)


def _area(item: pytest.Item) -> str:
    marker = item.get_closest_marker("rules")
    with contextlib.suppress(KeyError, IndexError):
        return rule(marker.args[0]).area if marker else "unknown"
    return "unknown"


def _uses_broker(item: pytest.Item) -> bool:
    return "target" in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if RULE_ERROR in item.stash:
        raise HarnessError(item.stash[RULE_ERROR])
    state = harness(item.config)
    if not _uses_broker(item):
        return
    if state.down is None and state.probe is not None:
        state.down = state.probe.check()
    if state.down is not None:
        pytest.skip(classify.BROKEN_PREFIX + state.down)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    try:
        return (yield)
    except Unavailable as exc:
        needs_admin(str(exc))


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Generator[None, object, object]:
    try:
        return (yield)
    except Unavailable as exc:
        needs_admin(str(exc))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report: pytest.TestReport = yield
    if item.get_closest_marker("rules") is None:
        return report
    state = harness(item.config)
    test = item.stash.setdefault(STATE, classify.TestState())
    if report.when == "setup":
        test.started = datetime.fromtimestamp(call.start, UTC)
    recorder = (getattr(item, "funcargs", None) or {}).get("recorder")
    frames = recorder.frames if isinstance(recorder, Recorder) else []
    exc = call.excinfo.value if call.excinfo is not None else None
    verdict, message = classify.phase_verdict(report, exc, any(f.direction == "in" for f in frames),
                                              _required(state, item), frames)
    if isinstance(exc, WatchdogExpired):
        message = _judge_stuck(state, message)
    if verdict is not Verdict.PASSED and classify.may_mean_broker_down(exc) and _uses_broker(item):
        if state.down is None and state.probe is not None:
            state.down = state.probe.check()
        if state.down is not None:
            verdict, message = Verdict.BROKEN, f"{state.down} (the test saw: {message})"
    test.update(report, verdict, message, exc, item.stash.get(distributed.LOCK_WAIT, 0.0))
    if report.when == "teardown":
        _finish(item, report, test, frames)
    return report


def _finish(item: pytest.Item, report: pytest.TestReport, test: classify.TestState, frames: list[Any]) -> None:
    state = harness(item.config)
    area = _area(item)
    state.counts[area, test.verdict] += 1
    if test.verdict is Verdict.BROKEN:
        state.broken.append((item.nodeid, test.message or ""))
    report.user_properties.append(("verdict", test.verdict.value))
    marker = item.get_closest_marker("rules")
    rule_ids = [str(r) for r in marker.args] if marker else []
    test.judge_rules(rule_ids, frames)
    evidence.attach(report, evidence.build(item.nodeid, test.verdict.value, area, rule_ids, test.message,
                                           test.failure, frames, test.duration_total, test.failures))
    if state.allure:
        classify.allure_evidence(test, frames)
    if state.writer is None:
        return
    seed_option = item.config.getoption("hypothesis_seed", None)
    record = classify.test_record(state.run_id, item.nodeid, rule_ids, area, test, frames, seed_option)
    record.stopped_nodes = list(item.stash.get(STOPPED_NODES, ())) or None
    record.clause_ids = clause_marks.clause_ids(item) or None
    if state.target is not None:
        record.judged_by = _judged_by(state.target.profile, [*test.failures, *rule_ids])
    state.writer.add_test(record, frames)


def _required(state: Harness, item: pytest.Item) -> bool:
    """Whether a rule of the test is required (or a variant it judges) on the profile: then a 540
    NOT_IMPLEMENTED is a failure, not `unimplemented`."""
    marker = item.get_closest_marker("rules")
    if state.target is None or marker is None:
        return True
    expectations = []
    for rule_id in marker.args:
        with contextlib.suppress(KeyError):
            expectations.append(state.target.base_profile.expect(str(rule_id)))
    return not expectations or any(e == REQUIRED or e.startswith(VARIANT) for e in expectations)


def _judged_by(profile: Any, rule_ids: list[str]) -> list[str]:
    """"RULE PROFILE EXPECTATION" per rule (broken ones first): what the report's test page shows."""
    found = []
    for rule_id in dict.fromkeys(rule_ids):
        with contextlib.suppress(KeyError):
            found.append(f"{rule_id} {profile.judging_profile(rule_id)} {profile.expect(rule_id)}")
    return found


@pytest.hookimpl(tryfirst=True)
def _exit_status(state: Harness, status: int) -> int:
    """pytest's own status for what is not a verdict (usage, internal error, interrupt, nothing
    collected); otherwise the kernel's exit status from the broker's health and the verdicts."""
    if status not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return status
    outcomes = {Verdict.BROKEN} if state.broken else set()
    if status == pytest.ExitCode.TESTS_FAILED:
        outcomes.add(Verdict.FAILED)
    return exit_status(broker_down=state.down, outcomes=outcomes)[0]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = harness(session.config)
    session.exitstatus = _exit_status(state, session.exitstatus)
    close_quietly(state.probe)
    state.admin.close()
    if state.writer is not None:
        state.writer.close()
    if state.writer is not None and not state.worker:
        publish_staged(state.writer.root, state.run_id)  # the workers' rows: every worker has finished
    if state.writer is not None and state.run is not None and not state.worker:
        state.run.finished, state.run.exit_status = datetime.now(UTC), int(session.exitstatus)
        state.run.tests = state.writer.tests_written + state.remote_tests
        if state.run_baseline is not None:  # the gate's judgement of the run against its baseline
            state.run.baseline = state.run_baseline()
        state.writer.write_run(state.run)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = harness(config)
    if not (state.counts or state.down or (state.leaks and not state.leaks.clean)):
        return
    terminalreporter.section("amqp-conformance verdicts")
    for line, markup in classify.summary_report(state.counts, state.broken, state.down, state.leaks):
        terminalreporter.write_line(line, **markup)
    for wanting, hint in ((Verdict.NEEDS_ADMIN, admin_hint), (Verdict.NEEDS_CLUSTER, cluster_hint)):
        if needing := sum(n for (_, verdict), n in state.counts.items() if verdict is wanting):
            terminalreporter.write_line(hint(needing), bold=True)
    if state.writer is not None:
        terminalreporter.write_line(f"results: {state.writer.root} (run={state.run_id})")
    totals: Counter[str] = Counter()
    for (_, verdict), n in state.counts.items():
        totals[verdict] += n
    if state.target is not None and (note := state.target.base_profile.range_note):  # profiles.py range_note
        terminalreporter.write_line(f"profile: {note}", yellow=True)
    profile = state.target.profile.name if state.target is not None else None
    # the reporter passes pytest's own status; the session ends with ours
    terminalreporter.write_line(closing_line(dict(totals), profile, _exit_status(state, exitstatus)), bold=True)
