"""The representative subset of `amqp-conformance clients` against every judged client library.

Each (client, smoke scenario) must reach exactly its expected verdict: passed, or the failure a
finding in docs/findings-clients.md describes (the check is shown failing on a client that
deviates, and passing on the ones that do not), or not-applicable where the client's API cannot
express the scenario. A client that is not installed skips (fails under AMQPC_STRICT=1).
"""

from __future__ import annotations

import pytest

from conformance.client_judge import runner
from conformance.drivers.registry import REGISTRY
from conformance.results.verdicts import Verdict
from tests.conftest import require

SMOKE = [s.id for s in runner.select(smoke=True)]
# (client, scenario) -> the verdict other than passed; each failure is a finding in docs/findings-clients.md
EXPECTED = {
    ("pika", "consumer-timeout-cycle"): Verdict.FAILED,  # KeyError on the second broker basic.cancel
    ("pika", "connection-close-320"): Verdict.FAILED,  # no connection.close-ok
    ("pika", "confirm-mixed"): Verdict.NOT_APPLICABLE,  # BlockingConnection waits for each confirm
    ("amqplib", "consumer-timeout-cycle"): Verdict.FAILED,  # "Unknown consumer" closes the channel
    ("amqp", "blocked-unblocked"): Verdict.FAILED,  # the broker's reason is replaced
    ("kombu", "blocked-unblocked"): Verdict.FAILED,  # same, py-amqp underneath
    ("aiormq", "blocked-unblocked"): Verdict.FAILED,  # blocked is only logged
    ("aio-pika", "blocked-unblocked"): Verdict.FAILED,  # same, aiormq underneath
    ("rabbitmq-java", "consumer-timeout-cycle"): Verdict.FAILED,  # "Unsolicited delivery" kills the connection
    ("rabbitmq-c", "capabilities-advertised"): Verdict.FAILED,  # no consumer_cancel_notify in start-ok
    ("rabbitmq-c", "server-cancel"): Verdict.FAILED,  # so no cancel reaches the application
    ("rabbitmq-c", "consumer-timeout-cycle"): Verdict.FAILED,  # same
    ("rabbitmq-c", "blocked-unblocked"): Verdict.NOT_APPLICABLE,  # connection.blocked not advertised
    ("bunny", "properties-intact"): Verdict.FAILED,  # a signed 8-bit header decoded unsigned
    ("bunny", "connection-close-320"): Verdict.FAILED,  # no connection.close-ok
}


@pytest.fixture(scope="module")
def played() -> dict[str, dict[str, runner.ScenarioResult]]:
    """Every installed client plays the subset once, all clients at once (the waits are idle)."""
    specs = [spec for spec in REGISTRY.values() if spec.installed_version()]
    found = runner.run_clients(specs, runner.select(smoke=True), jobs=len(specs), scale=2.0)  # loaded CI
    return {client: {r.scenario.id: r for r in results} for client, results in found.items()}


@pytest.mark.parametrize("scenario", SMOKE)
@pytest.mark.parametrize("client", list(REGISTRY))
def test_client_smoke_verdict(client: str, scenario: str, played: dict[str, dict[str, runner.ScenarioResult]]) -> None:
    spec = REGISTRY[client]
    require(spec.installed_version(), f"client {client} is not installed ({spec.install_hint})")
    result = played[client][scenario]
    expected = EXPECTED.get((client, scenario), Verdict.PASSED)
    assert result.verdict == expected, f"{client} {scenario}: {result.verdict}: {result.message}"
    assert result.client_version == spec.installed_version()
    if result.verdict != Verdict.NOT_APPLICABLE:
        assert result.frames, "every played scenario carries its frame log"
