"""The rabbitmq-c, Bunny and php-amqplib adapters report what their library sees, not what is expected.

Each adapter plays two scenarios twice: against a scripted broker that deviates (it loses the
redelivered flag of a requeued message, CL-DLV-01; it cuts the last octet off every delivered
body, CL-FRM-03) the scenario fails naming the deviation, and against the unchanged broker it
passes, where all three libraries are right. The deviation sits in the broker's output (the
engine's basic.deliver, rewritten through the script's `drop`), so what reaches the adapter is exactly what the library decodes and
hands to its application. A client whose Debian package or toolchain is missing skips (fails
under AMQPC_STRICT=1); the library findings themselves are in docs/findings-clients.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest

from codec import BasicDeliver
from conformance.client_judge import runner
from conformance.client_judge.scenario import Play, Scenario
from conformance.drivers.registry import REGISTRY, ClientUnavailable
from conformance.embedded import Send, Write
from conformance.results.verdicts import Verdict
from tests.conftest import require

CLIENTS = ("rabbitmq-c", "bunny", "php-amqplib")
Transform = Callable[[Send], Send]


def _lose_redelivered(send: Send) -> Send:
    if isinstance(send.method, BasicDeliver) and send.method.redelivered:
        return dataclasses.replace(send, method=send.method._replace(redelivered=False))
    return send


def _truncate_body(send: Send) -> Send:
    if isinstance(send.method, BasicDeliver) and send.body:
        return dataclasses.replace(send, body=send.body[:-1])
    return send


# deviation -> (the scenario it must fail, how the broker deviates, what the failure says)
DEVIATIONS: dict[str, tuple[str, Transform, str]] = {
    "redelivered-lost": ("redelivered", _lose_redelivered, "the redelivery arrived with redelivered=False"),
    "body-truncated": ("deliver-fragmented", _truncate_body, "octet body arrived as"),
}


def deviating(sc: Scenario, transform: Transform) -> Scenario:
    """`sc`, played at a broker whose engine sends pass through `transform` (on the broker's loop)."""
    def play(p: Play) -> None:
        server = p.broker.server

        def rewrite(send: Send) -> bool:  # the script's `drop`: take the send, write its deviant form
            changed = transform(send)
            client = server.clients.get(send.conn)
            if changed == send or client is None or client.engine is None:
                return False
            server.execute([Write(send.conn, client.engine.encode(changed))])
            return True

        p.broker.script.drop = rewrite
        sc.play(p)

    return dataclasses.replace(sc, play=play)


@pytest.fixture(scope="module", params=CLIENTS)
def session(request: pytest.FixtureRequest) -> Iterator[runner.ClientSession]:
    spec = REGISTRY[request.param]
    try:
        spec.check()
    except ClientUnavailable as exc:
        require(False, str(exc))
    played = runner.ClientSession(spec, scale=2.0)  # a loaded CI machine
    yield played
    played.stop()


@pytest.mark.parametrize("deviation", sorted(DEVIATIONS))
def test_the_adapter_fails_against_a_deviating_broker(session: runner.ClientSession, deviation: str) -> None:
    scenario_id, transform, said = DEVIATIONS[deviation]
    sc = runner.select([scenario_id])[0]
    result = session.play(deviating(sc, transform))
    assert result.verdict == Verdict.FAILED, f"{session.spec.name} {deviation}: {result.verdict} {result.message}"
    assert said in result.message, result.message
    assert result.client_version == session.spec.installed_version()


@pytest.mark.parametrize("scenario_id", sorted({s for s, _t, _m in DEVIATIONS.values()}))
def test_the_adapter_passes_where_the_library_is_right(session: runner.ClientSession, scenario_id: str) -> None:
    result = session.play(runner.select([scenario_id])[0])
    assert result.verdict == Verdict.PASSED, f"{session.spec.name} {scenario_id}: {result.message}"
    assert result.frames, "every played scenario carries its frame log"
