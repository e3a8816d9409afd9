"""Ordinary client programs, written as their libraries' tutorials write them, to be recorded.

Each takes the broker URL (the recording relay's) and a unique queue name, and ends within its
`deadline` whatever the broker does (GarageMQ can wedge on queue.delete: docs/garagemq.md).
Nothing here knows about the audit: the programs are the traffic "no one here wrote".
- `pika_work_queue`: a worker with prefetch 2 and manual acks that rejects each message once
  with requeue=true, then acks it when it comes back (pika's work-queue tutorial plus nack).
- `pika_confirms`: a publisher with publisher confirms (pika's `confirm_delivery`).
- `kombu_work_queue`: kombu's SimpleQueue with `message.requeue()` once, then `ack()`.
- `pyamqp_confirms`: py-amqp's confirm_select with `confirm_publish`.
- `cancelled_by_deletion`: a pika consumer (with an on_cancel callback) whose queue a py-amqp
  program deletes from another connection.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import amqp
import kombu
import pika

MESSAGES = 6


def pika_work_queue(url: str, queue: str, deadline: float = 10.0) -> list[bytes]:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare(queue, auto_delete=False)
    for n in range(MESSAGES):
        channel.basic_publish("", queue, f"task {n}".encode())
    channel.basic_qos(prefetch_count=2)
    rejected: set[bytes] = set()
    done: list[bytes] = []

    def work(ch: pika.adapters.blocking_connection.BlockingChannel, method: pika.spec.Basic.Deliver,
             properties: pika.BasicProperties, body: bytes) -> None:
        if body not in rejected:
            rejected.add(body)
            ch.basic_nack(method.delivery_tag, requeue=True)  # "not now": back to the queue
        else:
            done.append(body)
            ch.basic_ack(method.delivery_tag)

    tag = channel.basic_consume(queue, work)
    end = time.monotonic() + deadline
    while len(done) < MESSAGES and time.monotonic() < end:
        connection.process_data_events(time_limit=0.2)
    channel.basic_cancel(tag)  # no consumer left when the queue goes
    channel.queue_delete(queue)
    connection.close()
    return done


def pika_confirms(url: str, queue: str, deadline: float = 10.0) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare(queue)
    channel.confirm_delivery()
    for n in range(MESSAGES * 3):
        channel.basic_publish("", queue, f"event {n}".encode(), mandatory=True)  # raises if nacked
    channel.queue_delete(queue)
    connection.close()
    return MESSAGES * 3


def kombu_work_queue(url: str, queue: str, deadline: float = 10.0) -> list[bytes]:
    done: list[bytes] = []
    with kombu.Connection(url, connect_timeout=5) as connection:
        simple = connection.SimpleQueue(queue, serializer="raw")
        for n in range(MESSAGES):
            simple.put(f"job {n}".encode(), serializer=None, content_type="text/plain")
        requeued: set[bytes] = set()
        end = time.monotonic() + deadline
        while len(done) < MESSAGES and time.monotonic() < end:
            try:
                message = simple.get(block=True, timeout=0.5)
            except simple.Empty:
                continue
            if message.body not in requeued:
                requeued.add(message.body)
                message.requeue()
            else:
                done.append(message.body)
                message.ack()
        simple.consumer.cancel()
        simple.queue.delete()
        simple.close()
    return done


def pyamqp_confirms(url: str, queue: str, deadline: float = 10.0) -> int:
    with _pyamqp(url, deadline) as connection:
        channel = connection.channel()
        channel.queue_declare(queue)
        channel.confirm_select()
        for n in range(MESSAGES * 2):
            channel.basic_publish(amqp.Message(f"reading {n}"), routing_key=queue, confirm_timeout=deadline)
        channel.queue_delete(queue)
    return MESSAGES * 2


def run_bounded(program: Callable[[str, str], object], url: str, queue: str, limit: float) -> tuple[bool, object]:
    """Run a program in a thread for at most `limit` seconds: (finished, its result or exception).
    A program stuck on a wedged broker stays blocked until its sockets are closed (the relay's
    close aborts them)."""
    outcome: list[object] = []

    def body() -> None:
        try:
            outcome.append(program(url, queue))
        except Exception as exc:  # the program's own failure is part of what it saw
            outcome.append(exc)

    thread = threading.Thread(target=body, name=f"program-{queue}", daemon=True)
    thread.start()
    thread.join(limit)
    return (not thread.is_alive(), outcome[0] if outcome else None)


def cancelled_by_deletion(url: str, queue: str, deadline: float = 5.0) -> dict[str, bool]:
    """A pika consumer; a py-amqp program deletes its queue. Returns what each side saw."""
    consumer = pika.BlockingConnection(pika.URLParameters(url))
    channel = consumer.channel()
    channel.queue_declare(queue)
    cancelled = threading.Event()
    channel.add_on_cancel_callback(lambda frame: cancelled.set())
    channel.basic_consume(queue, lambda ch, method, properties, body: ch.basic_ack(method.delivery_tag))
    deleted = _delete_elsewhere(url, queue, deadline)
    end = time.monotonic() + deadline
    while not cancelled.is_set() and time.monotonic() < end:
        consumer.process_data_events(time_limit=0.2)
    with contextlib.suppress(Exception):
        consumer.close()
    return {"deleted": deleted, "cancelled": cancelled.is_set()}


def _delete_elsewhere(url: str, queue: str, deadline: float) -> bool:
    try:
        with _pyamqp(url, deadline) as deleter:
            deleter.channel().queue_delete(queue)
        return True
    except (TimeoutError, OSError, amqp.exceptions.AMQPError):
        return False  # no queue.delete-ok in time (GarageMQ: fault 1)


@contextlib.contextmanager
def _pyamqp(url: str, deadline: float):  # type: ignore[no-untyped-def]
    parts = urlsplit(url)
    connection = amqp.Connection(f"{parts.hostname}:{parts.port}", userid=parts.username or "guest",
                                 password=parts.password or "guest", connect_timeout=5, read_timeout=deadline,
                                 write_timeout=deadline)
    connection.connect()
    try:
        yield connection
    finally:
        with contextlib.suppress(Exception):
            connection.collect()  # drop the socket without a close handshake that could hang
