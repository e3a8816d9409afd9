"""ServerConnection: one client connection's sans-IO protocol engine (h11's shape).

Rules:
- `receive_data(bytes, now_ms)` returns effects: `Write` (bytes for this connection),
  `CloseTransport`, and the core's effects (which may target other connections).
  `encode(send)` turns a core `Send` for this connection into bytes.
- Handshake: protocol header (a wrong one is answered with the 0-9-1 header and the socket
  closes), start/start-ok (PLAIN, AMQPLAIN), tune/tune-ok (FRM-01 bounds, 530), open.
  Before tune-ok frames are limited to FRAME_MIN_SIZE (FRM-02).
- Hard errors send connection.close and wait for close-ok (ERR-02); a codec error inside
  a method frame is answered 501 "cannot decode <<args>>" as RabbitMQ 3.10.8 does (checked live);
  a body longer than its header declared is 501 with rabbit_command_assembler's text (4.3).
- Heartbeats (HB-01): `tick(now_ms)` sends one after heartbeat/2 s of silence and closes
  the transport after 2 intervals with nothing received, except while the connection is
  blocked by a resource alarm (ALM-05: the monitor is paused).
- Resource alarms (ALM-01, ALM-02): after each content frame the core may block the
  connection; the engine then parses nothing more (what was read waits in the reader) until
  the transport resumes it with `receive_data(b"", now)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codec import (
    NEED_DATA,
    PROTOCOL_HEADER,
    AmqpError,
    BasicProperties,
    BodyFrame,
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
    ConnectionUpdateSecret,
    ConnectionUpdateSecretOk,
    ContentAssembler,
    FrameReader,
    FrameSyntaxError,
    HeaderFrame,
    HeartbeatFrame,
    Method,
    ProtocolHeader,
    ProtocolHeaderError,
    ReplyCode,
    encode_content,
    encode_heartbeat,
    encode_method,
)
from reference_broker.auth import AuthError, authenticate, mechanisms
from reference_broker.config import BrokerConfig
from reference_broker.core import BrokerCore, CloseConnection, Effect, Meta, Send
from reference_broker.core.permissions import vhost_allowed
from reference_broker.protocol import states

_EMPTY = BasicProperties()
BODY_TOO_LONG = "content body larger than the declared size"  # the codec's reason (codec/assembler.py)
CLOSE_GRACE_MS = 1_000
CLOSING_TIMEOUT_MS = 30_000  # rabbit_reader ?CLOSING_TIMEOUT: the longest wait for the client's end
SERVER_CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}  # CCN-01


@dataclass(frozen=True, slots=True)
class Write:
    conn: int
    data: bytes


@dataclass(frozen=True, slots=True)
class CloseTransport:
    conn: int
    reason: str


Output = Effect | Write | CloseTransport


class ServerConnection:
    """Protocol state of one connection: handshake, framing, close, heartbeats."""

    def __init__(self, conn_id: int, core: BrokerCore, peer: str = "") -> None:
        self.id = conn_id
        self.core = core
        self.config: BrokerConfig = core.config
        self.peer = peer
        self.reader = FrameReader(frame_max=self.config.frame_min_size, expect_protocol_header=True)
        self.assembler = ContentAssembler()
        self.state = states.HEADER  # header start_ok tune_ok open opened closing closed
        self.frame_max = self.config.frame_min_size
        self.heartbeat = 0
        self.client_properties: dict[str, Any] = {}
        self.user = ""
        self.last_recv = 0
        self.last_send = 0
        self.channel_max = 0
        self.broken = False  # a codec error: nothing more can be parsed
        self.closing_since: int | None = None
        self.closed_since: int | None = None  # close-ok sent to a client's close: its socket to end

    # -- input -------------------------------------------------------------------------
    def receive_data(self, data: bytes, now_ms: int) -> list[Output]:
        if self.state == states.CLOSED or self.broken:
            return []  # a corrupt stream cannot even carry close-ok: `tick` ends it
        self.last_recv = now_ms
        self.reader.receive_data(data)
        out: list[Output] = []
        meta = Meta(now_ms)
        while self.state != states.CLOSED and not self.core.is_blocked(self.id):
            try:
                frame = self.reader.next_frame()
                if frame is NEED_DATA:
                    break
                if isinstance(frame, ProtocolHeader):
                    out += self._send(meta, 0, self._start())
                    self.state = states.START_OK
                    continue
                command = self.assembler.feed(frame)  # type: ignore[arg-type]
            except ProtocolHeaderError:
                self.state = states.CLOSED
                return [Write(self.id, PROTOCOL_HEADER), CloseTransport(self.id, "bad protocol header")]
            except CodecError as err:
                out += self._codec_error(meta, err)
                break
            if command is not None and not isinstance(command, HeartbeatFrame):
                out += self._command(meta, command)
            if isinstance(frame, HeaderFrame | BodyFrame) and self.state == states.OPENED and (
                    command is not None or self.core.rules.held_from_header()):
                out += self._resolve(meta, self.core.publish_received(self.id))  # ALM-01: may block
        out += self._resolve(meta, self.core.flush())
        return out

    def _command(self, meta: Meta, command: Command) -> list[Output]:
        if self.state == states.CLOSING:
            if isinstance(command.method, ConnectionCloseOk):
                self.state = states.CLOSED
                return [CloseTransport(self.id, "closed")]
            if isinstance(command.method, ConnectionClose):  # closes crossed: answer, still wait for close-ok
                return [Write(self.id, encode_method(0, ConnectionCloseOk()))]
            return []
        try:
            if self.state != states.OPENED:
                return self._handshake(meta, command)
            if command.channel == 0:
                return self._channel_zero(meta, command.method)
            # connection.* on channel N is the core's like any method (as in rabbit_channel): 504
            # before channel.open, 503 "unimplemented method" once open, dropped while closing (ERR-03/04)
            effects = self.core.apply(meta, self.id, command.channel, command.method,
                                      command.properties, command.body)
            return self._resolve(meta, effects)
        except AmqpError as err:
            return self._close_with(meta, err.code, err.reply_text, err.class_id, err.method_id)

    def _codec_error(self, meta: Meta, err: CodecError) -> list[Output]:
        code, text = err.code, f"{err.code.name} - {err.reason}"[:255]  # the window is for logs
        if isinstance(err, FrameSyntaxError) and err.class_id:  # the method's argument octets, as Erlang's ~w
            arguments = ",".join(str(octet) for octet in err.data[4:])
            code, text = ReplyCode.FRAME_ERROR, f"FRAME_ERROR - cannot decode <<{arguments}>>"[:255]
        elif err.reason.startswith(BODY_TOO_LONG):  # rabbit_command_assembler, v4.3.0 (ERR-04)
            text = "FRAME_ERROR - content body frame exceeds remaining content size"
        if self.state in (states.HEADER, *states.HANDSHAKE_STATES[:2]):
            self.state = states.CLOSED
            return [CloseTransport(self.id, f"codec error during handshake: {err}")]
        self.broken = True
        if self.state == states.CLOSING:  # connection.close already sent: one is all (rabbit_reader)
            return []
        return self._close_with(meta, code, text, err.class_id, err.method_id)

    # -- handshake -------------------------------------------------------------------------
    def _start(self) -> Method:
        caps = SERVER_CAPABILITIES if self.config.capabilities is None else self.config.capabilities
        props: dict[str, object] = {"product": self.config.product, "version": self.config.version,
                                    "platform": "Python", "capabilities": dict(caps),
                                    "information": "amqp-conformance reference broker"}
        if self.config.announce_emulation:  # lets `auto` judge it as that RabbitMQ version
            props["emulates"] = f"RabbitMQ {self.config.emulates}"
        return ConnectionStart(0, 9, props, " ".join(mechanisms(self.config)).encode(), b"en_US")

    def _handshake(self, meta: Meta, command: Command) -> list[Output]:
        m = command.method
        if (self.state, type(m)) not in states.HANDSHAKE:
            raise AmqpError(ReplyCode.COMMAND_INVALID, f"unexpected {m.NAME} during the handshake",
                            m.CLASS_ID, m.METHOD_ID, scope="connection")
        if isinstance(m, ConnectionStartOk):
            self.client_properties = dict(m.client_properties)
            try:
                self.user = authenticate(self.config, m.mechanism, m.response, self.peer,
                                         self.core.rules.mechanism_logs_in)
            except AuthError as err:
                return self._auth_failed(meta, err)
            self.state = states.TUNE_OK
            return self._send(meta, 0, ConnectionTune(self.config.channel_max, self.config.frame_max,
                                                      self.config.heartbeat))
        if isinstance(m, ConnectionTuneOk):
            self._negotiate(m)
            self.state = states.OPEN
            return []
        if isinstance(m, ConnectionOpen):
            if m.virtual_host not in self.core.vhosts:
                raise AmqpError(ReplyCode.NOT_ALLOWED, f"vhost {m.virtual_host} not found", 10, 40)
            if not vhost_allowed(self.core, self.user, m.virtual_host):
                raise AmqpError(ReplyCode.NOT_ALLOWED, f"access to vhost '{m.virtual_host}' refused "
                                f"for user '{self.user}'", 10, 40)
            limit = self.config.max_connections
            if limit and len(self.core.connections) >= limit:  # RabbitMQ 4.x: refused at open
                raise AmqpError(ReplyCode.NOT_ALLOWED, "connection refused: node connection limit "
                                f"({limit}) is reached", 10, 40)
            self.core.connection_opened(self.id, m.virtual_host, self.user, self._negotiated_properties(),
                                        self.channel_max, name=self.peer)
            self.state = states.OPENED
            return self._send(meta, 0, ConnectionOpenOk())
        return self._close_ok(meta)  # connection.close, the table's last entries

    def _negotiated_properties(self) -> dict[str, Any]:
        """The client's properties with only the capabilities this broker advertises too: a
        capability is in force when both sides claim it (a configured table can omit some)."""
        caps = self.client_properties.get("capabilities")
        if not isinstance(caps, dict):
            return self.client_properties
        ours = SERVER_CAPABILITIES if self.config.capabilities is None else self.config.capabilities
        return {**self.client_properties, "capabilities": {k: v for k, v in caps.items() if ours.get(k) is True}}

    def _auth_failed(self, meta: Meta, err: AuthError) -> list[Output]:
        """ACC-06 (rabbit_reader auth_fail, handle_exception in `starting`): a refused login is
        connection.close 403 (0/0) only for a client with authentication_failure_close, else the
        socket ends; an unknown mechanism or an unparsable response ends it too (RabbitMQ after
        its 3 s SILENT_CLOSE_DELAY, live 3.10.8, 4.0.5, 4.3.6; here at once)."""
        caps = self._negotiated_properties().get("capabilities")
        asked = isinstance(caps, dict) and caps.get("authentication_failure_close") is True
        if err.code != ReplyCode.ACCESS_REFUSED or not self.core.rules.auth_failure_close(asked):
            self.state = states.CLOSED
            return [CloseTransport(self.id, str(err))]
        return self._close_with(meta, err.code, f"{ReplyCode(err.code).name} - {err}", 0, 0)

    def _negotiate(self, m: ConnectionTuneOk) -> None:
        """FRM-01: 0 counts as higher than a non-zero server value; below the minimum is 530."""
        server_frame_max, server_channel_max = self.config.frame_max, self.config.channel_max
        for name, value, server, minimum in (("frame_max", m.frame_max, server_frame_max,
                                              self.config.frame_min_size),
                                             ("channel_max", m.channel_max, server_channel_max, 1)):
            if server and (value == 0 or value > server):
                # rabbit_reader:get_client_value_detail: " (no limit)" for channel_max 0 only
                shown = f"{value} (no limit)" if value == 0 and name == "channel_max" else str(value)
                raise AmqpError(ReplyCode.NOT_ALLOWED, f"negotiated {name} = {shown} is higher than "
                                f"the maximum allowed value ({server})", 10, 31)
            if value and value < minimum:
                raise AmqpError(ReplyCode.NOT_ALLOWED, f"negotiated {name} = {value} is lower than "
                                f"the minimum allowed value ({minimum})", 10, 31)
        self.frame_max = m.frame_max
        self.reader.frame_max = self.core.rules.enforced_frame_max(m.frame_max)
        self.channel_max = m.channel_max
        self.heartbeat = self.core.rules.negotiated_heartbeat(m.heartbeat, self.config.heartbeat)  # HB-01

    def _channel_zero(self, meta: Meta, m: Method) -> list[Output]:
        if isinstance(m, ConnectionClose):
            effects = self.core.connection_closed(meta, self.id)
            return [*self._resolve(meta, effects), *self._close_ok(meta)]
        if isinstance(m, ConnectionUpdateSecret):
            return self._send(meta, 0, ConnectionUpdateSecretOk())
        if m.CLASS_ID != 10:  # RabbitMQ 3.10.8, checked live: 504 with this text
            raise AmqpError(ReplyCode.CHANNEL_ERROR, "unexpected method in connection state running",
                            m.CLASS_ID, m.METHOD_ID, scope="connection")
        raise AmqpError(ReplyCode.COMMAND_INVALID, f"unexpected {m.NAME} on channel 0",
                        m.CLASS_ID, m.METHOD_ID, scope="connection")

    def _close_ok(self, meta: Meta) -> list[Output]:
        """NET-02: answer a client's connection.close and leave the socket to the client, as
        rabbit_reader does (close_connection/1): it ends the connection when the client closes
        the socket, or after `closing_timeout_ms`. Closing it at once would reset a client still
        writing behind its close (unread input makes the kernel send RST), or reading close-ok."""
        self.state = states.CLOSED
        self.closed_since = meta.now_ms
        if self.core.rules.ends_socket_after_close_ok():
            return [Write(self.id, encode_method(0, ConnectionCloseOk())), CloseTransport(self.id, "client closed")]
        return [Write(self.id, encode_method(0, ConnectionCloseOk()))]

    def closing_timeout_ms(self) -> int:
        """rabbit_reader: the heartbeat interval when it is below ?CLOSING_TIMEOUT, else 30 s."""
        return self.heartbeat * 1000 if 0 < self.heartbeat * 1000 < CLOSING_TIMEOUT_MS else CLOSING_TIMEOUT_MS

    # -- output ----------------------------------------------------------------------------
    def _close_with(self, meta: Meta, code: int, text: str, class_id: int, method_id: int) -> list[Output]:
        effects = self.core.connection_closed(meta, self.id)
        self.state = states.CLOSING
        self.closing_since = meta.now_ms
        return [*self._resolve(meta, effects),
                Write(self.id, encode_method(0, ConnectionClose(code, text, class_id, method_id)))]

    def _send(self, meta: Meta, channel: int, method: Method) -> list[Output]:
        self.last_send = meta.now_ms
        return [Write(self.id, encode_method(channel, method))]

    def _resolve(self, meta: Meta, effects: list[Effect]) -> list[Output]:
        """Handle effects aimed at this connection's own state; pass the rest through."""
        out: list[Output] = []
        for effect in effects:
            if isinstance(effect, CloseConnection) and effect.conn == self.id:
                if self.state != states.CLOSING:
                    self.state = states.CLOSING
                    self.closing_since = meta.now_ms
                    out.append(Write(self.id, encode_method(0, ConnectionClose(
                        effect.code, effect.text, effect.class_id, effect.method_id))))
            elif isinstance(effect, Send) and effect.conn == self.id:
                # encoded now: a reply made before a hard error later in the same input batch
                # (pipelined channel.open + bad frame) must go out ahead of the connection.close
                if data := self.encode(effect):
                    out.append(Write(self.id, data))
            else:
                out.append(effect)
        return out

    def encode(self, send: Send) -> bytes:
        """Bytes for a core Send aimed at this connection (bodies split by frame_max)."""
        if self.state in (states.CLOSED, states.CLOSING):
            return b""
        if send.method.HAS_CONTENT:
            properties = send.properties or _EMPTY
            properties = self.core.rules.delivered_properties(properties)  # MSG-01: as published
            return encode_content(send.channel, send.method, properties, send.body, self.frame_max)
        return encode_method(send.channel, send.method)

    def tick(self, now_ms: int) -> list[Output]:
        """Heartbeats (HB-01): send after heartbeat/2 idle, give up after 2 silent intervals.
        A connection the broker closed gets CLOSE_GRACE_MS for close-ok, then the socket goes;
        one the client closed gets `closing_timeout_ms` to end its socket (NET-02)."""
        if self.state == states.CLOSED and self.closed_since is not None:
            if now_ms - self.closed_since >= self.closing_timeout_ms():
                self.closed_since = None
                return [CloseTransport(self.id, "the client did not close its socket after close-ok")]
            return []
        if self.state == states.CLOSING and self.closing_since is not None:
            if now_ms - self.closing_since >= CLOSE_GRACE_MS:
                self.state = states.CLOSED
                return [CloseTransport(self.id, "no connection.close-ok from the client")]
            return []
        if not self.heartbeat or self.state != states.OPENED:
            return []
        interval = self.heartbeat * 1000
        paused = self.core.is_blocked(self.id) and self.core.rules.blocked_heartbeat_paused()  # ALM-05
        if paused:
            self.last_recv = now_ms  # the monitor starts afresh when reading resumes
        elif now_ms - self.last_recv > 2 * interval:
            effects = self.core.connection_closed(Meta(now_ms), self.id)
            self.state = states.CLOSED
            return [*effects, CloseTransport(self.id, f"missed heartbeats from client, timeout: {self.heartbeat}s")]
        if now_ms - self.last_send >= interval // 2:
            self.last_send = now_ms
            return [Write(self.id, encode_heartbeat())]
        return []

    def close_from_broker(self, now_ms: int, code: int, text: str) -> list[Output]:
        """An operator closes the connection (management API): connection.close, then wait."""
        if self.state != states.OPENED:
            return []
        return self._close_with(Meta(now_ms), code, text, 0, 0)

    def transport_lost(self, now_ms: int) -> list[Output]:
        if self.state == states.CLOSED:
            return []
        self.state = states.CLOSED
        return list(self.core.connection_closed(Meta(now_ms), self.id))

