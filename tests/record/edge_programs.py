"""Client programs for the audit's edge cases, recorded like `tests.record.programs`.

Each takes the broker URL (the recording relay's) and a unique queue name and ends within its
`deadline` whatever the broker does. Nothing here knows about the audit.
- `uncapable_consumer`: a py-amqp consumer that does not advertise consumer_cancel_notify
  (CCN-01), whose queue another connection deletes.
- `nowait_program`: queue.declare, basic.consume, basic.cancel and queue.delete all with
  nowait=true (no -ok reply comes), around a few acked deliveries under prefetch 1; it lingers
  after the delete, longer than the audit's grace for an answer.
- `global_prefetch`: a pika worker with `basic_qos(prefetch_count=2, global_qos=True)` and two
  consumers on two queues, acking one delivery at a time after a pause (QOS-03).
- `requeue_order`: a pika worker with prefetch 3 that holds three deliveries, rejects the
  second then the first with requeue=true, and from then on acks a full window (or what came
  before a pause) at once (RQ-01/RQ-02);
  `quorum_requeue_order` and `classic_requeue_order` the same on a queue declared with its type.
- `unknown_method`: a raw client that publishes and gets a message, then sends a method no
  codec knows (basic 60/99); the broker ends the connection (RabbitMQ 3.10.8: its socket only).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from urllib.parse import urlsplit

import amqp
import pika

from codec import (
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicPublish,
    ConnectionClose,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    encode_frame,
)
from conformance.drivers.raw import Closed, ConnectionLost, RawClient

MESSAGES = 4


def _connect(url: str, deadline: float, capabilities: dict[str, bool] | None = None) -> amqp.Connection:
    parts = urlsplit(url)
    connection = amqp.Connection(f"{parts.hostname}:{parts.port}", userid=parts.username or "guest",
                                 password=parts.password or "guest", connect_timeout=5, read_timeout=deadline,
                                 write_timeout=deadline)
    if capabilities is not None:
        connection.negotiate_capabilities = {**amqp.Connection.negotiate_capabilities, **capabilities}
    connection.connect()
    return connection


def _drain(connection: amqp.Connection, until: float, done: object = None) -> None:
    """Handle incoming frames until `until` (monotonic) or until `done()` is true."""
    while time.monotonic() < until and not (callable(done) and done()):
        with contextlib.suppress(socket.timeout, TimeoutError):
            connection.drain_events(timeout=0.2)


def uncapable_consumer(url: str, queue: str, deadline: float = 5.0) -> dict[str, bool]:
    """A consumer without consumer_cancel_notify; its queue is deleted from another connection.
    Returns whether py-amqp saw a basic.cancel (it raises ConsumerCancelled on one)."""
    consumer = _connect(url, deadline, {"consumer_cancel_notify": False})
    cancelled = False
    try:
        channel = consumer.channel()
        channel.queue_declare(queue, auto_delete=False)
        channel.basic_consume(queue, callback=lambda message: None)
        deleter = _connect(url, deadline)
        try:
            deleter.channel().queue_delete(queue)
        finally:
            with contextlib.suppress(Exception):
                deleter.close()
        try:  # a second of silence: a broker that honours CCN-01 drops the consumer silently
            _drain(consumer, time.monotonic() + 1.0)
        except amqp.exceptions.ConsumerCancelled:
            cancelled = True
    finally:
        with contextlib.suppress(Exception):
            consumer.close()
    return {"cancelled": cancelled}


HOLD_FIRST = 1.0  # s: how long the nowait consumer holds its first delivery waiting for a second


def nowait_program(url: str, queue: str, deadline: float = 5.0) -> list[bytes]:
    """Declare, consume, cancel and delete with nowait=true; the deliveries in between are acked.

    The first delivery is held unacked until a second one arrives or HOLD_FIRST passes: a broker
    over its prefetch of 1 shows it in the recording whatever the timing (an ack sent at once
    could reach the broker before it sends the delivery over the limit)."""
    connection = _connect(url, deadline)
    received: list[bytes] = []
    held: list[int] = []
    holding = [True]  # until the window ends
    try:
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=False, nowait=True)
        for n in range(MESSAGES):
            channel.basic_publish(amqp.Message(f"nowait {n}"), routing_key=queue)
        channel.basic_qos(0, 1, False)

        def handle(message: amqp.Message) -> None:
            received.append(message.body)
            if holding[0] and len(received) == 1:
                held.append(message.delivery_tag)
                return
            for tag in held:
                channel.basic_ack(tag)
            held.clear()
            channel.basic_ack(message.delivery_tag)

        channel.basic_consume(queue, consumer_tag="nowait-consumer", callback=handle, nowait=True)
        _drain(connection, time.monotonic() + HOLD_FIRST, lambda: len(received) >= 2)
        holding[0] = False
        for tag in held:  # a broker keeping the limit sent nothing more meanwhile
            channel.basic_ack(tag)
        held.clear()
        _drain(connection, time.monotonic() + deadline, lambda: len(received) >= MESSAGES)
        channel.basic_cancel("nowait-consumer", nowait=True)
        channel.queue_delete(queue, nowait=True)
        _drain(connection, time.monotonic() + 1.5)  # longer than the audit's grace for a delete-ok
        channel.queue_declare(queue + "-sync", auto_delete=True)  # a round trip: the nowait methods were handled
        channel.close()
    finally:
        with contextlib.suppress(Exception):
            connection.close()
    return received


def global_prefetch(url: str, queue: str, deadline: float = 8.0) -> int:
    """Two consumers on two queues under one channel-wide limit of 2; each held delivery is acked
    after a pause in which a broker keeping the limit sends nothing more. Returns the acks."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    queues = [f"{queue}-a", f"{queue}-b"]
    for name in queues:
        channel.queue_declare(name, auto_delete=False)
        for n in range(MESSAGES):
            channel.basic_publish("", name, f"{name} {n}".encode())
    channel.basic_qos(prefetch_count=2, global_qos=True)
    held: list[int] = []
    tags = [channel.basic_consume(name, lambda ch, method, properties, body: held.append(method.delivery_tag))
            for name in queues]
    acked = 0
    end = time.monotonic() + deadline
    while acked < 2 * MESSAGES and time.monotonic() < end:
        connection.process_data_events(time_limit=0.3)  # the pause: nothing more may come while 2 are held
        if held:
            channel.basic_ack(held.pop(0))
            acked += 1
    for tag in tags:
        channel.basic_cancel(tag)  # no consumer left when the queues go (GarageMQ wedges otherwise)
    for name in queues:
        channel.queue_delete(name)
    connection.close()
    return acked


