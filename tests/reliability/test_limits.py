"""Limits and abuse over real loopback sockets: configured limits are enforced and
hold under hostile input, memory stays bounded while a consumer stalls, a dead peer's work
goes back to its queue, and the broker carries a thousand connections at once.

The default limits themselves have wire tests in the conformance suite, which runs against
this broker too: FRM-01/FRM-02 `test_framing.py::test_frame_min_size_is_the_lowest_frame_max`
and `::test_frames_before_tune_ok_are_limited_to_frame_min_size`, FRM-03
`::test_a_payload_over_frame_max_is_a_fatal_501`, ERR-04 `test_error_texts.py::
test_channel_max_exceeded_is_530`, PC-12 `test_confirms_refusals.py::
test_body_over_the_default_max_message_size_is_406`, HB-01 `test_framing.py::
test_a_silent_client_is_dropped_after_two_to_three_intervals`. The tests here configure the
broker's own limits and attack them: headers announcing huge frames, idle sockets, floods.
"""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import time

import pytest

from codec import (
    NEED_DATA,
    PROTOCOL_HEADER,
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    ChannelOpen,
    ChannelOpenOk,
    Command,
    ConnectionBlocked,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    ConnectionUnblocked,
    ContentAssembler,
    FrameReader,
    MethodFrame,
    QueueDeclare,
    QueueDeclareOk,
    encode_content,
    encode_method,
)
from conformance.drivers.raw import ChannelClosed, ConnectionClosed, ConnectionLost, RawClient
from reference_broker.server import EmbeddedBroker
from tests.reliability.conftest import Connect, StartBroker

WAIT = 10.0  # seconds: the deadline of every wait below


def frame_header(kind: int, channel: int, size: int) -> bytes:
    """Only the 7-octet header of a frame: the payload it announces never follows."""
    return struct.pack(">BHI", kind, channel, size)


def socket_end(sock: socket.socket, timeout: float = WAIT) -> bytes:
    """Everything the broker still sends until it ends the connection (asserts it ends)."""
    sock.settimeout(timeout)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got


# -- frame sizes --------------------------------------------------------------------------------
def test_limits_a_huge_frame_header_before_tune_ends_the_connection(start_broker: StartBroker) -> None:
    """FRM-02 abuse: a header announcing 2 GiB before tune-ok is refused from the header alone;
    the broker neither waits for nor buffers the payload, and sends no connection.tune."""
    broker = start_broker()
    with socket.create_connection((broker.host, broker.port), timeout=WAIT) as sock:
        sock.sendall(PROTOCOL_HEADER)
        reader = FrameReader(frame_max=0)
        while (start := reader.next_frame()) is NEED_DATA:
            reader.receive_data(sock.recv(65536))
        assert isinstance(start, MethodFrame) and isinstance(start.method, ConnectionStart)
        sock.sendall(frame_header(1, 0, 0x7FFFFFFF))
        assert socket_end(sock) == b""


def test_limits_a_frame_over_the_negotiated_frame_max_is_501_from_its_header(
        start_broker: StartBroker, connect: Connect) -> None:
    """FRM-03 with a configured frame_max: the client tunes 8192 below the broker's 16384; a
    header announcing 1 GiB gets 501 with RabbitMQ's text at once (payload never sent)."""
    broker = start_broker(frame_max=16384)
    client = connect(broker, frame_max=8192)
    assert client.tune is not None and client.tune.frame_max == 16384
    ch = client.channel()
    client.send_raw(encode_method(ch, BasicPublish(routing_key="nowhere")) + frame_header(3, ch, 1 << 30))
    with pytest.raises(ConnectionClosed) as closed:
        client.expect(ch, timeout=WAIT)
    assert (closed.value.code, closed.value.class_id, closed.value.method_id) == (501, 0, 0)
    assert closed.value.text == "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,1073741824,8184}"


