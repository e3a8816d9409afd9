"""Wire-level helpers shared by the confirms, cancel, errors and framing suites.

Responsibility: the small protocol moves those suites repeat — a synchronising round trip,
"nothing arrives" checks, bursts of publishes in one write, publisher-confirm bookkeeping,
raw handshakes for tune/start-ok tests (the raw driver always completes its own handshake),
reading how a socket ends (NET-01) and forcing a broker-side close through the admin adapter.

Rules:
- Every wait is bounded by a deadline the caller passes (already scaled with target.timeout).
- To show that something does NOT arrive: a synchronising round trip first, then a short poll.
- Frames seen by a raw handshake are added to the test's recorder, so they are evidence too.
- Replies are compared by code, class/method id and scope; texts only where a rule is about them.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from codec import (
    NEED_DATA,
    PROTOCOL_HEADER,
    BasicAck,
    BasicNack,
    BasicProperties,
    BasicPublish,
    Command,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    FrameReader,
    MethodFrame,
    encode_content,
    encode_frame,
    encode_header,
    encode_method,
)
from codec.frames import encode_method_payload
from conformance.catalogue.profiles import Profile
from conformance.drivers.raw import (
    BrokerAddress,
    ChannelClosed,
    Closed,
    DriverError,
    FrameRecord,
    RawClient,
    Recorder,
)
from conformance.run.admin import AdminAdapter, ConnectionInfo

_RAW_IDS = itertools.count(1_000_000)  # raw handshakes, apart from RawClient's connection ids
DEFAULT_MAX_MESSAGE_SIZE = 16 * 1024 * 1024  # PC-12, 4.0+


# -- profile facts read from the catalogue ---------------------------------------------------
def frame_min_size(profile: Profile) -> int:
    """FRM-02: 8192 where the rule is required (4.1+), else the variant's number (4096)."""
    expected = profile.expect("FRM-02")
    return 8192 if expected == "required" else int(expected.removeprefix("variant:").split()[0])


def default_max_message_size(profile: Profile) -> int | None:
    """PC-12: 16 MiB where required, 128 MiB in the 3.x variants, None when broker-specific."""
    expected = profile.expect("PC-12")
    if expected == "required":
        return DEFAULT_MAX_MESSAGE_SIZE
    return 134217728 if "134217728" in expected else None


def outcome(error: Closed) -> tuple[str, int, int, int]:
    """What a close is compared by: scope, code, class id, method id (never the text)."""
    return error.scope, error.code, error.class_id, error.method_id


# -- round trips and silence ------------------------------------------------------------------
PING = ExchangeDeclare(exchange="amq.direct", exchange_type="direct", passive=True)  # answered by exchange.declare-ok


def sync(client: RawClient, ch: int) -> None:
    """A harmless synchronising round trip on `ch` (PING: a passive declare of amq.direct, an
    exchange every RabbitMQ-compatible broker has)."""
    client.rpc(ch, PING, ExchangeDeclareOk)


def assert_quiet(client: RawClient, ch: int, duration: float, *types: type, rule: str = "") -> None:
    """After a round trip on `ch`, nothing (of `types`, or anything) is queued or arrives; a
    failure names `rule` when the caller knows which rule the extra frame breaks."""
    sync(client, ch)
    said = f"{rule}: " if rule else ""
    unexpected = [c for c in client.pending(ch) if not types or isinstance(c.method, types)]
    assert not unexpected, f"{said}unexpected on channel {ch}: {unexpected}"
    late = client.poll(ch, *types, duration=duration)
    assert late is None, f"{said}unexpected on channel {ch}: {late}"


class _Nothing:
    """A method type no broker sends: polling for it only reads and records."""

    NAME = "nothing"


def pump(client: RawClient, duration: float) -> None:
    """Read (and record) whatever arrives for `duration`, taking nothing from the inbox."""
    with contextlib.suppress(DriverError):  # a close surfaces on the caller's next expect
        client.poll(0, _Nothing, duration=duration)


def inbound(client: RawClient, ch: int) -> list[Any]:
    """Frames received on channel `ch` of this client, in order (from its recorder)."""
    return [r.frame for r in client.recorder.frames
            if r.connection == client.id and r.direction == "in" and r.channel == ch]


def methods_after(frames: Sequence[Any], first: type) -> list[Any]:
    """The methods among `frames` that follow the first method of type `first`."""
    methods = [f.method for f in frames if isinstance(f, MethodFrame)]
    index = next(i for i, m in enumerate(methods) if isinstance(m, first))
    return methods[index + 1:]


def wait_channel_closed(client: RawClient, ch: int, timeout: float) -> ChannelClosed:
    """Block until the broker closes `ch`; return the close (NoReply if it never does)."""
    try:
        client.expect(ch, _Nothing, timeout=timeout)
    except ChannelClosed as closed:
        return closed
    raise AssertionError("unreachable: expect() for _Nothing only ends by raising")


