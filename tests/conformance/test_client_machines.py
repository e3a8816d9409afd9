"""The model machines through client libraries (issue 14): each is proven against a deviating broker.

Each case runs one machine (conformance/suite/machine_client_*.py) through one library against
the embedded reference broker with one named fault (reference_broker/faults.py) and expects
the failure to name the rule the fault breaks; the same machines pass the conforming reference
broker and, marked `rabbitmq`, RabbitMQ 3.10.8. Derandomized with the suite's budgets, so
`make test` stays quick and every run checks the same programs.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator

import pytest

from conformance.drivers.adapter import load_driver
from conformance.drivers.interface import ClientDriver, Recorder
from conformance.drivers.relay import RecordingRelay
from conformance.plugin.through_clients import relayed
from conformance.suite.machine_client_confirms import ClientConfirmMachine
from conformance.suite.machine_client_consuming import ClientCancelMachine, ClientPrefetchMachine
from conformance.suite.machine_client_requeue import ClientRequeueMachine
from conformance.suite.machine_clients import ClientMachine, run_client_machine
from conformance.suite.machine_support import ENV_SHRINK
from reference_broker.server import EmbeddedBroker
from tests.conformance.test_cli_rabbitmq import rabbitmq  # noqa: F401  (fixture)

LIBRARIES = ("pika", "amqp", "aio-pika")
PROFILE = "rabbitmq-3.10"
MACHINES: dict[str, type[ClientMachine]] = {"requeue": ClientRequeueMachine, "prefetch": ClientPrefetchMachine,
                                             "cancel": ClientCancelMachine, "confirms": ClientConfirmMachine}
DRIVER_TIMEOUT = 2.0  # s: what a library waits for a reply (pika's publish for its confirm) before NoReply

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


@contextlib.contextmanager
def drivers_for(library: str, url: str) -> Iterator[Callable[[], ClientDriver]]:
    """A factory of `library` drivers connected to `url` through a recording relay."""
    host, port = url.rsplit("@", 1)[-1].split("/")[0].split(":")
    made: list[ClientDriver] = []
    with RecordingRelay(host, int(port), Recorder()) as relay:
        def make() -> ClientDriver:
            driver: ClientDriver = load_driver(library, DRIVER_TIMEOUT)
            driver.connect(relayed(url, relay.port))
            made.append(driver)
            return driver

        try:
            yield make
        finally:
            for driver in made:
                driver.close()


def run(machine: str, library: str, url: str) -> None:
    with drivers_for(library, url) as make:
        run_client_machine(MACHINES[machine], make, PROFILE, examples=40, steps=10)


@pytest.fixture(autouse=True)
def _no_shrinking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SHRINK, "0")  # a failure matters here, not its minimal form


@pytest.mark.parametrize(("machine", "library", "fault", "rule"), FAULT_CASES,
                         ids=lambda v: v if isinstance(v, str) else None)
def test_a_client_machine_fails_a_deviating_broker_naming_the_rule(machine: str, library: str, fault: str,
                                                                   rule: str) -> None:
    with EmbeddedBroker(faults=[fault]) as broker, pytest.raises(AssertionError) as failed:
        run(machine, library, broker.url)
    assert re.search(rf"\b{re.escape(rule)}\b", str(failed.value)), str(failed.value)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_a_client_machine_passes_the_reference_broker(machine: str, library: str) -> None:
    with EmbeddedBroker() as broker:
        run(machine, library, broker.url)


@pytest.mark.rabbitmq
@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_a_client_machine_passes_rabbitmq(machine: str, library: str, rabbitmq: str) -> None:  # noqa: F811
    run(machine, library, rabbitmq)