def unknown_method(url: str, queue: str, deadline: float = 5.0) -> int | None:
    """Publish and get one message, then an unknown method; the reply code of the broker's close."""
    with RawClient(url, timeout=deadline) as client:
        channel = client.channel()
        client.rpc(channel, QueueDeclare(queue=queue), QueueDeclareOk)
        client.send(channel, BasicPublish(routing_key=queue), body=b"judged")
        client.rpc(channel, BasicGet(queue=queue, no_ack=True), BasicGetOk, BasicGetEmpty)
        client.rpc(channel, QueueDelete(queue=queue), QueueDeleteOk)
        client.send_raw(encode_frame(1, channel, struct.pack(">HH", 60, 99)), channel)  # no such method
        try:
            close = client.expect(0, ConnectionClose).method
        except Closed as exc:
            return exc.code
        except ConnectionLost:
            return None  # the broker dropped the connection without a close
        return close.reply_code if isinstance(close, ConnectionClose) else None


def requeue_order(url: str, queue: str, deadline: float = 8.0, arguments: dict[str, object] | None = None) -> list[bytes]:
    """Hold three deliveries, reject the second and then the first (requeue=true), ack the rest.
    Returns the bodies in the order they came."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare(queue, durable=arguments is not None, arguments=arguments)
    for n in range(MESSAGES + 2):
        channel.basic_publish("", queue, f"order {n}".encode())
    channel.basic_qos(prefetch_count=3)
    came: list[bytes] = []
    held: list[int] = []

    def work(ch: pika.adapters.blocking_connection.BlockingChannel, method: pika.spec.Basic.Deliver,
             properties: pika.BasicProperties, body: bytes) -> None:
        came.append(body)
        held.append(method.delivery_tag)
        if len(came) == 3:  # the window is full: nothing more can come until a settlement
            ch.basic_reject(held[1], requeue=True)
            ch.basic_reject(held[0], requeue=True)
            ch.basic_ack(held.pop())
            held.clear()

    tag = channel.basic_consume(queue, work)
    end = time.monotonic() + deadline
    while len(came) < MESSAGES + 4 and time.monotonic() < end:
        before = len(came)
        connection.process_data_events(time_limit=0.2)
        if held and (len(held) == 3 or len(came) == before):  # a full window, or nothing more: ack them all
            channel.basic_ack(held[-1], multiple=True)
            held.clear()
    channel.basic_cancel(tag)
    channel.queue_delete(queue)
    connection.close()
    return came


def quorum_requeue_order(url: str, queue: str, deadline: float = 8.0) -> list[bytes]:
    return requeue_order(url, queue, deadline, {"x-queue-type": "quorum"})


def classic_requeue_order(url: str, queue: str, deadline: float = 8.0) -> list[bytes]:
    """`requeue_order` on a queue declared classic explicitly (the broker's default may not be)."""
    return requeue_order(url, queue, deadline, {"x-queue-type": "classic"})
