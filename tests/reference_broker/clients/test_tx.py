"""Transactions through pika, py-amqp and aio-pika (PC-11, ACK-08)."""

from __future__ import annotations

from collections.abc import Callable

import aio_pika
import amqp
import pika
import pytest
from pika import exceptions as pika_exc

from reference_broker.server import EmbeddedBroker
from tests.reference_broker.clients.support import (
    QueueState,
    queue_state,
    run,
)

pytestmark = pytest.mark.timeout(30)


# ===============================================================================================
# Transactions (PC-11, ACK-08)
# ===============================================================================================
def test_pika_tx_rollback_discards_commit_delivers(pika_connect: Callable[[], pika.BlockingConnection],
                                                   unique_name: Callable[..., str]) -> None:
    conn = pika_connect()
    ch, observer = conn.channel(), conn.channel()
    queue = unique_name()
    ch.queue_declare(queue)
    ch.tx_select()
    ch.basic_publish("", queue, b"rolled-back")
    assert observer.queue_declare(queue, passive=True).method.message_count == 0  # not before commit
    ch.tx_rollback()
    assert observer.queue_declare(queue, passive=True).method.message_count == 0
    ch.basic_publish("", queue, b"committed")
    assert observer.queue_declare(queue, passive=True).method.message_count == 0
    ch.tx_commit()
    _method, _props, body = observer.basic_get(queue, auto_ack=True)
    assert body == b"committed"
    assert observer.basic_get(queue, auto_ack=True) == (None, None, None)


def test_pika_tx_acks_deferred_until_commit(broker: EmbeddedBroker,
                                            pika_connect: Callable[[], pika.BlockingConnection],
                                            unique_name: Callable[..., str]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue)
    ch.basic_publish("", queue, b"one")
    method, _props, _body = ch.basic_get(queue)
    ch.tx_select()
    ch.basic_ack(method.delivery_tag)
    ch.tx_rollback()  # ACK-08: the ack is undone, the delivery is unacked again
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=1, consumers=0)
    ch.basic_ack(method.delivery_tag)  # still a known tag
    ch.queue_declare(queue, passive=True)  # a round trip: the ack has been applied
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=1, consumers=0)  # deferred
    ch.tx_commit()
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=0, consumers=0)


def test_pika_tx_commit_on_non_tx_channel_406(pika_connect: Callable[[], pika.BlockingConnection]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    with pytest.raises(pika_exc.ChannelClosedByBroker) as info:
        ch.tx_commit()
    assert (info.value.reply_code, info.value.reply_text) == (
        406, "PRECONDITION_FAILED - channel is not transactional")  # PC-11
    assert conn.is_open


def test_amqp_tx_rollback_discards_commit_delivers(amqp_connect: Callable[..., amqp.Connection],
                                                   unique_name: Callable[..., str]) -> None:
    conn = amqp_connect()
    ch, observer = conn.channel(), conn.channel()
    queue = unique_name()
    ch.queue_declare(queue, auto_delete=False)
    ch.tx_select()
    ch.basic_publish(amqp.Message(b"rolled-back"), exchange="", routing_key=queue)
    ch.tx_rollback()
    assert observer.basic_get(queue, no_ack=True) is None
    ch.basic_publish(amqp.Message(b"committed"), exchange="", routing_key=queue)
    assert observer.queue_declare(queue, passive=True).message_count == 0
    ch.tx_commit()
    msg = observer.basic_get(queue, no_ack=True)
    assert msg is not None and msg.body == b"committed"
    assert observer.basic_get(queue, no_ack=True) is None


async def _aiopika_tx(broker: EmbeddedBroker, queue: str) -> tuple[list[int], bytes]:
    """Ready counts seen by another channel: after rollback, before commit, after commit;
    then the body that arrived."""
    counts: list[int] = []
    async with await aio_pika.connect(broker.url) as conn:
        ch = await conn.channel(publisher_confirms=False)
        observer = await conn.channel()
        await ch.declare_queue(queue)

        async def ready() -> int:
            return int((await observer.declare_queue(queue, passive=True)).declaration_result.message_count)

        tx = ch.transaction()
        await tx.select()
        await ch.default_exchange.publish(aio_pika.Message(b"rolled-back"), routing_key=queue)
        await tx.rollback()
        counts.append(await ready())
        await ch.default_exchange.publish(aio_pika.Message(b"committed"), routing_key=queue)
        counts.append(await ready())
        await tx.commit()
        counts.append(await ready())
        q = await observer.get_queue(queue, ensure=False)
        msg = await q.get(no_ack=True)
    return counts, msg.body


def test_aiopika_tx_rollback_discards_commit_delivers(broker: EmbeddedBroker,
                                                      unique_name: Callable[..., str]) -> None:
    assert run(_aiopika_tx(broker, unique_name())) == ([0, 0, 1], b"committed")