def reopen_channel(client: RawClient, ch: int) -> int:
    """Open channel number `ch` again after the broker closed it (clears the driver's record)."""
    client.closed_channels.pop(ch, None)
    client.inbox.pop(ch, None)
    return client.channel(ch)


# -- publishing -------------------------------------------------------------------------------
def publish_burst(client: RawClient, ch: int, routing_keys: Iterable[str], *, exchange: str = "",
                  properties: BasicProperties | None = None, body: bytes = b"m",
                  mandatory: bool = False, tail: bytes = b"") -> int:
    """One publish per routing key, back to back in ONE socket write (plus `tail` bytes)."""
    props = properties or BasicProperties()
    parts = [encode_content(ch, BasicPublish(exchange=exchange, routing_key=rk, mandatory=mandatory),
                            props, body, client.frame_max) for rk in routing_keys]
    client.send_raw(b"".join(parts) + tail, channel=ch)
    return len(parts)


def publish_large(client: RawClient, ch: int, routing_key: str, size: int) -> None:
    """A publish of `size` zero octets, written frame by frame (no size-long buffer)."""
    client.send_raw(encode_method(ch, BasicPublish(routing_key=routing_key)) + encode_header(ch, size),
                    channel=ch)
    chunk = max(client.frame_max - 8, 4096) if client.frame_max else 131064
    frame = encode_frame(3, ch, bytes(chunk))
    full, rest = divmod(size, chunk)
    for _ in range(full):
        client.send_raw(frame, channel=ch)
    if rest:
        client.send_raw(encode_frame(3, ch, bytes(rest)), channel=ch)


@dataclass
class Confirms:
    """Publisher-confirm bookkeeping: every seqno must be settled exactly once (PC-05)."""

    outstanding: set[int]
    acked: set[int] = field(default_factory=set)
    nacked: set[int] = field(default_factory=set)
    seen: list[BasicAck | BasicNack] = field(default_factory=list)
    by_multiple: set[int] = field(default_factory=set)  # seqnos settled by a multiple=true confirm of a later tag

    @classmethod
    def expecting(cls, first: int, count: int) -> Confirms:
        return cls(set(range(first, first + count)))

    def feed(self, method: BasicAck | BasicNack) -> None:
        """Settle what `method` covers: multiple=true covers every outstanding seqno ≤ tag."""
        self.seen.append(method)
        tag = method.delivery_tag
        assert tag in self.outstanding, (
            f"PC-05: {method} settles seqno {tag}, which is not outstanding: settled twice or never "
            f"published (outstanding {sorted(self.outstanding)}, seen {self.seen})")
        covered = {s for s in self.outstanding if s <= tag} if method.multiple else {tag}
        self.outstanding -= covered
        self.by_multiple |= covered - {tag}
        (self.acked if isinstance(method, BasicAck) else self.nacked).update(covered)

    def collect(self, client: RawClient, ch: int, timeout: float) -> Confirms:
        """Read acks/nacks on `ch` until nothing is outstanding (NoReply past the deadline)."""
        deadline = time.monotonic() + timeout
        while self.outstanding:
            command = client.expect(ch, BasicAck, BasicNack, timeout=max(deadline - time.monotonic(), 0))
            assert isinstance(command.method, BasicAck | BasicNack)
            self.feed(command.method)
        return self


# -- NET-01 -----------------------------------------------------------------------------------
def socket_end(client: RawClient, timeout: float) -> str:
    """How the socket ends after the broker's close: "eof", "reset", "open" or "data:<hex>"."""
    if client.sock is None or client.lost:
        return "eof"  # the driver already read the end (it maps a reset to EOF, NET-01)
    client.sock.settimeout(timeout)
    try:
        data = client.sock.recv(4096)
    except ConnectionResetError:
        return "reset"
    except TimeoutError:
        return "open"
    return "eof" if not data else f"data:{data[:32].hex()}"


# -- raw handshakes (FRM-01, FRM-02, 502) -------------------------------------------------------
@dataclass
class Handshake:
    """What a hand-driven handshake saw after connection.start."""

    tune: ConnectionTune | None = None
    close: ConnectionClose | None = None
    open_ok: bool = False
    ended: str | None = None  # "eof" | "reset" once the socket ended
    elapsed: float = 0.0


def start_ok_for(address: BrokerAddress, *, payload_size: int | None = None) -> ConnectionStartOk:
    """PLAIN start-ok; with `payload_size`, padded so its method payload has exactly that size."""
    response = f"\x00{address.user}\x00{address.password}".encode()
    caps = {"authentication_failure_close": True, "consumer_cancel_notify": True}
    props: dict[str, Any] = {"product": "amqp-conformance", "capabilities": caps, "pad": ""}
    method = ConnectionStartOk(props, "PLAIN", response, "en_US")
    if payload_size is not None:
        pad = payload_size - len(encode_method_payload(method))
        assert pad >= 0, f"a start-ok payload of {payload_size} octets is too small to build"
        method = ConnectionStartOk({**props, "pad": "x" * pad}, "PLAIN", response, "en_US")
        assert len(encode_method_payload(method)) == payload_size
    return method


