"""ScriptedBroker: the reference broker's sans-IO engine, played by a scenario at a client library.

Responsibility: run one reference broker (`BrokerCore` + `ServerConnection`, the same engine as
`reference-broker`) on a free loopback port, with the controls a client-side scenario needs:
- every frame in and out is decoded with the codec and recorded (`frames`, direction seen from
  the broker: "in" = sent by the client, "out" = sent to it), and a scenario waits for a frame
  with `wait_frame(match, timeout)` (bounded, on a condition variable, never a sleep);
- `inject` sends any method (with content) to a connection, `close_connection` sends
  connection.close and waits for close-ok as RabbitMQ does, `inject_raw` sends any bytes;
- `intercept` lets the script answer a client command itself (the engine never sees it), and
  `drop` removes some of the engine's own sends (e.g. its confirms, when the script confirms);
- the engine's timers (consumer timeouts) never fire by the clock: `fire_timers()` fires the
  pending ones, each at its own deadline, so a timeout cycle is exact and repeatable;
- `heartbeats=False` makes the broker stop sending heartbeats; `capabilities` / `properties`
  add entries to connection.start's server-properties.

Rules: the engine decides everything the script does not override; hooks and injections run
on the broker's loop thread; every wait has a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from codec import (
    NEED_DATA,
    BasicProperties,
    CodecError,
    Command,
    ConnectionStart,
    FrameReader,
    HeartbeatFrame,
    Method,
    MethodFrame,
    encode_content,
    encode_method,
)
from conformance.drivers.interface import FrameRecord, NoReply, Recorder
from conformance.embedded import (
    BrokerConfig,
    BrokerServer,
    CancelTimer,
    Effect,
    EmbeddedBroker,
    Meta,
    Output,
    Send,
    ServerConnection,
    StartTimer,
    Write,
    now_ms,
)

Intercept = Callable[["ScriptedConnection", Command], Sequence[Output] | None]


@dataclass
class Script:
    """What the scenario changes in the broker's behaviour (read on the loop thread)."""

    capabilities: dict[str, Any] = field(default_factory=dict)  # merged into server capabilities
    properties: dict[str, Any] = field(default_factory=dict)  # merged into server-properties
    heartbeats: bool = True  # False: the broker sends no heartbeats
    intercept: Intercept | None = None
    drop: Callable[[Send], bool] | None = None


class ScriptedConnection(ServerConnection):
    """A ServerConnection that records its input frames and lets the script take commands."""

    def __init__(self, conn_id: int, broker: ScriptedBroker, peer: str) -> None:
        super().__init__(conn_id, broker.server.core, peer)
        self.broker = broker
        self._log_reader = FrameReader(frame_max=0, expect_protocol_header=True)

    def receive_data(self, data: bytes, now_ms: int) -> list[Output]:
        self.broker.record_bytes(self.id, "in", self._log_reader, data)
        return super().receive_data(data, now_ms)

    def _command(self, meta: Meta, command: Command) -> list[Output]:
        intercept = self.broker.script.intercept
        if intercept is not None:
            answer = intercept(self, command)
            if answer is not None:
                return list(answer)
        return super()._command(meta, command)

    def _resolve(self, meta: Meta, effects: list[Effect]) -> list[Output]:
        drop = self.broker.script.drop  # the engine's own sends the script replaces (e.g. confirms)
        if drop is not None:
            effects = [e for e in effects if not (isinstance(e, Send) and e.conn == self.id and drop(e))]
        return super()._resolve(meta, effects)

    def engine(self, command: Command) -> list[Output]:
        """What the engine itself does with `command` (for an intercept that adds to it)."""
        return super()._command(Meta(now_ms()), command)

    def write(self, channel: int, method: Method, properties: BasicProperties | None = None,
              body: bytes = b"") -> Write:
        """An output that sends `method` (content split at the negotiated frame_max)."""
        if method.HAS_CONTENT:
            return Write(self.id, encode_content(channel, method, properties or BasicProperties(), body,
                                                 self.frame_max))
        return Write(self.id, encode_method(channel, method))

    def _start(self) -> Method:
        start = super()._start()
        assert isinstance(start, ConnectionStart)
        script = self.broker.script
        props = dict(start.server_properties)
        props["capabilities"] = {**props["capabilities"], **script.capabilities}
        props.update(script.properties)
        return ConnectionStart(start.version_major, start.version_minor, props, start.mechanisms, start.locales)

    def tick(self, now_ms: int) -> list[Output]:
        out = super().tick(now_ms)
        if self.broker.script.heartbeats:
            return out
        return [o for o in out if not (isinstance(o, Write) and o.data[:1] == b"\x08")]


class _ScriptedServer(BrokerServer):
    def __init__(self, config: BrokerConfig, broker: ScriptedBroker) -> None:
        super().__init__(config)
        self.broker = broker

    def register(self, client: Any, peer: str) -> ServerConnection:
        self._next_conn += 1
        engine = ScriptedConnection(self._next_conn, self.broker, peer)
        self.clients[engine.id] = client
        return engine

    def execute(self, outputs: Sequence[Output]) -> None:
        """Sends become bytes here (so they are recorded); timers are held for `fire_timers`."""
        ready: list[Output] = []
        for out in outputs:
            if isinstance(out, Send):
                drop = self.broker.script.drop
                client = self.clients.get(out.conn)
                if (drop is not None and drop(out)) or client is None or client.engine is None:
                    continue
                if data := client.engine.encode(out):
                    ready.append(Write(out.conn, data))
            elif isinstance(out, StartTimer):
                self.broker.timers[out.key] = out.at_ms
            elif isinstance(out, CancelTimer):
                self.broker.timers.pop(out.key, None)
            else:
                ready.append(out)
        for out in ready:
            if isinstance(out, Write):
                self.broker.record_out(out.conn, out.data)
        super().execute(ready)


