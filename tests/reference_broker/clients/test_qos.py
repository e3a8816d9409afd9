"""Prefetch through pika, py-amqp and aio-pika (QOS-01, QOS-02)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import aio_pika
import aiormq
import amqp
import pika
import pytest
from amqp import exceptions as amqp_exc
from pika import exceptions as pika_exc

from reference_broker.server import EmbeddedBroker
from tests.reference_broker.clients.support import (
    SETTLE,
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
# Prefetch (QOS-01, QOS-02)
# ===============================================================================================
def test_pika_qos_prefetch_limits_unacked(broker: EmbeddedBroker,
                                          pika_connect: Callable[[], pika.BlockingConnection],
                                          unique_name: Callable[..., str]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue)
    for i in range(10):
        ch.basic_publish("", queue, f"m{i}".encode())
    ch.basic_qos(prefetch_count=3)
    tags: list[int] = []
    ch.basic_consume(queue, lambda _c, m, _p, _b: tags.append(m.delivery_tag))
    assert pump_pika(conn, lambda: len(tags) >= 3)
    conn.process_data_events(time_limit=SETTLE)
    assert tags == [1, 2, 3]
    assert queue_state(broker, queue) == QueueState(ready=7, unacked=3, consumers=1)
    ch.basic_ack(tags[0])  # one slot frees: exactly one more
    assert pump_pika(conn, lambda: len(tags) >= 4)
    conn.process_data_events(time_limit=SETTLE)
    assert tags == [1, 2, 3, 4]
    assert queue_state(broker, queue) == QueueState(ready=6, unacked=3, consumers=1)
    ch.basic_ack(4, multiple=True)  # settles 2, 3, 4: three more
    assert pump_pika(conn, lambda: len(tags) >= 7)
    conn.process_data_events(time_limit=SETTLE)
    assert tags == [1, 2, 3, 4, 5, 6, 7]
    assert queue_state(broker, queue) == QueueState(ready=3, unacked=3, consumers=1)


def test_pika_qos_applies_to_consumers_created_afterwards(
        broker: EmbeddedBroker, pika_connect: Callable[[], pika.BlockingConnection],
        unique_name: Callable[..., str]) -> None:
    """QOS-02: an existing consumer keeps the limit it was created with."""
    conn = pika_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue)
    ch.basic_qos(prefetch_count=1)
    tags: list[int] = []
    ch.basic_consume(queue, lambda _c, m, _p, _b: tags.append(m.delivery_tag))
    ch.basic_qos(prefetch_count=5)  # not picked up by the consumer above
    for i in range(4):
        ch.basic_publish("", queue, f"m{i}".encode())
    assert pump_pika(conn, lambda: tags)
    conn.process_data_events(time_limit=SETTLE)
    assert tags == [1]
    assert queue_state(broker, queue) == QueueState(ready=3, unacked=1, consumers=1)


def test_amqp_qos_prefetch_limits_unacked(broker: EmbeddedBroker, amqp_connect: Callable[..., amqp.Connection],
                                          unique_name: Callable[..., str]) -> None:
    conn = amqp_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue, auto_delete=False)
    for i in range(5):
        ch.basic_publish(amqp.Message(f"m{i}".encode()), exchange="", routing_key=queue)
    ch.basic_qos(prefetch_size=0, prefetch_count=2, a_global=False)
    got: list[amqp.Message] = []
    ch.basic_consume(queue, callback=got.append)
    assert pump_amqp(conn, lambda: len(got) >= 2)
    settle_amqp(conn)
    assert [m.body for m in got] == [b"m0", b"m1"]
    assert queue_state(broker, queue) == QueueState(ready=3, unacked=2, consumers=1)
    ch.basic_ack(got[0].delivery_tag)
    assert pump_amqp(conn, lambda: len(got) >= 3)
    settle_amqp(conn)
    assert [m.body for m in got] == [b"m0", b"m1", b"m2"]
    assert queue_state(broker, queue) == QueueState(ready=2, unacked=2, consumers=1)


async def _aiopika_qos(broker: EmbeddedBroker, queue: str) -> list[Any]:
    """(nothing more arrived within SETTLE, bodies so far, queue state): once the prefetch
    window filled, and again after one ack."""
    snapshots: list[Any] = []
    async with await aio_pika.connect(broker.url) as conn:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=2)
        q = await ch.declare_queue(queue)
        for i in range(5):
            await ch.default_exchange.publish(aio_pika.Message(f"m{i}".encode()), routing_key=queue)
        got: list[aio_pika.abc.AbstractIncomingMessage] = []
        arrived = asyncio.Event()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            got.append(message)
            arrived.set()

        async def wait_for_count(n: int) -> None:
            while len(got) < n:
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), TIMEOUT)

        async def nothing_more(n: int) -> bool:
            arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrived.wait(), SETTLE)
            return len(got) == n

        await q.consume(on_message)
        await wait_for_count(2)
        snapshots.append((await nothing_more(2), [m.body for m in got], queue_state(broker, queue)))
        await got[0].ack()
        await wait_for_count(3)
        snapshots.append((await nothing_more(3), [m.body for m in got], queue_state(broker, queue)))
    return snapshots


def test_aiopika_qos_prefetch_limits_unacked(broker: EmbeddedBroker, unique_name: Callable[..., str]) -> None:
    queue = unique_name()
    first, second = run(_aiopika_qos(broker, queue))
    assert first == (True, [b"m0", b"m1"], QueueState(ready=3, unacked=2, consumers=1))
    assert second == (True, [b"m0", b"m1", b"m2"], QueueState(ready=2, unacked=2, consumers=1))


def test_pika_qos_prefetch_size_closes_connection_540(
        pika_connect: Callable[[], pika.BlockingConnection]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    with pytest.raises(pika_exc.ConnectionClosedByBroker) as info:
        ch.basic_qos(prefetch_size=1024, prefetch_count=10)
    assert (info.value.reply_code, info.value.reply_text) == (
        540, "NOT_IMPLEMENTED - prefetch_size!=0 (1024)")  # QOS-01: hard error
    assert conn.is_closed


def test_amqp_qos_prefetch_size_closes_connection_540(amqp_connect: Callable[..., amqp.Connection]) -> None:
    conn = amqp_connect()
    ch = conn.channel()
    with pytest.raises(amqp_exc.AMQPNotImplementedError) as info:
        ch.basic_qos(prefetch_size=1, prefetch_count=0, a_global=False)
    assert (info.value.reply_code, info.value.reply_text) == (540, "NOT_IMPLEMENTED - prefetch_size!=0 (1)")
    assert info.value.method_sig == (60, 10)
    assert isinstance(info.value, amqp_exc.ConnectionError)  # not a channel error
    assert not conn.connected


async def _aiopika_qos_size(broker: EmbeddedBroker) -> tuple[BaseException, bool]:
    conn = await aio_pika.connect(broker.url)
    try:
        ch = await conn.channel()
        with pytest.raises(aiormq.exceptions.ConnectionNotImplemented) as info:
            await ch.set_qos(prefetch_size=4096)
        return info.value, conn.connected.is_set()
    finally:
        await conn.close()


def test_aiopika_qos_prefetch_size_closes_connection_540(broker: EmbeddedBroker) -> None:
    error, connected = run(_aiopika_qos_size(broker))
    assert aiormq.connection.EXCEPTION_MAPPING[540] is type(error)  # a connection.close 540
    assert error.args[-1] == "NOT_IMPLEMENTED - prefetch_size!=0 (4096)"
    assert connected is False