# -- channel_max ----------------------------------------------------------------------------------
def test_limits_configured_channel_max_caps_every_client(start_broker: StartBroker, connect: Connect) -> None:
    """ERR-04/FRM-01 with channel_max = 4 configured: tune offers 4, a tune-ok asking for more
    (0 = no limit) is 530, and a client that opens a fifth channel gets 530 with RabbitMQ's
    text; the broker then serves a new connection with all four channels again."""
    broker = start_broker(channel_max=4)
    greedy = RawClient(broker.url, channel_max=0, timeout=WAIT)
    with pytest.raises(ConnectionClosed) as refused:
        greedy.connect()
    greedy.close()
    assert (refused.value.code, refused.value.class_id, refused.value.method_id) == (530, 10, 31)
    assert refused.value.text == ("NOT_ALLOWED - negotiated channel_max = 0 (no limit) is higher than the "
                                  "maximum allowed value (4)")
    client = connect(broker, timeout=WAIT)
    assert client.tune is not None and client.tune.channel_max == 4
    for _ in range(4):
        client.channel()
    with pytest.raises(ConnectionClosed) as closed:
        client.channel()
    assert (closed.value.code, closed.value.text) == (
        530, "NOT_ALLOWED - number of channels opened (4) has reached the negotiated channel_max (4)")
    again = connect(broker, timeout=WAIT)
    assert [again.channel() for _ in range(4)] == [1, 2, 3, 4]


# -- max_message_size -------------------------------------------------------------------------------
def test_limits_configured_max_message_size_is_406_and_only_closes_the_channel(
        start_broker: StartBroker, connect: Connect) -> None:
    """PC-12 with max_message_size = 64 KiB: exactly the limit is accepted, one octet more is
    channel.close 406 with RabbitMQ's text; the connection and its other channels go on."""
    limit = 64 * 1024
    broker = start_broker(max_message_size=limit)
    client = connect(broker, timeout=WAIT)
    ch, other = client.channel(), client.channel()
    client.rpc(ch, QueueDeclare(queue="limits.size"), QueueDeclareOk)
    client.send(ch, BasicPublish(routing_key="limits.size"), BasicProperties(), bytes(limit))
    got = client.rpc(ch, BasicGet(queue="limits.size", no_ack=True), BasicGetOk, BasicGetEmpty)
    assert isinstance(got.method, BasicGetOk) and len(got.body) == limit
    client.send(ch, BasicPublish(routing_key="limits.size"), BasicProperties(), bytes(limit + 1))
    with pytest.raises(ChannelClosed) as closed:
        client.rpc(ch, BasicGet(queue="limits.size"), BasicGetOk, BasicGetEmpty)
    assert (closed.value.code, closed.value.class_id, closed.value.method_id) == (406, 60, 40)
    assert closed.value.text == f"PRECONDITION_FAILED - message size {limit + 1} is larger than configured " \
                                f"max size {limit}"
    assert isinstance(client.rpc(other, BasicGet(queue="limits.size"), BasicGetOk, BasicGetEmpty).method,
                      BasicGetEmpty)  # nothing oversized was enqueued; the connection is fine


# -- connections ------------------------------------------------------------------------------------
def registered(broker: EmbeddedBroker, settled_within: float = WAIT) -> int:
    """Sockets the broker holds, read on its loop, once they stop going away (bounded wait):
    after close-ok the client ends its socket (NET-02) and the broker drops it on the EOF."""
    deadline = time.monotonic() + settled_within
    while (held := int(broker.call(lambda: len(broker.server.clients)))) and time.monotonic() < deadline:
        time.sleep(0.05)
    return held


def test_limits_max_connections_refuses_beyond_the_limit_and_frees_slots(
        start_broker: StartBroker, connect: Connect) -> None:
    """max_connections = 3: a fourth connection is refused at connection.open with 530 and
    RabbitMQ 4.x's text (rabbit_reader), the three keep working, and a closed one frees its slot."""
    broker = start_broker(max_connections=3)
    clients = [connect(broker, timeout=WAIT) for _ in range(3)]
    with pytest.raises(ConnectionClosed) as refused:
        connect(broker, timeout=WAIT)
    assert (refused.value.code, refused.value.text) == (
        530, "NOT_ALLOWED - connection refused: node connection limit (3) is reached")
    for client in clients:
        client.rpc(client.channel(), QueueDeclare(queue="", exclusive=True), QueueDeclareOk)
    clients[0].close()
    connect(broker, timeout=WAIT).channel()


