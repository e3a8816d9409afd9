"""Round trips through pika, py-amqp and aio-pika: properties and bodies (0 bytes, small,
larger than frame_max), get and consume."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import aio_pika
import amqp
import pika
import pytest
from aio_pika import DeliveryMode

from reference_broker.server import EmbeddedBroker
from tests.reference_broker.clients.support import (
    AMQP_HEADERS,
    BODIES,
    CONTENT_TYPE,
    HEADERS,
    QueueState,
    pump_amqp,
    pump_pika,
    queue_state,
    run,
)

pytestmark = pytest.mark.timeout(30)


# ===============================================================================================
# Round trips: properties and bodies (0 bytes, small, larger than frame_max), get and consume
# ===============================================================================================
class Received(NamedTuple):
    body: bytes
    content_type: str | None
    delivery_mode: int | None
    headers: dict[str, Any] | None
    redelivered: bool
    tag: int


def _pika_roundtrip(broker: EmbeddedBroker, queue: str, body: bytes, mode: str) -> Received:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        ch.queue_declare(queue)
        ch.basic_publish("", queue, body, pika.BasicProperties(content_type=CONTENT_TYPE, delivery_mode=2,
                                                               headers=HEADERS))
        if mode == "get":
            method, props, got = ch.basic_get(queue, auto_ack=False)
            assert method is not None, "basic.get-empty for a published message"
        else:
            received: list[tuple[Any, Any, bytes]] = []
            ch.basic_consume(queue, lambda _c, m, p, b: received.append((m, p, b)))
            assert pump_pika(conn, lambda: received), "no delivery within the deadline"
            method, props, got = received[0]
        ch.basic_ack(method.delivery_tag)
        return Received(got, props.content_type, props.delivery_mode, props.headers, method.redelivered,
                        method.delivery_tag)
    finally:
        conn.close()


def _amqp_roundtrip(broker: EmbeddedBroker, queue: str, body: bytes, mode: str) -> Received:
    with amqp.Connection(host=f"{broker.host}:{broker.port}", userid="guest", password="guest") as conn:
        ch = conn.channel()
        ch.queue_declare(queue, durable=False, auto_delete=False)
        ch.basic_publish(amqp.Message(body, content_type=CONTENT_TYPE, delivery_mode=2,
                                      application_headers=AMQP_HEADERS), exchange="", routing_key=queue)
        if mode == "get":
            msg = ch.basic_get(queue, no_ack=False)
            assert msg is not None, "basic.get-empty for a published message"
        else:
            received: list[amqp.Message] = []
            ch.basic_consume(queue, callback=received.append)
            assert pump_amqp(conn, lambda: received), "no delivery within the deadline"
            msg = received[0]
        ch.basic_ack(msg.delivery_tag)
        # py-amqp leaves Message.body at its default '' (str) when no body frame follows the
        # header, which is how an empty body travels
        body_got = msg.body if msg.body != "" else b""
        return Received(body_got, msg.properties.get("content_type"), msg.properties.get("delivery_mode"),
                        msg.properties.get("application_headers"), msg.delivery_info["redelivered"],
                        msg.delivery_tag)


async def _aiopika_roundtrip(broker: EmbeddedBroker, queue: str, body: bytes, mode: str) -> Received:
    async with await aio_pika.connect(broker.url) as conn:
        ch = await conn.channel()
        q = await ch.declare_queue(queue)
        await ch.default_exchange.publish(
            aio_pika.Message(body, content_type=CONTENT_TYPE, delivery_mode=DeliveryMode.PERSISTENT,
                             headers=HEADERS), routing_key=queue)
        if mode == "get":
            msg = await q.get(no_ack=False, fail=False)
            assert msg is not None, "basic.get-empty for a published message"
            await msg.ack()
        else:
            async with q.iterator() as messages:
                async for msg in messages:
                    await msg.ack()
                    break
        return Received(msg.body, msg.content_type, int(msg.delivery_mode), msg.headers, msg.redelivered,
                        int(msg.delivery_tag or 0))


ROUNDTRIPS: dict[str, Callable[[EmbeddedBroker, str, bytes, str], Received]] = {
    "pika": _pika_roundtrip,
    "py-amqp": _amqp_roundtrip,
    "aio-pika": lambda broker, queue, body, mode: run(_aiopika_roundtrip(broker, queue, body, mode)),
}


@pytest.mark.parametrize("body", list(BODIES.values()), ids=list(BODIES))
@pytest.mark.parametrize("mode", ["get", "consume"])
@pytest.mark.parametrize("client_name", list(ROUNDTRIPS))
def test_roundtrip_properties_and_body(broker: EmbeddedBroker, unique_name: Callable[..., str],
                                       client_name: str, mode: str, body: bytes) -> None:
    queue = unique_name()
    got = ROUNDTRIPS[client_name](broker, queue, body, mode)
    headers = AMQP_HEADERS if client_name == "py-amqp" else HEADERS
    assert got == Received(body, CONTENT_TYPE, 2, headers, False, 1)
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=0, consumers=0)


def test_amqp_headers_long_long_int_type_L(broker: EmbeddedBroker, amqp_connect: Callable[..., amqp.Connection],
                                          unique_name: Callable[..., str]) -> None:
    """py-amqp sends integers outside 32 bits as field type 'L'; RabbitMQ's parse_table reads
    both 'l' and 'L' as signed 64-bit (rabbit_binary_parser, rabbitmq-server#1093), so the
    message must go through and come back (re-encoded as 'l')."""
    conn = amqp_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue, auto_delete=False)
    headers = {"big": 2**40, "negative-big": -(2**40), "nested": {"big": 2**62}, "list": [2**33]}
    ch.basic_publish(amqp.Message(b"x", application_headers=headers), exchange="", routing_key=queue)
    msg = ch.basic_get(queue, no_ack=True)
    assert msg is not None
    assert msg.properties["application_headers"] == headers
    assert conn.connected
