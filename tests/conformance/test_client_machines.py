"""The model machines through client libraries: each is proven against a deviating broker.

Each case runs one machine (conformance/suite/machine_client_*.py) through one library against
the embedded reference broker with one named fault (reference_broker/faults.py) and expects
the failure to name the rule the fault breaks; the same machines pass the conforming reference
broker and, marked `rabbitmq`, RabbitMQ 3.10.8. Derandomized with the suite's budgets, so
`make test` stays quick and every run checks the same programs. With shrinking on, a client
machine reports as the raw machines do (machine_budget): the shrunk steps as a
short program with the frames the relay recorded, the smallest failure found when its budget
(`AMQPC_MACHINE_BUDGET`) runs out, and the smallest failure seen when Hypothesis cannot replay one.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
from hypothesis.stateful import rule as machine_rule

from conformance.drivers.adapter import load_driver
from conformance.drivers.interface import ClientDriver, Recorder
from conformance.drivers.relay import recording_relay
from conformance.plugin.through_clients import relayed
from conformance.suite.steps import machine_budget
from conformance.suite.steps.machine_budget import ENV_BUDGET
from conformance.suite.steps.machine_support import ENV_SHRINK
from conformance.suite.through_clients.machine_client_confirms import ClientConfirmMachine
from conformance.suite.through_clients.machine_client_consuming import (
    ClientCancelMachine,
    ClientPrefetchMachine,
)
from conformance.suite.through_clients.machine_client_requeue import ClientRequeueMachine
from conformance.suite.through_clients.machine_clients import ClientMachine, client_step, run_client_machine
from reference_broker.server import EmbeddedBroker
from tests.conformance.test_cli_rabbitmq import rabbitmq  # noqa: F401  (fixture)

LIBRARIES = ("pika", "amqp", "aio-pika")
PROFILE = "rabbitmq-3.10"
MACHINES: dict[str, type[ClientMachine]] = {"requeue": ClientRequeueMachine, "prefetch": ClientPrefetchMachine,
                                             "cancel": ClientCancelMachine, "confirms": ClientConfirmMachine}
DRIVER_TIMEOUT = 2.0  # s: what a library waits for a reply (pika's publish for its confirm) before NoReply
STEP = re.compile(r"^state\.(?!teardown\(\))\w+\(", re.MULTILINE)  # a step of Hypothesis's failing case
RELAYED = re.compile(r"frames of this run \(\d+, oldest first\):\n.*c\d+ > ch\d+ basic\.publish", re.DOTALL)

# (machine, library, fault, the rule its failure must name); every library meets each machine's faults
FAULT_CASES = [
    *[("requeue", library, "requeue_to_tail", "RQ-01") for library in LIBRARIES],
    *[("requeue", library, "quorum_returns_not_first", "RQ-02") for library in LIBRARIES],
    *[("requeue", library, "redelivered_not_set", "RQ-04") for library in LIBRARIES],
    ("requeue", "amqp", "no_requeue_on_channel_close", "RQ-03"),
    *[("prefetch", library, "prefetch_off_by_one", "QOS-02") for library in LIBRARIES],
    *[("prefetch", library, "no_ack_obeys_prefetch", "QOS-08") for library in LIBRARIES],
    ("prefetch", "pika", "tags_restart_per_consumer", "ACK-01"),
    *[("cancel", library, "no_cancel_on_queue_delete", "CCN-02") for library in LIBRARIES],
    *[("cancel", library, "cancel_requeues", "ACK-10") for library in ("amqp", "aio-pika")],  # pika: RQ-03 first
    *[("confirms", library, "tx_select_on_confirm_accepted", "PC-03") for library in LIBRARIES],
    *[("confirms", library, "confirm_lost", "PC-05") for library in LIBRARIES],
    *[("confirms", library, "confirm_duplicated", "PC-05") for library in ("pika", "amqp")],
    *[("confirms", library, "return_after_ack", "PC-06") for library in ("amqp", "aio-pika")],
    *[("confirms", library, "unroutable_never_confirmed", "PC-06") for library in LIBRARIES],
]


def _in_make_test(cases: list[tuple[str, ...]]) -> list[Any]:
    """`make test` keeps, of each row (the case without its library), one library, turn by turn so
    that every library is met; the others run in `make test-gates` (a client library's machine run
    is seconds of CPU, and `make test` has 5 minutes on two cores)."""
    rows: dict[tuple[str, ...], list[str]] = {}
    for case in cases:
        rows.setdefault(case[:1] + case[2:], []).append(case[1])
    kept = {row: libraries[n % len(libraries)] for n, (row, libraries) in enumerate(rows.items())}
    return [pytest.param(*case, id="-".join(case), marks=() if kept[case[:1] + case[2:]] == case[1] else pytest.mark.gate)
            for case in cases]


@contextlib.contextmanager
def drivers_for(library: str, url: str) -> Iterator[tuple[Callable[[], ClientDriver], Recorder]]:
    """A factory of `library` drivers connected to `url` through a recording relay, and its recorder."""
    host, port = url.rsplit("@", 1)[-1].split("/")[0].split(":")
    made: list[ClientDriver] = []
    recorder = Recorder()
    with recording_relay(host, int(port), recorder) as relay:
        def make() -> ClientDriver:
            driver: ClientDriver = load_driver(library, DRIVER_TIMEOUT)
            driver.connect(relayed(url, relay.port))
            made.append(driver)
            return driver

        try:
            yield make, recorder
        finally:
            for driver in made:
                driver.close()


def run(machine: str, library: str, url: str) -> None:
    with drivers_for(library, url) as (make, recorder):
        run_client_machine(MACHINES[machine], make, PROFILE, recorder=recorder, examples=40, steps=10)


@pytest.fixture(autouse=True)
def _no_shrinking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SHRINK, "0")  # a failure matters here, not its minimal form


@pytest.mark.parametrize(("machine", "library", "fault", "rule"), _in_make_test(FAULT_CASES))
def test_a_client_machine_fails_a_deviating_broker_naming_the_rule(machine: str, library: str, fault: str,
                                                                   rule: str) -> None:
    with EmbeddedBroker(faults=[fault]) as broker, pytest.raises(AssertionError) as failed:
        run(machine, library, broker.url)
    assert re.search(rf"\b{re.escape(rule)}\b", str(failed.value)), str(failed.value)


@pytest.mark.parametrize(("machine", "library"), _in_make_test(
    [(machine, library) for machine in sorted(MACHINES) for library in LIBRARIES]))
def test_a_client_machine_passes_the_reference_broker(machine: str, library: str) -> None:
    with EmbeddedBroker() as broker:
        run(machine, library, broker.url)


@pytest.mark.rabbitmq
@pytest.mark.gate  # every machine through every library on RabbitMQ 3.10.8: `make test-gates`
@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_a_client_machine_passes_rabbitmq(machine: str, library: str, rabbitmq: str) -> None:  # noqa: F811
    run(machine, library, rabbitmq)


def _notes(failure: BaseException) -> str:
    return "\n".join(getattr(failure, "__notes__", ()))


def test_a_client_machine_reports_its_failure_shrunk_to_a_short_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SHRINK, "1")
    # stable by examples only: on a loaded machine the seconds' rule would end shrinking early
    monkeypatch.setattr(machine_budget, "STABLE_SECONDS", 600.0)
    with EmbeddedBroker(faults=["requeue_to_tail"]) as broker, pytest.raises(AssertionError) as failed:
        run("requeue", "pika", broker.url)
    notes = _notes(failed.value)
    assert re.search(r"\(RQ-01 classic requeue position\)", str(failed.value)), str(failed.value)
    assert len(STEP.findall(notes)) == 1 and "the steps as run (1), picks resolved:" in notes, notes
    assert RELAYED.search(notes) and "basic.get-ok" in notes, notes


def test_a_client_machine_reports_the_smallest_failure_found_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """confirm_lost through pika: every failing example waits out pika's bounded wait for the
    confirm (2 s), so shrinking to the one-step program took 38 s here; with a 5 s budget the
    machine stops shrinking when the budget is spent and reports the smallest failure found by
    then, naming PC-05, as its program and the frames the relay recorded (8.7 s here)."""
    budget = 5
    monkeypatch.setenv(ENV_SHRINK, "1")
    monkeypatch.setenv(ENV_BUDGET, str(budget))
    started = time.monotonic()
    with EmbeddedBroker(faults=["confirm_lost"]) as broker, pytest.raises(AssertionError) as failed:
        run("confirms", "pika", broker.url)
    elapsed = time.monotonic() - started
    notes = _notes(failed.value)
    assert re.match(r"PC-05\b", str(failed.value)), str(failed.value)  # "PC-05: ..." or "PC-05/PC-06: ..." (unroutable)
    assert f"the machine's budget ({budget} s, {ENV_BUDGET}) ran out" in notes, notes
    assert 1 <= len(STEP.findall(notes)) <= 10 and "the steps as run" in notes and RELAYED.search(notes), notes
    assert elapsed < budget + 60, f"{elapsed:.1f} s for a {budget} s budget"  # bounded, not a timing (a loaded CI)


class FailsOnce(ClientMachine):
    """One failing step, the first time it runs in a test only: Hypothesis cannot replay it (Flaky)."""

    failed: ClassVar[bool] = False

    def setup_queues(self) -> None:
        self.declare("q")

    @machine_rule()
    @client_step
    def unlucky(self) -> None:
        if not FailsOnce.failed:
            FailsOnce.failed = True
            raise AssertionError("RQ-01: a broker whose timing showed this once")


def test_a_client_machine_reports_the_smallest_failure_seen_when_hypothesis_cannot_replay_it() -> None:
    FailsOnce.failed = False
    with EmbeddedBroker() as broker, drivers_for("pika", broker.url) as (make, recorder), \
            pytest.raises(AssertionError) as failed:
        run_client_machine(FailsOnce, make, PROFILE, recorder=recorder, examples=10, steps=5)
    notes = _notes(failed.value)
    assert str(failed.value).startswith("AssertionError: RQ-01: "), str(failed.value)
    assert "Hypothesis could not replay it the same way" in notes and "m.unlucky()" in notes, notes
    assert re.search(r"frames of this run \(\d+, oldest first\):\n.*c\d+ > ch1 queue\.declare", notes, re.DOTALL), notes
