"""RawClient: the harness's primary driver, our codec over a blocking TCP socket.

Rules (docs/design.md decision 5):
- It can send anything: typed methods, content, or raw bytes (malformed frames included).
- Every frame in and out is recorded with a monotonic timestamp and its connection id. Bytes
  written by `send_raw` are recorded as the frames they decode to (several frames written in
  one go are several records); only what does not decode (a malformed frame, a fragment)
  stays raw bytes.
- Every wait has a deadline (`timeout * timeout_scale`); a broker that does not answer
  raises `NoReply("no reply within N s")`, never blocks forever.
- Broker-initiated channel.close / connection.close are answered (close-ok) and surface as
  `ChannelClosed` / `ConnectionClosed` outcomes carrying code, class/method id and text. A second
  channel.close of a channel the broker closed and the driver answered is recorded and otherwise
  ignored, until the number's next channel.open-ok (the broker writes such a close before that
  reply): a second close-ok would reach a channel the broker has ended (RabbitMQ answers it with
  a 504 connection.close); the RabbitMQ Java client drops a frame for a closed channel the same
  way. RabbitMQ 4.3 sends such a second close when two consumers of one channel time out
  (docs/findings-rabbitmq-4.3.6.md).
- A reply the client never asked for (a method that is only ever a response, e.g.
  exchange.declare-ok, with no request on that channel it answers) surfaces as
  `UnexpectedMethod` from the next wait on that channel, instead of a timeout. Requests sent
  with nowait still count as asked; after `send_raw` of a request or of bytes that do not
  decode, on a channel (or on -1, unknown), replies there are not judged (not tracked).
- Every outcome names what the wait was for; a timeout also says how many octets of an
  incomplete frame were received. Writes are bounded by the timeout too.
- Client capabilities (e.g. consumer_cancel_notify) and the SASL mechanism and response are
  chosen per connection (default: PLAIN with the URL's user and password).
- NET-01: a reset after the broker's connection.close is the normal end of the connection.
- The driver's own probes (when one may go out on a channel, and the wait for its reply) are
  `raw_probing.Probing`'s, a base class of RawClient.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import time
from collections import deque
from typing import Any

from codec import (
    METHOD_CLASSES,
    NEED_DATA,
    PROTOCOL_HEADER,
    BasicProperties,
    ChannelClose,
    ChannelCloseOk,
    ChannelOpen,
    ChannelOpenOk,
    CodecError,
    Command,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    ContentAssembler,
    FrameReader,
    HeartbeatFrame,
    Method,
    encode_content,
    encode_method,
)
from codec.frames import Frame, ProtocolHeader
from conformance.drivers import probes
from conformance.drivers.address import BrokerAddress
from conformance.drivers.hidden_close import EARLY_SHARE, HiddenClose, proves_hidden_close
from conformance.drivers.interface import (  # the outcomes every driver raises (re-exported)
    ChannelClosed,
    Closed,
    ConnectionClosed,
    ConnectionLost,
    DriverError,
    FrameRecord,
    NoReply,
    Recorder,
)
from conformance.drivers.raw_probing import Probing
from conformance.drivers.silence import SILENCES

__all__ = ["DEFAULT_CAPABILITIES", "BrokerAddress", "ChannelClosed", "Closed", "ConnectionClosed", "ConnectionLost",
           "DriverError", "FrameRecord", "NoReply", "RawClient", "Recorder", "UnexpectedMethod"]
_CONNECTION_IDS = itertools.count(1)


def next_connection_id() -> int:
    """A connection id no other recorded connection of this process has (raw or relayed)."""
    return next(_CONNECTION_IDS)
# Methods that only ever answer a request (queue.declare-ok, basic.get-empty, ...).
_RESPONSES = frozenset(name for cls in METHOD_CLASSES.values() for name in cls.RESPONSES)
DEFAULT_CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}


class UnexpectedMethod(DriverError):
    """The broker sent a reply to a request the client never made on that channel."""

    def __init__(self, method: str, channel: int, waiting_for: str) -> None:
        super().__init__(f"unexpected {method} on channel {channel} (waiting for {waiting_for}): "
                         "a reply to no request the client made")
        self.method, self.channel = method, channel


class RawClient(Probing):
    """One AMQP connection driven frame by frame."""

    def __init__(self, url: str, *, capabilities: dict[str, Any] | None = None, timeout: float = 5.0,
                 recorder: Recorder | None = None, heartbeat: int = 0, frame_max: int | None = None,
                 channel_max: int | None = None, silences: bool = True, mechanism: str = "PLAIN",
                 response: bytes | None = None) -> None:
        self.address = BrokerAddress.parse(url)
        self.mechanism, self.response = mechanism, response  # SASL; None: PLAIN's from the URL
        self.silences = silences  # False: every wait is made and nothing is learned (the health probe)
        self.capabilities = {**DEFAULT_CAPABILITIES, **(capabilities or {})}
        self.timeout = timeout
        self.recorder = recorder or Recorder()
        self.id = next(_CONNECTION_IDS)
        self.heartbeat = heartbeat
        self.want_frame_max, self.want_channel_max = frame_max, channel_max
        self.sock: socket.socket | None = None
        self.reader = FrameReader(frame_max=0)
        self.assembler = ContentAssembler()
        self.inbox: dict[int, deque[Command]] = {}
        self.closed_channels: dict[int, ChannelClosed] = {}
        self._answered: set[int] = set()  # channels whose broker close got our close-ok, until opened again
        self.connection_closed: ConnectionClosed | None = None
        self.lost = False
        self.server_properties: dict[str, Any] = {}
        self.mechanisms: list[str] = []  # the SASL mechanisms connection.start offered
        self.tune: ConnectionTune | None = None
        self.frame_max = 4096
        self._next_channel = 1
        self._asked: dict[int, list[probes.Request]] = {}  # per channel: the open requests and the replies each allows
        self._unasked: dict[int, list[Command]] = {}  # replies to no request (UnexpectedMethod)
        self._untracked: set[int] = set()  # channels (-1: any) with raw sends: replies not judged
        self._probed: tuple[int, str] | None = None  # hidden_close: the channel probed, what the wait was for
        self._states = probes.ChannelStates()  # opened, in a transaction, closing (probes.refusal)
        self._probing = True  # False once a probe went unanswered (_settle_probe)

    # -- connection ------------------------------------------------------------------------
    def connect(self) -> RawClient:
        self.sock = socket.create_connection((self.address.host, self.address.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._record("out", -1, ProtocolHeader(PROTOCOL_HEADER))
        self._write(PROTOCOL_HEADER)
        start = self.expect(0, ConnectionStart).method
        assert isinstance(start, ConnectionStart)
        self.server_properties = dict(start.server_properties)
        self.mechanisms = start.mechanisms.decode(errors="replace").split()
        response = self.response
        if response is None:
            response = f"\x00{self.address.user}\x00{self.address.password}".encode()
        props = {"product": "amqp-conformance", "capabilities": self.capabilities}
        self.send(0, ConnectionStartOk(props, self.mechanism, response, "en_US"))
        tune = self.expect(0, ConnectionTune).method
        assert isinstance(tune, ConnectionTune)
        self.tune = tune
        frame_max = tune.frame_max if self.want_frame_max is None else self.want_frame_max
        channel_max = tune.channel_max if self.want_channel_max is None else self.want_channel_max
        self.send(0, ConnectionTuneOk(channel_max, frame_max, self.heartbeat))
        self.frame_max = frame_max
        self.send(0, ConnectionOpen(virtual_host=self.address.vhost))
        self.expect(0, ConnectionOpenOk)
        return self

    def close(self) -> None:
        """Close politely if still open; never raises, never blocks past the timeout."""
        try:
            if self.sock is not None and not self.lost and self.connection_closed is None:
                self.send(0, ConnectionClose(200, "bye", 0, 0))
                self.expect(0, ConnectionCloseOk, timeout=min(self.timeout, 2.0))
        except DriverError:
            pass
        except OSError:
            pass
        finally:
            if self.sock is not None:
                self.sock.close()
                self.sock = None

    def __enter__(self) -> RawClient:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- channels --------------------------------------------------------------------------
    def channel(self, number: int | None = None) -> int:
        """Open a channel (the next free number unless given) and return its number."""
        if number is None:
            number = self._next_channel
            self._next_channel += 1
        self.closed_channels.pop(number, None)  # reopening a number the broker closed
        self.inbox.pop(number, None)
        self._asked.pop(number, None)
        self._unasked.pop(number, None)
        self._states.forget(number)
        try:  # a close of the number's old channel may still come before open-ok: ignored (module rules)
            self.rpc(number, ChannelOpen(), ChannelOpenOk)
        finally:
            self._answered.discard(number)
        return number

    def close_channel(self, number: int) -> None:
        self.rpc(number, ChannelClose(200, "bye", 0, 0), ChannelCloseOk)

    # -- sending ---------------------------------------------------------------------------
    def send(self, channel: int, method: Method, properties: BasicProperties | None = None,
             body: bytes = b"") -> None:
        if method.HAS_CONTENT:
            data = encode_content(channel, method, properties or BasicProperties(), body, self.frame_max)
        else:
            data = encode_method(channel, method)
        self._record("out", channel, Command(channel, method, properties, body))
        self._send_request(channel, method, data)

    def _send_request(self, channel: int, method: Method, data: bytes, probe: bool = False) -> probes.Request | None:
        if probes.PROBE_REPLY in method.RESPONSES and not probe:
            self._settle_probe(channel)  # a probe's reply must not be taken for this request's
        self._states.sent(channel, method)
        request = None
        if method.RESPONSES:  # a request: its reply is asked for (with nowait, it may still come)
            request = probes.request_for(method, probe)
            self._asked.setdefault(channel, []).append(request)
        self._write(data)
        return request

    def send_raw(self, data: bytes, channel: int = -1) -> None:
        """Any bytes, e.g. a malformed frame; recorded as the frames they decode to, the rest raw."""
        frames, rest = written_frames(bytes(data))
        for frame in frames:
            self._record("out", getattr(frame, "channel", channel), frame)
        if rest:
            self._record("out", channel, rest)
        if rest or any(getattr(getattr(f, "method", None), "RESPONSES", ()) for f in frames):
            self._untracked.add(channel)  # requests the driver did not track: their replies are not judged
        self._write(data)

    def _write(self, data: bytes) -> None:
        if self.sock is None:
            raise ConnectionLost("not connected")
        try:
            self.sock.settimeout(self.timeout)  # a broker that stops reading blocks sendall
            self.sock.sendall(data)
        except OSError as exc:
            self.lost = True
            raise ConnectionLost(f"send failed: {exc}") from None

    # -- receiving -------------------------------------------------------------------------
    def rpc(self, channel: int, method: Method, *reply_types: type, timeout: float | None = None) -> Command:
        self.send(channel, method)
        return self.expect(channel, *reply_types, timeout=timeout)

    def expect(self, channel: int, *types: type, timeout: float | None = None, look: bool = False) -> Command:
        """The next command on `channel` (of one of `types` when given); commands of other
        types on that channel stay queued. Raises Closed/NoReply/ConnectionLost. A wait (not a
        `look`: `poll`'s bounded look for what may or may not come) for the reply to a method
        this broker never answered earlier in the run fails at once (`silence.Unanswered`)."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        names = "/".join(t.NAME for t in types if hasattr(t, "NAME")) or "any method"  # type: ignore[attr-defined]
        request = None if look else self._open_request(channel, types)
        probe_at = None if request is None else time.monotonic() + min(limit, self.timeout) * EARLY_SHARE
        while True:
            found = self._take(channel, types)
            if found is not None:
                return found
            waiting_for = f"{names} on channel {channel}"
            self._raise_if_closed(channel, waiting_for)
            if types:
                self._raise_if_unasked(channel, waiting_for)
            if request is not None and self.silences:
                SILENCES.check(self.address.key, request.key, waiting_for)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pinged = request is not None and self.silences and self._answers_the_same_channel(channel)
                late = self._take(channel, types)
                if late is not None:  # it came before the ping's reply: the broker was slow, not silent
                    return late
                if pinged and request is not None:
                    SILENCES.learn(self.address.key, request.key, limit)
                raise NoReply(limit, waiting_for + self._undecoded())
            if probe_at is not None and time.monotonic() >= probe_at:
                probe_at = None  # once per wait
                self._probe_hidden_close(channel, waiting_for)
            self._read(remaining if probe_at is None else min(remaining, probe_at - time.monotonic()), waiting_for)

    def poll(self, channel: int, *types: type, duration: float = 0.0) -> Command | None:
        """Like expect, but None when nothing arrives within `duration` (a bounded look)."""
        try:
            return self.expect(channel, *types, timeout=duration, look=True)
        except NoReply:
            return None

    def pending(self, channel: int) -> list[Command]:
        """Commands received and not yet taken on a channel."""
        return list(self.inbox.get(channel, ()))

    def _take(self, channel: int, types: tuple[type, ...]) -> Command | None:
        box = self.inbox.get(channel)
        if not box:
            return None
        for i, command in enumerate(box):
            if not types or isinstance(command.method, types):
                del box[i]
                return command
        return None

    def _raise_if_closed(self, channel: int, waiting_for: str) -> None:
        if self.connection_closed is not None:
            raise self.connection_closed
        if channel in self.closed_channels:
            raise self.closed_channels[channel]
        if self.lost:
            raise ConnectionLost(f"connection closed: the broker ended it without connection.close "
                                 f"(waiting for {waiting_for})")

    def _raise_if_unasked(self, channel: int, waiting_for: str) -> None:
        box = self.inbox.get(channel, ())
        stray = next((c for c in self._unasked.get(channel, ()) if any(c is b for b in box)), None)
        if stray is not None:
            raise UnexpectedMethod(stray.method.NAME, channel, waiting_for)

    def _undecoded(self) -> str:
        """A timeout's note on the octets of an incomplete frame, if any arrived."""
        if not self.reader.buffered:
            return ""
        return f"; {self.reader.buffered} octets of an incomplete frame received"

    def _read(self, timeout: float, waiting_for: str = "any method") -> None:
        if self.sock is None:
            raise ConnectionLost(f"not connected (waiting for {waiting_for})")
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(262144)
        except TimeoutError:
            return
        except OSError:
            data = b""  # NET-01: a reset after connection.close is a normal end
        if not data:
            self.lost = True
            return
        self.reader.receive_data(data)
        try:
            while (frame := self.reader.next_frame()) is not NEED_DATA:
                self._on_frame(frame)  # type: ignore[arg-type]
        except CodecError as exc:
            self.lost = True
            raise ConnectionLost(f"undecodable frame from the broker (waiting for {waiting_for}): {exc}") from None

    def _on_frame(self, frame: Frame) -> None:
        channel = getattr(frame, "channel", 0)
        self._record("in", channel, frame)
        command = self.assembler.feed(frame)
        if command is None or isinstance(command, HeartbeatFrame):
            return
        m = command.method
        self._states.received(command.channel, m)
        if m.NAME in _RESPONSES and self._note_reply(command):
            self._probed = None  # the probe was answered: the channel was open
            return
        if isinstance(m, ChannelClose) and command.channel in self._answered:
            return  # a second close of a channel already closed and answered: ignored (module rules)
        if isinstance(m, ChannelClose):
            self._answered.add(command.channel)
            self.closed_channels[command.channel] = ChannelClosed(
                "channel", m.reply_code, m.reply_text, m.class_id, m.method_id)
            self._asked.pop(command.channel, None)  # the broker discards the open requests
            self.send(command.channel, ChannelCloseOk())
        elif isinstance(m, ConnectionClose):
            closed = ConnectionClosed("connection", m.reply_code, m.reply_text, m.class_id, m.method_id)
            if self._probed is not None and proves_hidden_close(closed):
                closed = HiddenClose(m.reply_code, m.reply_text, m.class_id, m.method_id, *self._probed)
            self.connection_closed = closed
            with contextlib.suppress(ConnectionLost):
                self.send(0, ConnectionCloseOk())
        if command.channel in self.closed_channels and not isinstance(m, ChannelClose):
            return  # after the broker's channel.close, the rest on that channel is discarded (0-9-1 channel.close)
        self.inbox.setdefault(command.channel, deque()).append(command)

    def _note_reply(self, command: Command) -> bool:
        """Match a reply with the oldest open request it answers, or note it as unasked; True when
        it answers the driver's own probe."""
        asked = self._asked.get(command.channel, [])
        for i, request in enumerate(asked):
            if command.method.NAME in request.replies:
                del asked[i]
                return request.probe
        if not self._untracked & {-1, command.channel}:
            self._unasked.setdefault(command.channel, []).append(command)
        return False

    def _record(self, direction: str, channel: int, frame: Any) -> None:
        self.recorder.add(FrameRecord(time.monotonic(), self.id, direction, channel, frame))


def written_frames(data: bytes) -> tuple[list[Frame], bytes]:
    """The frames in bytes a client wrote in one go, and the bytes after the last one that decodes."""
    reader = FrameReader(frame_max=0)
    reader.receive_data(data)
    frames: list[Frame] = []
    decoded = 0  # octets of the frames in `frames`: a frame that fails to decode stays in the rest
    with contextlib.suppress(CodecError):
        while (frame := reader.next_frame()) is not NEED_DATA:
            frames.append(frame)  # type: ignore[arg-type]
            decoded = len(data) - reader.buffered
    return frames, data[decoded:]
