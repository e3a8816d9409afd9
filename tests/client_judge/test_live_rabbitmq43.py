"""The consumer-timeout cycle of RabbitMQ 4.3.6, live, next to the scripted broker's (marked rabbitmq43).

The scenario `consumer-timeout-cycle` plays RabbitMQ 4.3's cycle from the reference engine with
the timers fired by the script. Here the same client program runs against the 4.3.6 node of
`scripts/rabbitmq4.sh` (AMQPC_RMQ43_URL, default amqp://guest:guest@127.0.0.1:5743/): the broker's
methods must be the same sequence, and pika 1.4.4 must die the same way (docs/findings-clients.md
finding 1). Skipped when the node does not answer (fails under AMQPC_STRICT=1).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable

import pika  # a core dependency (pyproject): never missing, so never a skip
import pytest

from codec import (
    BasicAck,
    BasicCancel,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicPublish,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
)
from conformance.client_judge.broker import ScriptedBroker
from conformance.drivers.raw import RawClient
from tests.conftest import require

pytestmark = pytest.mark.rabbitmq43
URL = os.environ.get("AMQPC_RMQ43_URL", "amqp://guest:guest@127.0.0.1:5743/")


def _reachable(url: str) -> bool:
    try:
        RawClient(url, timeout=3.0).connect().close()
    except (OSError, AssertionError):
        return False
    return True


def cycle(url: str, expire: Callable[[], None]) -> list[tuple[str, bool | None]]:
    """consume, deliver, timeout, late ack, redelivery, timeout: the broker's methods as (name, redelivered)."""
    queue = f"clientside-cycle-{uuid.uuid4().hex[:8]}"
    with RawClient(url, timeout=10.0) as client:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue=queue, durable=True, arguments={
            "x-queue-type": "quorum", "x-consumer-timeout": 1000}), QueueDeclareOk)
        try:
            client.rpc(ch, BasicConsume(queue=queue), BasicConsumeOk)
            client.send(ch, BasicPublish(routing_key=queue), body=b"slow work")
            seen = [client.expect(ch, BasicDeliver).method]
            expire()
            seen.append(client.expect(ch, BasicCancel).method)
            client.send(ch, BasicAck(seen[0].delivery_tag))
            seen.append(client.expect(ch, BasicDeliver).method)
            expire()
            seen.append(client.expect(ch, BasicCancel).method)
        finally:
            client.rpc(ch, QueueDelete(queue=queue), QueueDeleteOk)
    return [(m.NAME, getattr(m, "redelivered", None)) for m in seen]


def test_the_scripted_cycle_is_rabbitmq_4_3_6s() -> None:
    require(_reachable(URL), f"RabbitMQ 4.3.6 at {URL} (make rabbitmq4-up)")
    live = cycle(URL, lambda: None)  # 4.3.6's own timer: 1 s
    with ScriptedBroker() as broker:
        scripted = cycle(broker.url, lambda: _fire(broker))
    assert scripted == live == [("basic.deliver", False), ("basic.cancel", None), ("basic.deliver", True),
                                ("basic.cancel", None)]


def _fire(broker: ScriptedBroker) -> None:
    # the delivery's deadline was armed in the same engine step that sent the delivery
    assert broker.fire_timers() >= 1


def test_pika_dies_on_rabbitmq_4_3_6s_second_cancel() -> None:
    require(_reachable(URL), f"RabbitMQ 4.3.6 at {URL} (make rabbitmq4-up)")
    queue = f"clientside-pika-{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum", "x-consumer-timeout": 1000})
    cancels: list[str] = []
    deliveries: list[int] = []
    ch.add_on_cancel_callback(lambda frame: cancels.append(frame.method.consumer_tag))
    ch.basic_consume(queue, lambda _c, method, _p, _b: deliveries.append(method.delivery_tag))
    ch.basic_publish("", queue, b"slow work")
    failure: Exception | None = None
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and failure is None:
            conn.process_data_events(time_limit=0.2)
            if cancels and deliveries and len(deliveries) == 1:
                ch.basic_ack(deliveries[0])  # the late ack
                deliveries.append(-1)
    except pika.exceptions.StreamLostError as exc:
        failure = exc
    finally:
        cleanup = pika.BlockingConnection(pika.URLParameters(URL))
        cleanup.channel().queue_delete(queue)
        cleanup.close()
    assert failure is not None and "KeyError" in str(failure)
