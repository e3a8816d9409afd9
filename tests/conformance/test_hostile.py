"""The harness against a hostile broker: real suite tests through `HostileProxy` (part 6).

Each test puts `tests/conformance/hostile.py`'s proxy in front of the module's embedded
reference broker and runs shipped suite tests through the plugin (pytester, in-process) or
the `amqp-conformance run` command (a subprocess, as CI runs it). Every wait is scaled down
(`--timeout-scale 0.1`: a 5 s wait is 0.5 s), and the suite tests picked declare an "amqpc."
queue first, which is what triggers the proxy (the health probe's queue is not "amqpc.").

What they show: a test meeting a broker that stops answering, resets, sends garbage, answers
with the wrong method or answers too late ends within its scaled timeout, `failed`, with a
message naming what happened; a broker that wedges as a whole ends the run with status 3;
and the watchdog ends a test or a run that outlives its budget (`--test-timeout`,
`--run-timeout`), even one that swallows the interrupt, with the stacks: a stuck test on a
broker that still answers a fresh connection is `broken` alone (exit 2), a stuck test on a
dead broker or an overrun session ends the run with status 3.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from conformance.drivers.raw import ConnectionLost, NoReply, RawClient
from conformance.results.parts import read_table
from conformance.suite import SUITE_DIR
from reference_broker.server import EmbeddedBroker
from tests.conformance.hostile import PASS, HostileProxy, Mode, Plan, declares_queue
from tests.conftest import cli_env

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`

pytest_plugins = ["pytester"]

SCALE = "0.1"  # every wait of the harness is 0.5 s
# A run's wall time is checked only against a hang (a hung wait lasts the 300 s test timeout): a bound,
# not a benchmark; a loaded 2-core machine took 16 s and 33 s for runs that take 8 s and 20 s alone.
BOUNDED = 120.0
SMOKE = f"{SUITE_DIR}/ack/test_smoke_ack.py::test_unknown_tag_closes_the_channel_with_406"
ACK_02 = f"{SUITE_DIR}/ack/test_ack.py::test_tags_are_64_bit_without_wrap_or_truncation"
CLI_SELECTION = ["--select", "ACK-02", "ACK-10"]  # test_ack.py: 2 x ACK-02; test_ack_settle.py: ACK-10; test_machine_ack.py: ACK-01..10


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as embedded:
        yield embedded


@pytest.fixture
def hostile(broker: EmbeddedBroker) -> Iterator[Any]:
    """hostile(plan) -> a started HostileProxy in front of the broker, closed after the test."""
    proxies: list[HostileProxy] = []

    def make(plan: Plan) -> HostileProxy:
        proxies.append(HostileProxy((broker.host, broker.port), plan).start())
        return proxies[-1]

    yield make
    for proxy in proxies:
        proxy.close()


def _records(results: Path) -> dict[str, dict[str, Any]]:
    return {str(r["test_id"]).split("::")[-1]: r for r in read_table(results, "tests").to_pylist()}


def _plugin_run(pytester: pytest.Pytester, url: str, *args: str) -> tuple[pytest.RunResult, dict[str, dict[str, Any]]]:
    results = pytester.path / "results"
    run = pytester.runpytest("-o", "addopts=", "-p", "no:cacheprovider", "--broker-url", url, "--timeout-scale", SCALE,
                             "--results-dir", str(results), *args)
    return run, _records(results)


@dataclass
class Cli:
    status: int
    out: str
    err: str
    seconds: float
    tests: dict[str, dict[str, Any]]


def _cli(tmp: Path, *args: str, timeout: float = 60) -> Cli:
    out = tmp / "out"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--out", str(out), "--timeout-scale", SCALE,
                           *args], cwd=tmp, capture_output=True, text=True, timeout=timeout,
                          env=cli_env(COLUMNS="200"))
    seconds = time.monotonic() - started
    tests = _records(out / "results") if (out / "results" / "tests").exists() else {}
    return Cli(done.returncode, done.stdout, done.stderr, seconds, tests)


# -- the proxy itself: per link, after N frames, switched at runtime ----------------------------
def test_the_proxy_acts_per_link_after_n_frames_and_switches_at_runtime(hostile: Any) -> None:
    # link 1 passes; link 2 is reset after start, tune and open-ok
    proxy = hostile(lambda n: PASS if n == 1 else Plan(Mode.CLOSE, after_frames=2))
    client = RawClient(proxy.url, timeout=0.5).connect()
    client.channel()
    with pytest.raises(ConnectionLost, match=r"connection closed: .*\(waiting for connection.open-ok on channel 0\)"):
        RawClient(proxy.url, timeout=0.5).connect()
    proxy.switch(Plan(Mode.BLACKHOLE))  # link 1 too, from its next frame on
    started = time.monotonic()
    with pytest.raises(NoReply, match=r"no reply within 0.5 s \(waiting for channel.open-ok on channel 2\)"):
        client.channel()
    assert time.monotonic() - started < 1.0
    client.close()
    assert [(a.link, a.mode, a.text.split(" instead")[0]) for a in proxy.actions] == [
        (2, "close", "reset the connection"), (1, "blackhole", "blackholed from channel.open-ok on channel 2")]


# -- one run, a different hostility per suite test: each ends `failed`, within its scaled wait ---
WAITING = "(waiting for queue.declare-ok on channel 1)"


@dataclass(frozen=True)
class Case:
    test: str  # a suite test whose first request is the declare of a queue named after it
    mode: Mode
    message: str  # how its verdict's message starts
    action: str  # what the proxy says it did


CASES = [
    Case("ack/test_smoke_ack.py::test_unknown_tag_closes_the_channel_with_406", Mode.PASS, "", "triggered"),
    Case("ack/test_ack_settle.py::test_cancel_leaves_deliveries_unacked_on_the_channel", Mode.BLACKHOLE,
         f"NoReply: no reply within 0.5 s {WAITING}", "blackholed from queue.declare-ok on channel 1"),
    Case("ack/test_ack.py::test_tag_0_multiple_acks_everything_outstanding_and_never_fails", Mode.CLOSE,
         f"ConnectionLost: connection closed: the broker ended it without connection.close {WAITING}",
         "reset the connection instead of sending queue.declare-ok on channel 1"),
    Case("ack/test_ack.py::test_tag_0_without_multiple_is_an_unknown_tag", Mode.GARBAGE,
         f"ConnectionLost: undecodable frame from the broker {WAITING}: 501 FRAME_ERROR: frame end octet 0xff",
         "sent 10 garbage octets instead of queue.declare-ok on channel 1"),
    Case("ack/test_ack.py::test_tags_are_64_bit_without_wrap_or_truncation[2^32+1]", Mode.WRONG_METHOD,
         f"UnexpectedMethod: unexpected exchange.declare-ok on channel 1 {WAITING}",
         "sent exchange.declare-ok instead of queue.declare-ok on channel 1"),
    Case("ack/test_ack_settle.py::test_ack_mode_is_chosen_per_consume_and_per_get", Mode.DELAY,
         f"NoReply: no reply within 0.5 s {WAITING}", "delayed queue.declare-ok on channel 1 by 2 s"),
]


def _name(case: Case) -> str:
    return case.test.split("::")[-1]


def test_each_suite_test_ends_with_a_clear_verdict(pytester: pytest.Pytester, hostile: Any) -> None:
    """Queues are named "amqpc.<test name, 40 chars>...", so each test meets its own plan."""
    plans = [Plan(c.mode, on_request=declares_queue(f"amqpc.{_name(c)[:40]}."), delay=2.0) for c in CASES]
    proxy = hostile(plans)
    run, tests = _plugin_run(pytester, proxy.url, *(f"{SUITE_DIR}/{c.test}" for c in CASES))
    assert run.ret == 1, run.stdout.str()  # failures; no broker down, nothing broken
    assert "BROKER DOWN" not in run.stdout.str() and "broken:" not in run.stdout.str()
    for case in CASES:
        record = tests[_name(case)]
        links = {a.link for a in proxy.actions if a.mode == case.mode.value and case.action in a.text}
        assert links, (case.mode, proxy.actions)  # the proxy did misbehave, for that test
        assert record["verdict"] == ("passed" if case.mode is Mode.PASS else "failed"), record
        # a failure's message leads with the rules it saw broken, then what the broker did
        said = str(record["message"] or "")
        assert said.startswith(case.message) or ("broken: " in said.splitlines()[0] and any(
            line.startswith(case.message) for line in said.splitlines())), said
        assert record["duration"] < 0.5 + 0.5  # the call: one scaled wait at most, and a margin
        assert record["duration_total"] < 3.0  # with set-up and the bounded close at teardown
    assert run.duration < BOUNDED  # ended; a hung wait would have lasted the 300 s test timeout


# -- the broker as a whole stops answering: exit 3 ----------------------------------------------
def test_a_wedged_broker_ends_the_run_with_exit_3(tmp_path: Path, hostile: Any) -> None:
    proxy = hostile(Plan(Mode.BLACKHOLE, on_request=declares_queue(), wedge=True))
    run = _cli(tmp_path, "--broker-url", proxy.url, *CLI_SELECTION)
    assert run.status == 3, run.out + run.err
    assert "broker down: broker wedged: no reply within 0.5 s" in run.out
    assert {t["verdict"] for t in run.tests.values()} == {"broken"} and len(run.tests) == 4
    first = run.tests["test_tags_are_64_bit_without_wrap_or_truncation[2^32+1]"]
    assert str(first["message"]).startswith("broker wedged: no reply within 0.5 s (waiting for connection.start")
    assert "(the test saw: NoReply: no reply within 0.5 s (waiting for queue.declare-ok on channel 1))" in first["message"]
    assert first["duration_total"] < 3.0
    assert run.seconds < BOUNDED  # ended; a hung wait would have lasted the 300 s test timeout


# -- the watchdog ------------------------------------------------------------------------------
def test_the_watchdog_ends_a_test_that_outlives_its_budget(pytester: pytest.Pytester, hostile: Any,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    """Every broker frame of the smoke test's connection 0.9 s late, from its queue.declare on:
    no wait of 2 s (scale 0.4) times out, but the test does not end within its 1.5 s. The broker
    still answers a fresh connection: only that test is broken, the run goes on (the tests
    after it pass; exit 2), and the broker is not called down."""
    smoke = "test_unknown_tag_closes_the_channel_with_406"
    proxy = hostile(Plan(Mode.DELAY, on_request=declares_queue(f"amqpc.{smoke[:40]}."), delay=0.9))
    run, tests = _plugin_run(pytester, proxy.url, SMOKE, ACK_02, "--timeout-scale", "0.4", "--test-timeout", "1.5")
    assert run.ret == 2, run.stdout.str()
    assert "BROKER DOWN" not in run.stdout.str()
    reason = f"{smoke} did not end within 1.5 s (--test-timeout)"
    message = str(tests[smoke]["message"])
    assert tests[smoke]["verdict"] == "broken" and message.startswith("WatchdogExpired: "), message
    assert message.endswith(f"{reason}; the broker still answered a fresh connection (connect, channel.open, "
                            "queue.declare and queue.delete), so only this test is broken"), message
    assert len(tests) == 3 and [r["verdict"] for n, r in tests.items() if n != smoke] == ["passed", "passed"]
    err = capfd.readouterr().err  # written to the real stderr, past pytest's capture
    assert f"{reason}; interrupting it; a fresh connection then tells a stuck test from a dead broker. " \
           "Stacks of all threads:" in err
    assert "Current thread" in err and "conformance/drivers/raw.py" in err  # the main thread, in the driver


WEDGING_SUITE = '''
import time

import pytest
from codec import QueueDeclare


@pytest.mark.rules("ACK-01")
def test_wedges_the_broker_then_waits(target, connect):
    client = connect()
    client.send(client.channel(), QueueDeclare(queue="amqpc.wedge"))  # the proxy wedges on it
    deadline = time.monotonic() + 60  # bounded, should the watchdog fail
    while time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.rules("ACK-02")
def test_after_it(target):
    pass
'''


def test_a_stuck_test_on_a_dead_broker_ends_the_run_with_exit_3(tmp_path: Path, hostile: Any) -> None:
    """The watchdog interrupts the stuck test; the fresh connection that follows gets no answer
    (the broker as a whole stopped answering): broker down, the rest broken, exit 3."""
    proxy = hostile(Plan(Mode.BLACKHOLE, on_request=declares_queue("amqpc.wedge"), wedge=True))
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_wedge.py").write_text(WEDGING_SUITE)
    run = _cli(tmp_path, "--broker-url", proxy.url, "--suite", str(suite), "--test-timeout", "2")
    assert run.status == 3, run.out + run.err
    stuck = run.tests["test_wedges_the_broker_then_waits"]
    assert stuck["verdict"] == "broken" and str(stuck["message"]).startswith("WatchdogExpired: "), stuck
    assert run.tests["test_after_it"]["verdict"] == "broken"
    assert "a fresh connection then failed: broker wedged: no reply within 0.5 s" in run.out, run.out
    assert run.seconds < 90  # a bound, not a benchmark: the CLI's start-up is slow on a loaded machine


def test_the_run_timeout_ends_a_slow_session(pytester: pytest.Pytester, hostile: Any) -> None:
    proxy = hostile(Plan(Mode.DELAY, delay=0.2))
    run, tests = _plugin_run(pytester, proxy.url, SMOKE, ACK_02, "--timeout-scale", "0.2", "--run-timeout", "2.5")
    assert run.ret == 3, run.stdout.str()
    run.stdout.fnmatch_lines(["*BROKER DOWN: watchdog: the session did not end within 2.5 s (--run-timeout)*"])
    verdicts = [r["verdict"] for r in sorted(tests.values(), key=lambda r: r["started"])]
    assert verdicts[-1] == "broken" and len(verdicts) == 3  # the test running at 2.5 s, and what follows
    assert any(str(r["message"]).startswith("WatchdogExpired: the session did not end") for r in tests.values())
    assert run.duration < BOUNDED  # ended once the run timeout fired (the lines above say it did)


HANGING_SUITE = '''
import time

import pytest


@pytest.mark.rules("ACK-01")
def test_swallows_every_interrupt(target):
    deadline = time.monotonic() + 60  # bounded, should the watchdog fail
    while time.monotonic() < deadline:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
'''


def test_the_watchdog_exits_3_when_the_interrupt_does_not_end_the_run(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_hang.py").write_text(HANGING_SUITE)
    run = _cli(tmp_path, "--suite", str(suite), "--test-timeout", "1", "--timeout-scale", "0.05")  # grace 1.5 s
    assert run.status == 3, run.out + run.err
    assert "amqp-conformance watchdog: suite/test_hang.py::test_swallows_every_interrupt did not end within 1 s" in run.err
    assert run.err.rstrip().endswith("exiting with status 3")
    assert "did not end 1.5 s after" in run.err
    assert run.seconds < BOUNDED  # the watchdog ended it; the suite swallows interrupts and would never end


def test_watchdog_budgets_are_validated(pytester: pytest.Pytester, capfd: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    assert main(["run", "--test-timeout", "-1", "--out", str(tmp_path)]) == 4
    assert capfd.readouterr().err == ("amqp-conformance: error: --test-timeout must be a number of seconds >= 0 "
                                      "(0 = no limit)\n")
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    run = pytester.runpytest("--run-timeout", "-5")
    assert run.ret == 4
    run.stderr.fnmatch_lines(["*--run-timeout must be a number of seconds >= 0*"])


def test_a_wedged_broker_ends_a_parallel_run_with_exit_3(tmp_path: Path, hostile: Any) -> None:
    """The same with `--jobs 2` (pytest-xdist workers): the workers' verdicts reach the run."""
    proxy = hostile(Plan(Mode.BLACKHOLE, on_request=declares_queue(), wedge=True))
    run = _cli(tmp_path, "--broker-url", proxy.url, "--jobs", "2", *CLI_SELECTION, timeout=120)
    assert run.status == 3, run.out + run.err
    assert {t["verdict"] for t in run.tests.values()} == {"broken"} and len(run.tests) == 4
    # no wall-clock bound (a loaded machine stretches the workers' start-up): what keeps the run
    # short is that at most one test per worker met the wedge, the rest were judged without the
    # network, and no budget of the watchdog had to end it
    assert sum("(the test saw:" in str(t["message"]) for t in run.tests.values()) <= 2, run.out
    assert "watchdog" not in run.err, run.err
