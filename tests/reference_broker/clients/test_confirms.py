"""Publisher confirms through pika, py-amqp and aio-pika (PC)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aio_pika
import amqp
import pika
import pytest
from aiormq import spec as aiormq_spec
from pika import exceptions as pika_exc

from reference_broker.server import EmbeddedBroker
from tests.reference_broker.clients.support import (
    SETTLE,
    pump_amqp,
    run,
    settle_amqp,
)

pytestmark = pytest.mark.timeout(30)


# ===============================================================================================
# Publisher confirms (PC)
# ===============================================================================================
def test_pika_confirm_mandatory_unroutable_raises_unroutable(
        pika_connect: Callable[[], pika.BlockingConnection], unique_name: Callable[..., str]) -> None:
    """PC-06: a mandatory unroutable publish is returned (312 NO_ROUTE) and acked, and
    BlockingChannel turns that into UnroutableError. (pika reads both frames of one segment
    before deciding, so the order itself is pinned by the py-amqp and aio-pika tests.)"""
    conn = pika_connect()
    ch = conn.channel()
    ch.confirm_delivery()
    nowhere = unique_name("nowhere")
    with pytest.raises(pika_exc.UnroutableError) as info:
        ch.basic_publish("", nowhere, b"lost", pika.BasicProperties(content_type="text/plain"),
                         mandatory=True)
    [returned] = info.value.messages
    assert (returned.method.reply_code, returned.method.reply_text) == (312, "NO_ROUTE")
    assert (returned.method.exchange, returned.method.routing_key) == ("", nowhere)
    assert (returned.body, returned.properties.content_type) == (b"lost", "text/plain")
    # the channel stays usable: a routable mandatory publish is simply acked
    queue = unique_name()
    ch.queue_declare(queue)
    ch.basic_publish("", queue, b"kept", mandatory=True)
    assert ch.queue_declare(queue, passive=True).method.message_count == 1


def test_pika_confirm_unroutable_without_mandatory_is_acked(
        pika_connect: Callable[[], pika.BlockingConnection], unique_name: Callable[..., str]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    ch.confirm_delivery()
    returns: list[Any] = []
    ch.add_on_return_callback(lambda *args: returns.append(args))
    ch.basic_publish("", unique_name("nowhere"), b"dropped")  # acked at once (PC-06), no exception
    conn.process_data_events(time_limit=SETTLE)
    assert returns == []
    assert ch.is_open


def test_pika_confirm_many_publishes_all_acked(broker: EmbeddedBroker,
                                               unique_name: Callable[..., str]) -> None:
    name = unique_name("conn")
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": name}
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        queue = unique_name()
        ch.queue_declare(queue)
        ch.confirm_delivery()
        for i in range(200):
            ch.basic_publish("", queue, f"m{i}".encode())  # each waits for its ack; a nack raises
        assert ch.queue_declare(queue, passive=True).method.message_count == 200

        def next_seqno() -> int:
            [c] = [c for c in broker.server.core.connections.values()
                   if c.client_properties.get("connection_name") == name]
            return c.channels[ch.channel_number].publish_seqno

        assert broker.call(next_seqno) == 201  # PC-02: numbered from 1, one per publish
    finally:
        conn.close()


def test_pika_confirm_and_tx_exclude_each_other(pika_connect: Callable[[], pika.BlockingConnection]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(pika_exc.ChannelClosedByBroker) as info:
        ch.tx_select()
    assert (info.value.reply_code, info.value.reply_text) == (
        406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode")  # PC-03
    ch = conn.channel()
    ch.tx_select()
    with pytest.raises(pika_exc.ChannelClosedByBroker) as info:
        ch.confirm_delivery()
    assert (info.value.reply_code, info.value.reply_text) == (
        406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode")
    assert conn.is_open


def test_amqp_confirm_publish_waits_for_each_ack(amqp_connect: Callable[..., amqp.Connection],
                                                 unique_name: Callable[..., str]) -> None:
    conn = amqp_connect(confirm_publish=True)
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue, auto_delete=False)
    acks: list[tuple[int, bool]] = []
    ch.events["basic_ack"].add(lambda tag, multiple: acks.append((tag, multiple)))
    for i in range(50):
        ch.basic_publish(amqp.Message(f"m{i}".encode()), exchange="", routing_key=queue)
        assert acks[-1] == (i + 1, False)  # basic_publish returned after this message's ack
    assert ch.queue_declare(queue, passive=True).message_count == 50


def test_amqp_confirm_pipelined_acks_cover_every_seqno(amqp_connect: Callable[..., amqp.Connection],
                                                       unique_name: Callable[..., str]) -> None:
    """PC-02/04/05: 300 publishes without waiting; the acks (some multiple=true) confirm each
    seqno exactly once."""
    conn = amqp_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue, auto_delete=False)
    confirmed: list[int] = []
    nacks: list[int] = []

    def on_ack(tag: int, multiple: bool) -> None:
        low = (max(confirmed) if confirmed else 0) + 1 if multiple else tag
        confirmed.extend(range(low, tag + 1))

    ch.events["basic_ack"].add(on_ack)
    ch.events["basic_nack"].add(lambda tag, multiple: nacks.append(tag))
    ch.confirm_select()
    total = 300
    for i in range(total):
        ch.basic_publish(amqp.Message(f"m{i}".encode()), exchange="", routing_key=queue)
    assert pump_amqp(conn, lambda: len(confirmed) >= total)
    settle_amqp(conn)
    assert sorted(confirmed) == list(range(1, total + 1))  # each once, none missing
    assert nacks == []
    assert ch.queue_declare(queue, passive=True).message_count == total


def test_amqp_confirm_return_precedes_ack(amqp_connect: Callable[..., amqp.Connection],
                                          unique_name: Callable[..., str]) -> None:
    conn = amqp_connect(confirm_publish=True)
    ch = conn.channel()
    events: list[Any] = []
    ch.events["basic_return"].add(
        lambda exc, exchange, routing_key, msg: events.append(("return", exc.reply_code, exc.reply_text,
                                                               routing_key, msg.body)))
    ch.events["basic_ack"].add(lambda tag, multiple: events.append(("ack", tag, multiple)))
    nowhere = unique_name("nowhere")
    ch.basic_publish(amqp.Message(b"lost"), exchange="", routing_key=nowhere, mandatory=True)
    assert events == [("return", 312, "NO_ROUTE", nowhere, b"lost"), ("ack", 1, False)]  # PC-06


async def _aiopika_confirm_many(broker: EmbeddedBroker, queue: str, total: int) -> tuple[list[Any], int]:
    async with await aio_pika.connect(broker.url) as conn:
        ch = await conn.channel(publisher_confirms=True)
        q = await ch.declare_queue(queue)
        results = await asyncio.gather(*(ch.default_exchange.publish(aio_pika.Message(f"m{i}".encode()),
                                                                     routing_key=queue)
                                         for i in range(total)))
        declared = await ch.declare_queue(queue, passive=True)
        await q.purge()
        return list(results), int(declared.declaration_result.message_count)


def test_aiopika_confirm_many_publishes_all_acked(broker: EmbeddedBroker,
                                                  unique_name: Callable[..., str]) -> None:
    results, count = run(_aiopika_confirm_many(broker, unique_name(), 300))
    assert all(isinstance(r, aiormq_spec.Basic.Ack) for r in results)
    assert count == 300


async def _aiopika_unroutable(broker: EmbeddedBroker, nowhere: str) -> tuple[Any, list[Any], Any]:
    async with await aio_pika.connect(broker.url) as conn:
        raising = await conn.channel(publisher_confirms=True, on_return_raises=True)
        with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
            await raising.default_exchange.publish(aio_pika.Message(b"lost"), routing_key=nowhere,
                                                   mandatory=True)
        quiet = await conn.channel(publisher_confirms=True)
        returned: list[Any] = []
        quiet.return_callbacks.add(lambda _channel, message: returned.append(message))
        result = await quiet.default_exchange.publish(aio_pika.Message(b"back"), routing_key=nowhere,
                                                      mandatory=True)
        return info.value, returned, result


def test_aiopika_confirm_mandatory_unroutable_is_returned(broker: EmbeddedBroker,
                                                          unique_name: Callable[..., str]) -> None:
    """PC-06 through aiormq: a return seen before the ack fails the publish (on_return_raises)
    or is handed to the return callbacks."""
    nowhere = unique_name("nowhere")
    error, returned, result = run(_aiopika_unroutable(broker, nowhere))
    assert (error.frame.reply_code, error.frame.reply_text, error.frame.routing_key) == (312, "NO_ROUTE", nowhere)
    assert error.message.body == b"lost"
    assert [m.body for m in returned] == [b"back"]
    assert returned[0].routing_key == nowhere
    # aiormq resolves the publish with the returned message because the return came first
    assert isinstance(result.delivery, aiormq_spec.Basic.Return)
    assert (result.delivery.reply_code, result.body) == (312, b"back")