class ScriptedBroker(EmbeddedBroker):
    """`with ScriptedBroker(script, frame_max=8192) as broker:` a broker for one scenario."""

    def __init__(self, script: Script | None = None, **config: Any) -> None:
        config.setdefault("port", 0)
        super().__init__(BrokerConfig(**config))
        self.script = script or Script()
        self.server = _ScriptedServer(self.config, self)
        self.recorder = Recorder()
        self.timers: dict[tuple[object, ...], int] = {}
        self._changed = threading.Condition()
        self._out_readers: dict[int, FrameReader] = {}

    def __enter__(self) -> ScriptedBroker:
        self.start()
        return self

    # -- recording (loop thread) --------------------------------------------------------------
    def record_out(self, conn: int, data: bytes) -> None:
        reader = self._out_readers.setdefault(conn, FrameReader(frame_max=0))
        self.record_bytes(conn, "out", reader, data)

    def record_bytes(self, conn: int, direction: str, reader: FrameReader, data: bytes) -> None:
        reader.receive_data(data)
        frames: list[FrameRecord] = []
        try:
            while (frame := reader.next_frame()) is not NEED_DATA:
                frames.append(FrameRecord(time.monotonic(), conn, direction, getattr(frame, "channel", -1), frame))
        except CodecError:
            frames.append(FrameRecord(time.monotonic(), conn, direction, -1, bytes(data)))
        with self._changed:
            for record in frames:
                self.recorder.add(record)
            self._changed.notify_all()

    @property
    def frames(self) -> list[FrameRecord]:
        with self._changed:
            return list(self.recorder.frames)

    # -- waiting (scenario thread) --------------------------------------------------------------
    def wait_frame(self, match: Callable[[FrameRecord], bool], timeout: float, what: str,
                   start: int = 0) -> FrameRecord:
        """The first recorded frame from index `start` on that `match`es; NoReply after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for record in self.recorder.frames[start:]:
                    if match(record):
                        return record
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise NoReply(timeout, what)
                self._changed.wait(remaining)

    def wait_method(self, method_type: type, timeout: float, *, direction: str = "in", start: int = 0,
                    where: Callable[[Any], bool] = lambda m: True) -> Any:
        """The first `method_type` method frame (sent by the client unless `direction="out"`)."""
        record = self.wait_frame(
            lambda r: r.direction == direction and isinstance(r.frame, MethodFrame)
            and isinstance(r.frame.method, method_type) and where(r.frame.method),
            timeout, f"{getattr(method_type, 'NAME', method_type)} from the client", start)
        return record.frame.method

    def methods(self, direction: str = "in") -> list[tuple[int, Method]]:
        """(channel, method) of every recorded method frame in one direction."""
        return [(r.channel, r.frame.method) for r in self.frames
                if r.direction == direction and isinstance(r.frame, MethodFrame)]

    def heartbeats(self, direction: str = "in") -> list[FrameRecord]:
        return [r for r in self.frames if r.direction == direction and isinstance(r.frame, HeartbeatFrame)]

    # -- acting (scenario thread; runs on the loop) -----------------------------------------------
    def connections(self) -> list[ScriptedConnection]:
        def engines() -> list[ScriptedConnection]:
            return [c.engine for c in self.server.clients.values() if isinstance(c.engine, ScriptedConnection)]

        found: list[ScriptedConnection] = self.call(engines)
        return found

    def connection(self) -> ScriptedConnection:
        """The one client connection (the scenario's client opened exactly one)."""
        found = self.connections()
        if len(found) != 1:
            raise AssertionError(f"expected one client connection, found {len(found)}")
        return found[0]

    def inject(self, conn: ScriptedConnection, channel: int, method: Method,
               properties: BasicProperties | None = None, body: bytes = b"") -> None:
        """Send a method (content methods with properties and body, split at the negotiated frame_max)."""
        self.call(lambda: self.server.execute([conn.write(channel, method, properties, body)]))

    def inject_raw(self, conn: ScriptedConnection, data: bytes) -> None:
        self.call(lambda: self.server.execute([Write(conn.id, data)]))

    def close_connection(self, conn: ScriptedConnection, code: int, text: str) -> None:
        """connection.close from the broker (then the engine waits for close-ok)."""
        self.call(lambda: self.server.execute(conn.close_from_broker(now_ms(), code, text)))

    def delete_queue(self, name: str, vhost: str = "/") -> None:
        """An operator deletes a queue: the engine cancels its consumers (CCN-02)."""
        def delete() -> None:
            core = self.server.core
            queue = core.find_queue(vhost, name)
            if queue is None:
                raise KeyError(f"no queue {name!r} in vhost {vhost!r}")
            self.server.execute([*core.delete_queue(Meta(now_ms()), queue), *core.flush()])

        self.call(delete)

    def fire_timers(self) -> int:
        """Fire every pending engine timer, earliest first, each at its own deadline; return how many."""
        def fire() -> int:
            due = sorted(self.timers.items(), key=lambda item: item[1])
            for key, at_ms in due:
                if self.timers.get(key) != at_ms:
                    continue
                del self.timers[key]
                core = self.server.core
                self.server.execute([*core.timer_fired(Meta(at_ms), key), *core.flush()])
            return len(due)

        fired: int = self.call(fire)
        return fired

    def core_call(self, fn: Callable[[Any], Any]) -> Any:
        """Run `fn(core)` on the loop (read the engine's state)."""
        return self.call(lambda: fn(self.server.core))

