"""Consumer cancel notification and consumer tags through each client (CCN-01..03, CCN-07)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import aio_pika
import amqp
import pika
import pytest
from aiormq import spec as aiormq_spec
from amqp import exceptions as amqp_exc

from reference_broker.server import EmbeddedBroker
from tests.reference_broker.clients.support import (
    TIMEOUT,
    QueueState,
    pump_amqp,
    pump_pika,
    queue_state,
    run,
    settle_amqp,
)

pytestmark = pytest.mark.timeout(30)


# ===============================================================================================
# Consumer cancel notification (CCN-01..03, CCN-07)
# ===============================================================================================
def test_capabilities_exchanged_on_connect(broker: EmbeddedBroker,
                                           amqp_connect: Callable[..., amqp.Connection],
                                           unique_name: Callable[..., str]) -> None:
    """CCN-01: the broker advertises its capabilities; a client that sends
    consumer_cancel_notify=true gets cancel notifications recorded for its connection."""
    conn = amqp_connect()
    advertised = conn.server_capabilities
    for capability in ("publisher_confirms", "exchange_exchange_bindings", "basic.nack",
                       "consumer_cancel_notify", "connection.blocked", "consumer_priorities",
                       "authentication_failure_close", "per_consumer_qos"):
        assert advertised.get(capability) is True, capability
    name = unique_name("conn")
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": name}
    with contextlib.closing(pika.BlockingConnection(params)):
        notify = broker.call(lambda: [c.cancel_notify for c in broker.server.core.connections.values()
                                      if c.client_properties.get("connection_name") == name])
    assert notify == [True]


@pytest.mark.parametrize("deleter", ["same-connection", "other-connection"])
def test_pika_cancel_notify_on_queue_delete(broker: EmbeddedBroker,
                                            pika_connect: Callable[[], pika.BlockingConnection],
                                            unique_name: Callable[..., str], deleter: str) -> None:
    conn = pika_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue)
    cancels: list[Any] = []
    ch.add_on_cancel_callback(cancels.append)
    tag = ch.basic_consume(queue, lambda *_args: None)
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=0, consumers=1)
    other = conn.channel() if deleter == "same-connection" else pika_connect().channel()
    other.queue_delete(queue)
    assert pump_pika(conn, lambda: cancels), "no basic.cancel from the broker (CCN-02)"
    assert [c.method.consumer_tag for c in cancels] == [tag]
    assert tag not in ch.consumer_tags  # pika dropped the consumer
    assert ch.is_open and conn.is_open
    assert queue_state(broker, queue) is None


def test_amqp_cancel_notify_on_queue_delete(amqp_connect: Callable[..., amqp.Connection],
                                            unique_name: Callable[..., str]) -> None:
    conn = amqp_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue, auto_delete=False)
    cancels: list[str] = []
    tag = ch.basic_consume(queue, callback=lambda _m: None, on_cancel=cancels.append)
    amqp_connect().channel().queue_delete(queue)
    assert pump_amqp(conn, lambda: cancels), "no basic.cancel from the broker (CCN-02)"
    assert cancels == [tag]
    assert tag not in ch.callbacks
    assert ch.is_open


def test_amqp_no_cancel_notify_without_capability(broker: EmbeddedBroker,
                                                  amqp_connect: Callable[..., amqp.Connection],
                                                  unique_name: Callable[..., str]) -> None:
    """CCN-02: without consumer_cancel_notify the consumer is dropped silently (py-amqp would
    raise ConsumerCancelled on an unexpected basic.cancel)."""
    conn = amqp_connect(capabilities={"consumer_cancel_notify": False})
    assert conn.client_properties["capabilities"]["consumer_cancel_notify"] is False
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue, auto_delete=False)
    ch.basic_consume(queue, callback=lambda _m: None)
    amqp_connect().channel().queue_delete(queue)
    settle_amqp(conn)  # a basic.cancel would raise ConsumerCancelled here
    assert queue_state(broker, queue) is None
    assert ch.is_open
    assert ch.queue_declare(unique_name(), auto_delete=False).message_count == 0  # channel still works


def test_amqp_cancel_unknown_tag_is_ok(amqp_connect: Callable[..., amqp.Connection]) -> None:
    conn = amqp_connect()
    ch = conn.channel()
    assert ch.basic_cancel("no-such-consumer") == "no-such-consumer"  # CCN-03: cancel-ok
    assert ch.is_open and conn.connected


def test_amqp_consumer_tag_reuse_closes_connection_530(amqp_connect: Callable[..., amqp.Connection],
                                                       unique_name: Callable[..., str]) -> None:
    conn = amqp_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue, auto_delete=False)
    ch.basic_consume(queue, consumer_tag="dup", callback=lambda _m: None)
    with pytest.raises(amqp_exc.NotAllowed) as info:
        ch.basic_consume(queue, consumer_tag="dup", callback=lambda _m: None)
    assert (info.value.reply_code, info.value.reply_text) == (
        530, "NOT_ALLOWED - attempt to reuse consumer tag 'dup'")  # CCN-07: a connection error
    assert not conn.connected


async def _aiopika_cancel_notify(broker: EmbeddedBroker, queue: str) -> tuple[str, list[str], bool]:
    async with await aio_pika.connect(broker.url) as conn:
        ch = await conn.channel()
        q = await ch.declare_queue(queue)
        underlay = await ch.get_underlay_channel()
        cancelled = asyncio.Event()
        tags: list[str] = []

        def on_cancel(frame: aiormq_spec.Basic.Cancel) -> None:
            tags.append(frame.consumer_tag)
            cancelled.set()

        async def ignore(_message: aio_pika.abc.AbstractIncomingMessage) -> None:
            return None

        underlay.on_consumer_cancel_callbacks.add(on_cancel)
        tag = await q.consume(ignore)
        other = await conn.channel()
        await other.queue_delete(queue)
        await asyncio.wait_for(cancelled.wait(), TIMEOUT)
        return tag, tags, tag in underlay.consumers


def test_aiopika_cancel_notify_on_queue_delete(broker: EmbeddedBroker, unique_name: Callable[..., str]) -> None:
    tag, tags, still_registered = run(_aiopika_cancel_notify(broker, unique_name()))
    assert tags == [tag]
    assert still_registered is False