class _RawConnection:
    """A socket, a FrameReader and the recorder: just enough to drive a handshake by hand."""

    def __init__(self, address: BrokerAddress, recorder: Recorder, timeout: float) -> None:
        self.id = next(_RAW_IDS)
        self.recorder = recorder
        self.reader = FrameReader(frame_max=0)
        self.sock = socket.create_connection((address.host, address.port), timeout=timeout)
        self.result = Handshake()
        self.started = time.monotonic()

    def send(self, method: Any) -> None:
        self.recorder.add(FrameRecord(time.monotonic(), self.id, "out", 0, Command(0, method, None, b"")))
        self.sock.sendall(encode_method(0, method))

    def next_method(self, deadline: float) -> Any | None:
        """The next channel-0 method, or None when the socket ended or the deadline passed."""
        while self.result.ended is None:
            frame = self.reader.next_frame()
            if frame is not NEED_DATA:
                self.recorder.add(FrameRecord(time.monotonic(), self.id, "in", 0, frame))
                if isinstance(frame, MethodFrame):
                    return frame.method
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return None
            except ConnectionResetError:
                data, self.result.ended = b"", "reset"
            if not data:
                self.result.ended = self.result.ended or "eof"
                self.result.elapsed = time.monotonic() - self.started
                return None
            self.reader.receive_data(data)
        return None


def handshake(url: str, recorder: Recorder, timeout: float, *, start_ok: ConnectionStartOk | None = None,
              tune_ok: dict[str, int] | None = None) -> Handshake:
    """Drive start-ok (given or PLAIN) and, when a tune arrives, tune-ok (server values
    overridden by `tune_ok`) plus connection.open; stop at open-ok, a close, or the socket's end.
    A broker connection.close is answered with close-ok."""
    address = BrokerAddress.parse(url)
    conn = _RawConnection(address, recorder, timeout)
    deadline = conn.started + timeout
    try:
        conn.sock.sendall(PROTOCOL_HEADER)
        if not isinstance(conn.next_method(deadline), ConnectionStart):
            raise AssertionError("no connection.start from the broker")
        conn.send(start_ok or start_ok_for(address))
        return _after_start_ok(conn, address, deadline, tune_ok)
    finally:
        conn.sock.close()


def _after_start_ok(conn: _RawConnection, address: BrokerAddress, deadline: float,
                    tune_ok: dict[str, int] | None) -> Handshake:
    result = conn.result
    while (method := conn.next_method(deadline)) is not None:
        if isinstance(method, ConnectionTune):
            result.tune = method
            values = {"channel_max": method.channel_max, "frame_max": method.frame_max, "heartbeat": 0}
            conn.send(ConnectionTuneOk(**{**values, **(tune_ok or {})}))
            conn.send(ConnectionOpen(virtual_host=address.vhost))
        elif isinstance(method, ConnectionOpenOk):
            result.open_ok = True
            with contextlib.suppress(OSError):
                conn.send(ConnectionClose(200, "bye", 0, 0))
            return result
        elif isinstance(method, ConnectionClose):
            result.close = method
            with contextlib.suppress(OSError):
                conn.send(ConnectionCloseOk())
            return result
    return result


def handshakes(url: str, recorder: Recorder, timeout: float, cases: Sequence[dict[str, Any]]) -> list[Handshake]:
    """Several `handshake(**case)` at once, so brokers that close refused handshakes only after
    a silent delay (RabbitMQ 3.10.8 waits ~3 s) cost that delay once."""
    with ThreadPoolExecutor(max_workers=max(len(cases), 1)) as pool:
        futures = [pool.submit(handshake, url, recorder, timeout, **case) for case in cases]
        return [f.result() for f in futures]


# -- 320 CONNECTION_FORCED through the admin adapter (docs/design.md decision 6) --------------------
def force_close(admin: AdminAdapter, client: RawClient, reason: str, timeout: float) -> None:
    """Have the broker close `client`'s connection through `--broker-admin` (found by
    `connection_info`). NoAdmin raises `Unavailable` (verdict needs-admin)."""
    admin.close_connection(connection_info(admin, client, timeout).name, reason)


def connection_info(admin: AdminAdapter, client: RawClient, timeout: float) -> ConnectionInfo:
    """What `--broker-admin` lists of `client`'s connection, found by its peer port; the management
    API lists it only after its first stats emission, so the lookup retries until `timeout`."""
    assert client.sock is not None
    port = client.sock.getsockname()[1]
    deadline = time.monotonic() + timeout
    while True:
        found = [c for c in admin.list_connections() if c.peer_port == port]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"the admin adapter lists no connection from port {port}"
        time.sleep(0.25)
