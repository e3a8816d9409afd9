"""The model machines through client libraries: `--client NAME` (any library of the client registry).

Each test runs one machine whose steps are `ClientDriver` calls (machine_clients,
machine_client_*), the model as oracle, under `--client` only (the raw run has the same
machines on the wire: the areas' test_machine_*.py). What a library cannot express is
said in the machine's module docstring: a step left out for one library, or the whole test
not-applicable for it (`clients(..., why=...)`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance.drivers.interface import ClientDriver, Recorder
from conformance.plugin.session import Target
from conformance.suite.steps.machine_consuming import machine_target
from conformance.suite.through_clients.libraries import LIBRARIES, NO_CANCEL_NOTIFY, clients_but
from conformance.suite.through_clients.machine_client_confirms import CONFIRM_RULES, ClientConfirmMachine
from conformance.suite.through_clients.machine_client_consuming import (
    CANCEL_RULES,
    PREFETCH_RULES,
    ClientCancelMachine,
    ClientPrefetchMachine,
)
from conformance.suite.through_clients.machine_client_requeue import REQUEUE_RULES, ClientRequeueMachine
from conformance.suite.through_clients.machine_clients import run_client_machine

Client = Callable[[], ClientDriver]


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules(*REQUEUE_RULES)
def test_requeue_through_the_client_matches_the_model(client: Client, target: Target, recorder: Recorder) -> None:
    """Requeue order and the redelivered flag (machine_client_requeue), classic and quorum."""
    profile = machine_target(target).profile  # not-applicable where the model does not speak for the broker
    run_client_machine(ClientRequeueMachine, client, profile, recorder=recorder, examples=40, steps=10)


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules(*PREFETCH_RULES)
def test_prefetch_through_the_client_matches_the_model(client: Client, target: Target, recorder: Recorder) -> None:
    """Consumer prefetch, deliveries to the library's consumer callback (machine_client_consuming)."""
    profile = machine_target(target).profile
    run_client_machine(ClientPrefetchMachine, client, profile, recorder=recorder, examples=40, steps=10)


@clients_but({**NO_CANCEL_NOTIFY, "kombu": "kombu's Consumer gives py-amqp no cancel callback: a broker basic.cancel "
               "is raised (ConsumerCancelled) out of whichever call is waiting, so an operation in flight then is "
               "lost to the application"})
@pytest.mark.rules(*CANCEL_RULES)
def test_cancel_notification_through_the_client_matches_the_model(client: Client, target: Target,
                                                                  recorder: Recorder) -> None:
    """Queue deletion reaches the library's broker-cancel callback (machine_client_consuming)."""
    profile = machine_target(target).profile
    run_client_machine(ClientCancelMachine, client, profile, recorder=recorder, examples=40, steps=10)


@clients_but({"amqp091-go": "amqp091-go 1.5.0 reports a publish acked out of order as nacked when a later multiple "
                            "nack covers it (docs/findings-clients.md, 17): its view of confirms is not the broker's",
               "bunny": "Bunny 2.19 reports a publish acked out of order again, as nacked, when a later multiple "
                        "nack spans it (docs/findings-clients.md, 17): its view of confirms is not the broker's"})
@pytest.mark.rules(*CONFIRM_RULES)
def test_confirms_through_the_client_match_the_model(client: Client, target: Target, recorder: Recorder) -> None:
    """Publisher confirms and returns as the library reports them (machine_client_confirms)."""
    profile = machine_target(target).profile
    run_client_machine(ClientConfirmMachine, client, profile, recorder=recorder, examples=40, steps=10)
