"""Shared parts of the client loopback tests: bounded waits, broker state, and one small
interface (`PikaClient`, `AmqpClient`, `AioPikaClient`) over the three clients for the tests
parametrized over `client` (fixtures in conftest.py).

Waits are bounded: `pump_*` helpers process client events until a condition holds or a
deadline passes, and the few "nothing more arrives" checks use a short bounded event window
(`SETTLE`) backed by a state check that does not depend on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import aio_pika
import aiormq
import amqp
import pika
from amqp import exceptions as amqp_exc
from pika import exceptions as pika_exc

from reference_broker.server import EmbeddedBroker

TIMEOUT = 5.0  # seconds: the deadline of every bounded wait for something that must happen
SETTLE = 0.2  # seconds: the window in which something that must not happen could show up
CONTENT_TYPE = "application/json"
HEADERS: dict[str, Any] = {
    "text": "héllo wörld",
    "int": 42,
    "negative": -7,
    "big": 2**40,
    "flag": True,
    "nothing": None,
    "nested": {"list": [1, "two", False, {"deep": "yes"}], "table": {"k": "v", "n": 0}},
}
# py-amqp writes integers beyond 32 bits with type 'L' (pika and pamqp use 'l'); that case has a
# test of its own (test_amqp_headers_long_long_int_type_L) so the round trips stay independent
AMQP_HEADERS = {k: v for k, v in HEADERS.items() if k != "big"}
FRAME_MAX = 131072  # what every client negotiates with the broker's default
BODIES = {
    "empty": b"",
    "small": b"hello",
    "300KB": bytes(range(256)) * 1200,  # 307200 bytes: three body frames at frame_max 131072
}
assert len(BODIES["300KB"]) > 2 * FRAME_MAX


# -- broker state --------------------------------------------------------------------------------
class QueueState(NamedTuple):
    ready: int
    unacked: int
    consumers: int


def queue_state(broker: EmbeddedBroker, name: str) -> QueueState | None:
    """The queue as the broker sees it (None when it does not exist)."""

    def read() -> QueueState | None:
        queue = broker.server.core.find_queue("/", name)
        if queue is None:
            return None
        return QueueState(queue.ready_count(), queue.checked_out, len(queue.consumers))

    result: QueueState | None = broker.call(read)
    return result


# -- bounded waits -------------------------------------------------------------------------------
def pump_pika(conn: pika.BlockingConnection, done: Callable[[], object], timeout: float = TIMEOUT) -> bool:
    """Process pika events until `done()` is truthy or the deadline passes; returns done()."""
    deadline = time.monotonic() + timeout
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return bool(done())
        conn.process_data_events(time_limit=min(0.05, remaining))
    return True


def pump_amqp(conn: amqp.Connection, done: Callable[[], object], timeout: float = TIMEOUT) -> bool:
    """Drain py-amqp events until `done()` is truthy or the deadline passes; returns done()."""
    deadline = time.monotonic() + timeout
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return bool(done())
        with contextlib.suppress(TimeoutError):
            conn.drain_events(timeout=min(0.05, remaining))
    return True


def settle_amqp(conn: amqp.Connection, seconds: float = SETTLE) -> None:
    """Let py-amqp handle whatever arrives within `seconds` (a bounded window, not a sleep)."""
    pump_amqp(conn, lambda: False, timeout=seconds)


def run(coro: Any, timeout: float = 20.0) -> Any:
    """Run an aio-pika scenario on a fresh event loop, with a deadline."""
    return asyncio.run(asyncio.wait_for(coro, timeout))



# -- one interface over the three clients, for the settle-semantics tests -----------------------
class Closed(Exception):
    """The broker closed the channel or the connection: scope ("channel"/"connection"), code, text."""

    def __init__(self, scope: str, code: int, text: str) -> None:
        super().__init__(scope, code, text)
        self.scope, self.code, self.text = scope, code, text


@dataclass
class Got:
    tag: int
    body: bytes
    redelivered: bool


class PikaClient:
    def __init__(self, broker: EmbeddedBroker) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        self.ch = self.conn.channel()

    def declare(self, queue: str) -> None:
        self.ch.queue_declare(queue)

    def publish(self, queue: str, body: bytes) -> None:
        self.ch.basic_publish("", queue, body)

    def get(self, queue: str) -> Got | None:
        method, _props, body = self.ch.basic_get(queue, auto_ack=False)
        return None if method is None else Got(method.delivery_tag, body, method.redelivered)

    def ack(self, tag: int, multiple: bool = False) -> None:
        self.ch.basic_ack(tag, multiple)

    def nack(self, tag: int, multiple: bool = False, requeue: bool = True) -> None:
        self.ch.basic_nack(tag, multiple, requeue)

    def reject(self, tag: int, requeue: bool = True) -> None:
        self.ch.basic_reject(tag, requeue)

    def ready(self, queue: str) -> int:
        """A synchronous round trip (queue.declare passive): also surfaces a broker close."""
        try:
            return int(self.ch.queue_declare(queue, passive=True).method.message_count)
        except pika_exc.ChannelClosedByBroker as exc:
            raise Closed("channel", exc.reply_code, exc.reply_text) from exc
        except pika_exc.ConnectionClosedByBroker as exc:
            raise Closed("connection", exc.reply_code, exc.reply_text) from exc

    def new_channel(self) -> None:
        self.ch = self.conn.channel()

    def close_channel(self) -> None:
        self.ch.close()

    def connection_open(self) -> bool:
        return bool(self.conn.is_open)

    def close(self) -> None:
        if self.conn.is_open:
            with contextlib.suppress(pika_exc.AMQPError):
                self.conn.close()


class AmqpClient:
    def __init__(self, broker: EmbeddedBroker) -> None:
        self.conn = amqp.Connection(host=f"{broker.host}:{broker.port}", userid="guest", password="guest")
        self.conn.connect()
        self.ch = self.conn.channel()

    def declare(self, queue: str) -> None:
        self.ch.queue_declare(queue, durable=False, auto_delete=False)

    def publish(self, queue: str, body: bytes) -> None:
        self.ch.basic_publish(amqp.Message(body), exchange="", routing_key=queue)

    def get(self, queue: str) -> Got | None:
        msg = self.ch.basic_get(queue, no_ack=False)
        if msg is None:
            return None
        return Got(msg.delivery_tag, msg.body, msg.delivery_info["redelivered"])

    def ack(self, tag: int, multiple: bool = False) -> None:
        self.ch.basic_ack(tag, multiple)

    def nack(self, tag: int, multiple: bool = False, requeue: bool = True) -> None:
        self.ch.basic_nack(tag, multiple, requeue)

    def reject(self, tag: int, requeue: bool = True) -> None:
        self.ch.basic_reject(tag, requeue)

    def ready(self, queue: str) -> int:
        try:
            return int(self.ch.queue_declare(queue, passive=True).message_count)
        except amqp_exc.ChannelError as exc:
            raise Closed("channel", exc.reply_code, exc.reply_text) from exc
        except amqp_exc.ConnectionError as exc:
            raise Closed("connection", exc.reply_code, exc.reply_text) from exc

    def new_channel(self) -> None:
        self.ch = self.conn.channel()

    def close_channel(self) -> None:
        self.ch.close()

    def connection_open(self) -> bool:
        return bool(self.conn.connected)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


_AIORMQ_CHANNEL_CODES = {cls: code for code, cls in aiormq.channel.EXCEPTION_MAPPING.items()}
_AIORMQ_CONNECTION_CODES = {cls: code for code, cls in aiormq.connection.EXCEPTION_MAPPING.items()}


class AioPikaClient:
    """aio-pika driven from synchronous tests: its event loop runs in a thread of its own
    (so aiormq's reader keeps running between calls); each call waits with a deadline."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="aio-pika-client", daemon=True)
        self.thread.start()
        self.messages: dict[int, aio_pika.abc.AbstractIncomingMessage] = {}

        self.close_reasons: list[BaseException | None] = []

        async def connect() -> Any:
            return await aio_pika.connect(broker.url)

        self.conn = self._run(connect())
        self.new_channel()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(TIMEOUT)

    def declare(self, queue: str) -> None:
        self._run(self.ch.declare_queue(queue))

    def publish(self, queue: str, body: bytes) -> None:
        self._run(self.ch.default_exchange.publish(aio_pika.Message(body), routing_key=queue))

    def get(self, queue: str) -> Got | None:
        async def get() -> Any:
            q = await self.ch.get_queue(queue, ensure=False)
            return await q.get(no_ack=False, fail=False)

        msg = self._run(get())
        if msg is None:
            return None
        self.messages[msg.delivery_tag] = msg
        return Got(msg.delivery_tag, msg.body, msg.redelivered)

    def _settle(self, tag: int, how: str, **kwargs: Any) -> None:
        """Through the IncomingMessage when it is a fresh single delivery, else the raw channel
        (aio-pika refuses to settle an unknown or already settled message client-side)."""
        msg = self.messages.pop(tag, None)

        async def settle() -> None:
            if msg is not None and not msg.processed and not kwargs.get("multiple"):
                kwargs.pop("multiple", None)
                await getattr(msg, how)(**kwargs)
            else:
                underlay = await self.ch.get_underlay_channel()
                await getattr(underlay, f"basic_{how}")(tag, **kwargs)

        self._run(settle())

    def ack(self, tag: int, multiple: bool = False) -> None:
        self._settle(tag, "ack", multiple=multiple)

    def nack(self, tag: int, multiple: bool = False, requeue: bool = True) -> None:
        self._settle(tag, "nack", multiple=multiple, requeue=requeue)

    def reject(self, tag: int, requeue: bool = True) -> None:
        self._settle(tag, "reject", requeue=requeue)

    def ready(self, queue: str) -> int:
        try:
            q = self._run(self.ch.declare_queue(queue, passive=True))
        except aiormq.exceptions.ChannelInvalidStateError:
            # aiormq saw the broker's channel.close before this call: the reason is kept
            # by the close callback
            self._run(asyncio.wait_for(self.ch.closed(), TIMEOUT))
            reason = self.close_reasons[-1] if self.close_reasons else None
            if not isinstance(reason, aiormq.exceptions.ChannelClosed):
                raise
            raise Closed("channel", _AIORMQ_CHANNEL_CODES.get(type(reason), -1),
                         str(reason.args[-1])) from reason
        except aiormq.exceptions.ChannelClosed as exc:
            raise Closed("channel", _AIORMQ_CHANNEL_CODES.get(type(exc), -1), str(exc.args[-1])) from exc
        except aiormq.exceptions.ConnectionClosed as exc:
            raise Closed("connection", _AIORMQ_CONNECTION_CODES.get(type(exc), -1),
                         str(exc.args[-1])) from exc
        return int(q.declaration_result.message_count)

    def new_channel(self) -> None:
        async def channel() -> Any:
            ch = await self.conn.channel()
            ch.close_callbacks.add(lambda _ch, exc: self.close_reasons.append(exc))
            return ch

        self.ch = self._run(channel())

    def close_channel(self) -> None:
        self._run(self.ch.close())

    def connection_open(self) -> bool:
        return bool(self.conn.connected.is_set())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._run(self.conn.close())

        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._run(drain())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(TIMEOUT)
        self.loop.close()


CLIENTS: dict[str, Callable[[EmbeddedBroker], Any]] = {
    "pika": PikaClient,
    "py-amqp": AmqpClient,
    "aio-pika": AioPikaClient,
}



NACK_CLIENTS = [name for name in CLIENTS if name != "py-amqp"]  # py-amqp has no basic_nack


def fill(c: Any, queue: str, n: int) -> None:
    c.declare(queue)
    for i in range(n):
        c.publish(queue, f"m{i}".encode())

