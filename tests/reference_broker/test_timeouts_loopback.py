"""Consumer timeouts over real sockets: pika (advertises consumer_cancel_notify) and a raw
client that does not; 4.3 rules and the legacy tick. Waits end on frames, with deadlines."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pika
import pytest

from codec import (
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.drivers.raw import ChannelClosed, RawClient
from reference_broker.server import EmbeddedBroker

TEXT = "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: {} ms."


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def test_pika_consumer_gets_basic_cancel_on_timeout(broker: EmbeddedBroker) -> None:
    """TMO-4.3-3/4 with a real client: basic.cancel, channel and connection stay open. pika
    drops the consumer locally and never sends cancel-ok, so (as on RabbitMQ 4.3) the broker
    keeps it registered, in timeout state, until the channel closes."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare("to.pika", durable=True, arguments={"x-queue-type": "quorum", "x-consumer-timeout": 100})
    ch.basic_publish("", "to.pika", b"x")
    cancelled: list[str] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    ch.basic_consume("to.pika", lambda *a: None)
    deadline = time.monotonic() + 10
    while not cancelled and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    assert len(cancelled) == 1
    assert ch.is_open and conn.is_open

    def state() -> tuple[int, int, bool]:
        queue = broker.server.core.find_queue("/", "to.pika")
        assert queue is not None
        consumer = next(iter(queue.consumers.values()))
        return queue.ready_count(), len(queue.consumers), bool(consumer.timed_out)

    assert broker.call(state) == (1, 1, True)  # returned; consumer registered and paused
    conn.close()
    cleanup = pika.BlockingConnection(pika.URLParameters(broker.url))
    cleanup.channel().queue_delete("to.pika")
    cleanup.close()


def test_raw_client_without_capability_loses_the_channel(broker: EmbeddedBroker) -> None:
    with RawClient(broker.url, capabilities={"consumer_cancel_notify": False}) as client:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue="to.raw", durable=True,
                                    arguments={"x-queue-type": "quorum", "x-consumer-timeout": 100}), QueueDeclareOk)
        client.send(ch, BasicPublish(routing_key="to.raw"), BasicProperties(), b"x")
        client.rpc(ch, BasicConsume(queue="to.raw", consumer_tag="c"), BasicConsumeOk)
        client.expect(ch, BasicDeliver)
        with pytest.raises(ChannelClosed) as closed:
            client.expect(ch, BasicDeliver, timeout=10)
        assert (closed.value.code, closed.value.class_id, closed.value.method_id) == (406, 0, 0)
        assert closed.value.text.startswith(TEXT.format(-1))
        cleanup = client.channel()
        client.rpc(cleanup, QueueDeclare(queue="to.raw", passive=True), QueueDeclareOk)


def test_legacy_tick_closes_channel_for_classic_queue() -> None:
    with EmbeddedBroker(timeout_mode="legacy", legacy_ruleset="3.10", tick_interval=100,
                        consumer_timeout=150) as legacy, RawClient(legacy.url) as client:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue="legacy.q"), QueueDeclareOk)
        client.send(ch, BasicPublish(routing_key="legacy.q"), BasicProperties(), b"x")
        client.rpc(ch, BasicConsume(queue="legacy.q", consumer_tag="c"), BasicConsumeOk)
        client.expect(ch, BasicDeliver)
        with pytest.raises(ChannelClosed) as closed:
            client.expect(ch, BasicDeliver, timeout=10)
        assert closed.value.code == 406 and closed.value.text.startswith(TEXT.format(150))
