"""The model machines through client libraries: `--client pika|amqp|aio-pika`.

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
from conformance.suite.through_clients.machine_client_confirms import CONFIRM_RULES, ClientConfirmMachine
from conformance.suite.through_clients.machine_client_consuming import (
    CANCEL_RULES,
    PREFETCH_RULES,
    ClientCancelMachine,
    ClientPrefetchMachine,
)
from conformance.suite.through_clients.machine_client_requeue import REQUEUE_RULES, ClientRequeueMachine
from conformance.suite.through_clients.machine_clients import run_client_machine

LIBRARIES = ("pika", "amqp", "aio-pika")
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


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules(*CANCEL_RULES)
def test_cancel_notification_through_the_client_matches_the_model(client: Client, target: Target,
                                                                  recorder: Recorder) -> None:
    """Queue deletion reaches the library's broker-cancel callback (machine_client_consuming)."""
    profile = machine_target(target).profile
    run_client_machine(ClientCancelMachine, client, profile, recorder=recorder, examples=40, steps=10)


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules(*CONFIRM_RULES)
def test_confirms_through_the_client_match_the_model(client: Client, target: Target, recorder: Recorder) -> None:
    """Publisher confirms and returns as the library reports them (machine_client_confirms)."""
    profile = machine_target(target).profile
    run_client_machine(ClientConfirmMachine, client, profile, recorder=recorder, examples=40, steps=10)
