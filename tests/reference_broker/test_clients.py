"""Loopback tests: real AMQP clients (pika, py-amqp, aio-pika) against the reference broker.

The clients are used unchanged, through their public APIs; each test checks behaviour a
client can observe (deliveries, properties, exceptions with reply code and text), and where
that alone cannot show it (what the broker withholds), the broker's state read through
`EmbeddedBroker.call`. Rule IDs refer to RULES.md.

Waits are bounded: `pump_*` helpers process client events until a condition holds or a
deadline passes, and the few "nothing more arrives" checks use a short bounded event window
(`SETTLE`) backed by a state check that does not depend on timing.

Tests parametrized over `client` use small adapters (`PikaClient`, `AmqpClient`,
`AioPikaClient`) exposing the same publish/get/settle operations; everything else is written
per client because the clients' APIs differ.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import aio_pika
import aiormq
import amqp
import pika
import pytest
from aio_pika import DeliveryMode
from aiormq import spec as aiormq_spec
from amqp import exceptions as amqp_exc
from pika import exceptions as pika_exc

from reference_broker.server import EmbeddedBroker

pytestmark = pytest.mark.timeout(30)

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


# -- connections ---------------------------------------------------------------------------------
@pytest.fixture
def pika_connect(broker: EmbeddedBroker) -> Iterator[Callable[[], pika.BlockingConnection]]:
    opened: list[pika.BlockingConnection] = []

    def connect() -> pika.BlockingConnection:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        if conn.is_open:
            with contextlib.suppress(pika_exc.AMQPError):
                conn.close()


@pytest.fixture
def amqp_connect(broker: EmbeddedBroker) -> Iterator[Callable[..., amqp.Connection]]:
    opened: list[amqp.Connection] = []

    def connect(capabilities: dict[str, bool] | None = None, **kwargs: Any) -> amqp.Connection:
        conn = amqp.Connection(host=f"{broker.host}:{broker.port}", userid="guest", password="guest",
                               **kwargs)
        if capabilities is not None:
            conn.negotiate_capabilities = {**amqp.Connection.negotiate_capabilities, **capabilities}
        conn.connect()
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        with contextlib.suppress(Exception):
            conn.close()


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


@pytest.fixture(params=list(CLIENTS))
def client(request: pytest.FixtureRequest, broker: EmbeddedBroker) -> Iterator[Any]:
    c = CLIENTS[request.param](broker)
    try:
        yield c
    finally:
        c.close()


NACK_CLIENTS = [name for name in CLIENTS if name != "py-amqp"]  # py-amqp has no basic_nack


def _fill(c: Any, queue: str, n: int) -> None:
    c.declare(queue)
    for i in range(n):
        c.publish(queue, f"m{i}".encode())


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


# ===============================================================================================
# Acknowledgements (ACK-01..07, RQ-01, RQ-03), the same scenarios through each client
# ===============================================================================================
def test_ack_tags_count_from_one_per_channel(client: Any, unique_name: Callable[..., str]) -> None:
    queue = unique_name()
    _fill(client, queue, 3)
    assert [client.get(queue).tag for _ in range(3)] == [1, 2, 3]  # ACK-01
    client.new_channel()  # the old channel stays open with its three deliveries
    client.publish(queue, b"again")
    assert client.get(queue).tag == 1  # channels never share the counter


def test_ack_single_settles_only_that_delivery(broker: EmbeddedBroker, client: Any,
                                               unique_name: Callable[..., str]) -> None:
    queue = unique_name()
    _fill(client, queue, 2)
    first, second = client.get(queue), client.get(queue)
    client.ack(first.tag)
    assert client.ready(queue) == 0  # the round trip orders the ack before the state read
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=1, consumers=0)
    client.close_channel()  # RQ-03: the unacked delivery goes back, the acked one does not
    client.new_channel()
    again = client.get(queue)
    assert (again.body, again.redelivered) == (second.body, True)
    assert client.get(queue) is None


def test_ack_multiple_settles_up_to_tag(broker: EmbeddedBroker, client: Any,
                                        unique_name: Callable[..., str]) -> None:
    queue = unique_name()
    _fill(client, queue, 5)
    got = [client.get(queue) for _ in range(5)]
    client.ack(got[2].tag, multiple=True)  # ACK-05: settles tags 1, 2, 3
    assert client.ready(queue) == 0
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=2, consumers=0)
    client.close_channel()
    client.new_channel()
    back = [client.get(queue) for _ in range(2)]
    assert [(g.body, g.redelivered) for g in back] == [(b"m3", True), (b"m4", True)]
    assert client.get(queue) is None


def test_ack_tag_zero_multiple_settles_everything(broker: EmbeddedBroker, client: Any,
                                                  unique_name: Callable[..., str]) -> None:
    queue = unique_name()
    _fill(client, queue, 3)
    for _ in range(3):
        client.get(queue)
    client.ack(0, multiple=True)  # ACK-06
    assert client.ready(queue) == 0
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=0, consumers=0)
    client.close_channel()
    client.new_channel()
    assert client.get(queue) is None


SETTLE_CASES = [(c, m) for c in CLIENTS for m in ("nack", "reject") if m == "reject" or c in NACK_CLIENTS]


@pytest.mark.parametrize(("client", "method"), SETTLE_CASES, indirect=["client"])
def test_settle_requeue_redelivers_with_redelivered_flag(client: Any, unique_name: Callable[..., str],
                                                         method: str) -> None:
    queue = unique_name()
    _fill(client, queue, 2)
    first = client.get(queue)
    assert (first.body, first.redelivered) == (b"m0", False)
    getattr(client, method)(first.tag, requeue=True)  # ACK-07, RQ-01: back at its position
    again = client.get(queue)
    assert (again.body, again.redelivered, again.tag) == (b"m0", True, 2)
    nxt = client.get(queue)
    assert (nxt.body, nxt.redelivered) == (b"m1", False)


@pytest.mark.parametrize(("client", "method"), SETTLE_CASES, indirect=["client"])
def test_settle_without_requeue_discards(broker: EmbeddedBroker, client: Any,
                                         unique_name: Callable[..., str], method: str) -> None:
    queue = unique_name()
    _fill(client, queue, 1)
    got = client.get(queue)
    getattr(client, method)(got.tag, requeue=False)  # ACK-07: discarded (no DLX)
    assert client.ready(queue) == 0
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=0, consumers=0)
    client.close_channel()  # nothing left to requeue
    client.new_channel()
    assert client.get(queue) is None


@pytest.mark.parametrize("client", NACK_CLIENTS, indirect=True)
def test_nack_multiple_requeues_all_up_to_tag(client: Any, unique_name: Callable[..., str]) -> None:
    queue = unique_name()
    _fill(client, queue, 3)
    got = [client.get(queue) for _ in range(3)]
    client.nack(got[1].tag, multiple=True, requeue=True)  # m0, m1 back; m2 stays unacked
    back = [client.get(queue) for _ in range(2)]
    assert [(g.body, g.redelivered) for g in back] == [(b"m0", True), (b"m1", True)]
    assert client.get(queue) is None


UNKNOWN_TAG_CASES = [(c, s) for c in CLIENTS for s in ("never-issued", "double-ack", "nack-unknown",
                                                       "reject-unknown")
                     if s != "nack-unknown" or c in NACK_CLIENTS]


@pytest.mark.parametrize(("client", "scenario"), UNKNOWN_TAG_CASES, indirect=["client"])
def test_ack_unknown_tag_closes_channel_406(broker: EmbeddedBroker, client: Any,
                                            unique_name: Callable[..., str], scenario: str) -> None:
    queue = unique_name()
    _fill(client, queue, 2)
    held = client.get(queue)  # tag 1, left unacked: requeued when the channel closes (RQ-03)
    tag = 99
    if scenario == "double-ack":  # ACK-04
        settled = client.get(queue)
        client.ack(settled.tag)
        tag = settled.tag
        client.ack(tag)
    elif scenario == "nack-unknown":
        client.nack(tag, requeue=True)
    elif scenario == "reject-unknown":
        client.reject(tag, requeue=True)
    else:
        client.ack(tag)
    with pytest.raises(Closed) as info:
        client.ready(queue)
    assert (info.value.scope, info.value.code) == ("channel", 406)  # ACK-03: a channel error
    assert info.value.text == f"PRECONDITION_FAILED - unknown delivery tag {tag}"
    assert client.connection_open()
    client.new_channel()  # the connection survives and works
    again = client.get(queue)
    assert (again.body, again.redelivered) == (held.body, True)
    rest = client.get(queue)
    if scenario == "double-ack":
        assert rest is None
    else:
        assert (rest.body, rest.redelivered) == (b"m1", False)


@pytest.mark.parametrize(("method", "method_id"), [("ack", 80), ("reject", 90)])
def test_amqp_unknown_tag_close_names_the_method(amqp_connect: Callable[..., amqp.Connection],
                                                 unique_name: Callable[..., str], method: str,
                                                 method_id: int) -> None:
    """ACK-03: class-id 60 and the method id of the settle method that failed."""
    conn = amqp_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue, auto_delete=False)
    if method == "ack":
        ch.basic_ack(7)
    else:
        ch.basic_reject(7, requeue=True)
    with pytest.raises(amqp_exc.PreconditionFailed) as info:
        ch.queue_declare(queue, passive=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - unknown delivery tag 7"
    assert info.value.method_sig == (60, method_id)
    assert conn.connected
    assert conn.channel().queue_declare(queue, passive=True).message_count == 0


def test_pika_recover_requeue_redelivers_unacked(pika_connect: Callable[[], pika.BlockingConnection],
                                                 unique_name: Callable[..., str]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue)
    ch.basic_publish("", queue, b"one")
    method, _props, _body = ch.basic_get(queue)
    assert method.redelivered is False
    ch.basic_recover(requeue=True)  # ACK-09
    method, _props, body = ch.basic_get(queue)
    assert (body, method.redelivered, method.delivery_tag) == (b"one", True, 2)


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


# ===============================================================================================
# Exchanges and routing
# ===============================================================================================
# case: exchange type, bindings (queue label, binding key, arguments), publishes (routing key,
# headers, the queue labels that must receive it)
ROUTING_CASES: dict[str, tuple[str, list[tuple[str, str, dict[str, Any] | None]],
                               list[tuple[str, dict[str, Any] | None, set[str]]]]] = {
    "direct": ("direct",
               [("a", "black", None), ("b", "green", None), ("c", "green", None)],
               [("black", None, {"a"}), ("green", None, {"b", "c"}), ("red", None, set())]),
    "fanout": ("fanout",
               [("a", "", None), ("b", "ignored", None)],
               [("anything", None, {"a", "b"}), ("", None, {"a", "b"})]),
    "topic": ("topic",
              [("a", "*.orange.*", None), ("b", "*.*.rabbit", None), ("b", "lazy.#", None),
               ("c", "#", None)],
              [("quick.orange.rabbit", None, {"a", "b", "c"}),
               ("lazy.orange.elephant", None, {"a", "b", "c"}),
               ("quick.orange.fox", None, {"a", "c"}),
               ("lazy.brown.fox", None, {"b", "c"}),
               ("lazy.pink.rabbit", None, {"b", "c"}),  # two bindings of b match: one copy
               ("lazy", None, {"b", "c"}),
               ("quick.brown.fox", None, {"c"}),
               ("quick.orange.male.rabbit", None, {"c"}),
               ("", None, {"c"})]),
    "headers": ("headers",
                [("all", "", {"x-match": "all", "format": "pdf", "type": "report"}),
                 ("any", "", {"x-match": "any", "format": "pdf", "type": "log"}),
                 ("none", "", {})],
                [("", {"format": "pdf", "type": "report"}, {"all", "any", "none"}),
                 ("", {"format": "zip", "type": "log"}, {"any", "none"}),
                 ("", {"format": "zip", "type": "report"}, {"none"}),
                 ("", {"format": "pdf"}, {"any", "none"}),
                 ("ignored", None, {"none"})]),
}


@pytest.mark.parametrize("case", list(ROUTING_CASES))
def test_pika_exchange_routing(pika_connect: Callable[[], pika.BlockingConnection],
                               unique_name: Callable[..., str], case: str) -> None:
    kind, bindings, publishes = ROUTING_CASES[case]
    conn = pika_connect()
    ch = conn.channel()
    exchange = unique_name(f"x-{kind}")
    ch.exchange_declare(exchange, kind, auto_delete=False)
    queues = {label: unique_name(f"q-{label}") for label, _key, _args in bindings}
    for name in queues.values():
        ch.queue_declare(name)
    for label, key, args in bindings:
        ch.queue_bind(queues[label], exchange, routing_key=key, arguments=args)
    expected: dict[str, list[bytes]] = {label: [] for label in queues}
    for i, (routing_key, headers, targets) in enumerate(publishes):
        body = f"{i}:{routing_key}".encode()
        ch.basic_publish(exchange, routing_key, body, pika.BasicProperties(headers=headers))
        for label in targets:
            expected[label].append(body)
    received: dict[str, list[bytes]] = {}
    for label, name in queues.items():
        received[label] = []
        while True:
            method, _props, body = ch.basic_get(name, auto_ack=True)
            if method is None:
                break
            received[label].append(body)
    assert received == expected


def test_pika_exchange_to_exchange_binding(pika_connect: Callable[[], pika.BlockingConnection],
                                           unique_name: Callable[..., str]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    source, middle = unique_name("x-src"), unique_name("x-mid")
    ch.exchange_declare(source, "topic")
    ch.exchange_declare(middle, "fanout")
    ch.exchange_bind(destination=middle, source=source, routing_key="orders.*")
    queue = unique_name()
    ch.queue_declare(queue)
    ch.queue_bind(queue, middle)
    ch.basic_publish(source, "orders.new", b"routed")
    ch.basic_publish(source, "invoices.new", b"not-routed")
    ch.basic_publish(middle, "whatever", b"direct-to-middle")
    bodies = []
    while (got := ch.basic_get(queue, auto_ack=True))[0] is not None:
        bodies.append(got[2])
    assert bodies == [b"routed", b"direct-to-middle"]
    ch.exchange_unbind(destination=middle, source=source, routing_key="orders.*")
    ch.basic_publish(source, "orders.new", b"after-unbind")
    assert ch.basic_get(queue, auto_ack=True) == (None, None, None)


def test_pika_exchange_redeclare_other_type_406(pika_connect: Callable[[], pika.BlockingConnection],
                                                unique_name: Callable[..., str]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    exchange = unique_name("x")
    ch.exchange_declare(exchange, "direct")
    ch.exchange_declare(exchange, "direct")  # equivalent: fine
    with pytest.raises(pika_exc.ChannelClosedByBroker) as info:
        ch.exchange_declare(exchange, "fanout")
    assert info.value.reply_code == 406
    assert info.value.reply_text == (f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange "
                                     f"'{exchange}' in vhost '/': received 'fanout' but current is 'direct'")
    assert conn.is_open
    conn.channel().exchange_declare(exchange, "direct", passive=True)  # unchanged and still there


# ===============================================================================================
# Exclusive queues
# ===============================================================================================
EXCLUSIVE_OPERATIONS: dict[str, Callable[[Any, str], Any]] = {
    "declare": lambda ch, q: ch.queue_declare(q),
    "declare-passive": lambda ch, q: ch.queue_declare(q, passive=True),
    "consume": lambda ch, q: ch.basic_consume(q, lambda *_a: None),
    "get": lambda ch, q: ch.basic_get(q),
    "purge": lambda ch, q: ch.queue_purge(q),
    "delete": lambda ch, q: ch.queue_delete(q),
    "bind": lambda ch, q: ch.queue_bind(q, "amq.direct", routing_key="k"),
}


@pytest.mark.parametrize("operation", list(EXCLUSIVE_OPERATIONS))
def test_pika_exclusive_queue_locked_for_other_connection(
        broker: EmbeddedBroker, pika_connect: Callable[[], pika.BlockingConnection],
        unique_name: Callable[..., str], operation: str) -> None:
    owner = pika_connect().channel()
    queue = unique_name()
    owner.queue_declare(queue, exclusive=True)
    owner.basic_publish("", queue, b"mine")
    other_conn = pika_connect()
    with pytest.raises(pika_exc.ChannelClosedByBroker) as info:
        EXCLUSIVE_OPERATIONS[operation](other_conn.channel(), queue)
    assert info.value.reply_code == 405
    assert info.value.reply_text.startswith(
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}' in vhost '/'")
    assert other_conn.is_open  # a channel error only
    assert queue_state(broker, queue) == QueueState(ready=1, unacked=0, consumers=0)
    _method, _props, body = owner.basic_get(queue, auto_ack=True)  # the owner is unaffected
    assert body == b"mine"


def test_amqp_exclusive_queue_locked_for_other_connection(
        amqp_connect: Callable[..., amqp.Connection], unique_name: Callable[..., str]) -> None:
    owner = amqp_connect().channel()
    queue = unique_name()
    owner.queue_declare(queue, exclusive=True)
    other = amqp_connect()
    with pytest.raises(amqp_exc.ResourceLocked) as info:
        other.channel().basic_consume(queue, callback=lambda _m: None)
    assert info.value.reply_code == 405
    assert info.value.method_sig == (60, 20)
    assert other.connected


def test_pika_exclusive_queue_deleted_with_owner(broker: EmbeddedBroker,
                                                 pika_connect: Callable[[], pika.BlockingConnection],
                                                 unique_name: Callable[..., str]) -> None:
    owner = pika_connect()
    queue = unique_name()
    owner.channel().queue_declare(queue, exclusive=True)
    assert queue_state(broker, queue) is not None
    owner.close()
    ch = pika_connect().channel()
    with pytest.raises(pika_exc.ChannelClosedByBroker) as info:
        ch.queue_declare(queue, passive=True)
    assert (info.value.reply_code, info.value.reply_text) == (
        404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")