def test_limits_an_idle_socket_is_closed_after_the_handshake_timeout(start_broker: StartBroker,
                                                                     connect: Connect) -> None:
    """handshake_timeout (RabbitMQ's, 10 s by default; 200 ms here): sockets that never finish
    the handshake cannot hold connection slots. With max_connections = 1, a silent socket and
    one that stops after start-ok both end, then a real client gets the slot."""
    broker = start_broker(max_connections=1, handshake_timeout=200)
    with socket.create_connection((broker.host, broker.port), timeout=WAIT) as silent:
        assert socket_end(silent) == b""
    with socket.create_connection((broker.host, broker.port), timeout=WAIT) as stalled:
        stalled.sendall(PROTOCOL_HEADER)
        stalled.sendall(encode_method(0, ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest", "en_US")))
        assert socket_end(stalled)  # connection.start and connection.tune, then the end
    assert registered(broker) == 0
    connect(broker, timeout=WAIT).channel()


# -- memory: a stalled consumer -----------------------------------------------------------------------
def ready_octets(broker: EmbeddedBroker) -> int:
    core = broker.server.core
    return int(broker.call(lambda: sum(q.ready_bytes for v in core.vhosts.values() for q in v.queues.values())))


def flood(publisher: RawClient, data: bytes, until: type) -> int:
    """Write `data` while reading, until a command of type `until` arrives on channel 0 (then
    return the octets written) or the socket stays unwritable for a second."""
    assert publisher.sock is not None
    sent, deadline = 0, time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if publisher.poll(0, until, duration=0.001) is not None:
            return sent
        _, writable, _ = select.select([], [publisher.sock], [], 1.0)
        if not writable or sent == len(data):
            break
        sent += publisher.sock.send(data[sent:sent + 65536])
    found = publisher.poll(0, until, duration=WAIT)
    assert found is not None, f"no {until.__name__} after {sent} octets"
    return sent


def test_limits_a_stalled_consumer_blocks_publishers_and_memory_stays_bounded(
        start_broker: StartBroker, connect: Connect) -> None:
    """memory_high_watermark = 256 KiB of ready messages: a consumer takes 10 deliveries and
    stalls; the publisher floods 4 MiB; it gets connection.blocked, the broker stops reading it,
    and what it holds stays under watermark + one socket read (asyncio reads 256 KiB). When
    the consumer drains, connection.unblocked comes and every message arrives, once."""
    watermark, body, count = 256 * 1024, bytes(1024), 4096
    broker = start_broker(memory_high_watermark=watermark)
    consumer, publisher = connect(broker, timeout=WAIT), connect(broker, timeout=WAIT)
    cch, pch = consumer.channel(), publisher.channel()
    consumer.rpc(cch, QueueDeclare(queue="limits.stalled"), QueueDeclareOk)
    consumer.rpc(cch, BasicQos(prefetch_count=10), BasicQosOk)
    consumer.rpc(cch, BasicConsume(queue="limits.stalled", consumer_tag="stalled"), BasicConsumeOk)
    one = encode_content(pch, BasicPublish(routing_key="limits.stalled"), BasicProperties(), body,
                         publisher.frame_max)
    data = one * count
    sent = flood(publisher, data, ConnectionBlocked)
    held = ready_octets(broker)
    assert held <= watermark + 256 * 1024 + len(body), f"{held} ready octets held with the alarm on"
    assert sent > held + 10 * len(one)  # the rest waits in socket buffers, not in the broker
    stalled = [consumer.expect(cch, BasicDeliver) for _ in range(10)]
    assert consumer.poll(cch, BasicDeliver, duration=0.2) is None  # prefetch 10: it stalls there
    consumer.send(cch, BasicAck(delivery_tag=10, multiple=True))
    want = count - len(stalled)
    assert drain(consumer, cch, publisher, data, sent, want) == want


def drain(consumer: RawClient, ch: int, publisher: RawClient, data: bytes, sent: int, want: int) -> int:
    """The consumer acks as deliveries arrive and the publisher, once unblocked, sends the rest;
    returns the deliveries (at most `want`, then a short look for any extra)."""
    assert publisher.sock is not None
    delivered, unblocked = 0, False
    deadline = time.monotonic() + 6 * WAIT
    while delivered < want and time.monotonic() < deadline:
        got = consumer.poll(ch, BasicDeliver, duration=0.05)
        if got is not None:
            delivered += 1
            consumer.send(ch, BasicAck(delivery_tag=got.method.delivery_tag))  # type: ignore[attr-defined]
        unblocked = unblocked or publisher.poll(0, ConnectionUnblocked, duration=0.001) is not None
        if sent < len(data) and select.select([], [publisher.sock], [], 0)[1]:
            sent += publisher.sock.send(data[sent:sent + 65536])
    assert unblocked, "no connection.unblocked after the consumer drained the queue"
    return delivered + (consumer.poll(ch, BasicDeliver, duration=0.2) is not None)


# -- heartbeats ------------------------------------------------------------------------------------------
def test_limits_heartbeat_loss_closes_the_connection_and_requeues_its_unacked(
        start_broker: StartBroker, connect: Connect) -> None:
    """HB-01 with heartbeat = 1 s: a consumer holding an unacked delivery goes silent; the
    broker drops it after two intervals without connection.close (RabbitMQ, live) and the
    delivery goes to the other consumer, redelivered."""
    broker = start_broker()
    silent = connect(broker, heartbeat=1, timeout=WAIT)
    ch = silent.channel()
    silent.rpc(ch, QueueDeclare(queue="limits.hb"), QueueDeclareOk)
    silent.send(ch, BasicPublish(routing_key="limits.hb"), BasicProperties(), b"held")
    silent.rpc(ch, BasicConsume(queue="limits.hb", consumer_tag="silent"), BasicConsumeOk)
    first = silent.expect(ch, BasicDeliver)
    assert first.body == b"held" and not first.method.redelivered  # type: ignore[attr-defined]
    other = connect(broker, timeout=WAIT)
    och = other.channel()
    other.rpc(och, BasicConsume(queue="limits.hb", consumer_tag="other"), BasicConsumeOk)
    again = other.expect(och, BasicDeliver, timeout=WAIT)  # the silent one is gone by then
    assert again.body == b"held" and again.method.redelivered  # type: ignore[attr-defined]
    with pytest.raises(ConnectionLost):
        silent.expect(0, ConnectionCloseOk, timeout=WAIT)
    assert silent.connection_closed is None  # no connection.close before the socket went


# -- many connections at once ----------------------------------------------------------------------------
class AsyncAmqp:
    """Just enough AMQP over asyncio streams for many concurrent connections."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.frames, self.assembler = FrameReader(frame_max=0), ContentAssembler()

    async def next_command(self) -> Command:
        while True:
            frame = self.frames.next_frame()
            if frame is NEED_DATA:
                chunk = await asyncio.wait_for(self.reader.read(65536), WAIT)
                assert chunk, "the broker ended the connection"
                self.frames.receive_data(chunk)
            elif isinstance(command := self.assembler.feed(frame), Command):  # type: ignore[arg-type]
                return command

    async def call(self, data: bytes, want: type) -> Command:
        self.writer.write(data)
        command = await self.next_command()
        assert isinstance(command.method, want), command.method
        return command

    async def open(self) -> None:
        await self.call(PROTOCOL_HEADER, ConnectionStart)
        start_ok = ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest", "en_US")
        tune = (await self.call(encode_method(0, start_ok), ConnectionTune)).method
        assert isinstance(tune, ConnectionTune)
        self.writer.write(encode_method(0, ConnectionTuneOk(tune.channel_max, tune.frame_max, 0)))
        await self.call(encode_method(0, ConnectionOpen(virtual_host="/")), ConnectionOpenOk)
        await self.call(encode_method(1, ChannelOpen()), ChannelOpenOk)

    async def publish_and_get(self, queue: str, body: bytes) -> bytes:
        self.writer.write(encode_content(1, BasicPublish(routing_key=queue), BasicProperties(), body, 131072))
        return (await self.call(encode_method(1, BasicGet(queue=queue, no_ack=True)), BasicGetOk)).body

    async def close(self) -> None:
        await self.call(encode_method(0, ConnectionClose(200, "bye", 0, 0)), ConnectionCloseOk)
        self.writer.close()


async def hold_connections(broker: EmbeddedBroker, n: int) -> tuple[int, list[bytes]]:
    """Open n connections (100 connects in flight at most, the listen backlog), then with all
    of them open: one publish and one get each. Returns (connections held, bodies got)."""
    gate = asyncio.Semaphore(100)

    async def one() -> AsyncAmqp:
        async with gate:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(broker.host, broker.port), WAIT)
            client = AsyncAmqp(reader, writer)
            await client.open()
            return client

    clients = await asyncio.gather(*(one() for _ in range(n)))
    held = int(broker.call(lambda: len(broker.server.core.connections)))
    await clients[0].call(encode_method(1, QueueDeclare(queue="limits.many")), QueueDeclareOk)
    bodies = await asyncio.gather(*(c.publish_and_get("limits.many", b"%d" % i) for i, c in enumerate(clients)))
    await asyncio.gather(*(c.close() for c in clients))
    return held, bodies


def test_limits_a_thousand_concurrent_connections_with_traffic(start_broker: StartBroker) -> None:
    """1000 connections open at once on loopback (about 3 s here), each publishing and getting
    one message while all are held: every get returns a message (its own publish came first)
    and every body comes back exactly once."""
    broker, n = start_broker(), 1000
    held, bodies = asyncio.run(hold_connections(broker, n))
    assert held == n
    assert sorted(bodies) == sorted(b"%d" % i for i in range(n))
    assert registered(broker) == 0
