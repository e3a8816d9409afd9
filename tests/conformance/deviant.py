"""DeviantProxy: a frame-rewriting proxy that makes any broker deviate in one realistic way (issue 21).

Responsibility: stand between the harness and a broker and apply one `Deviation` (see
`deviations.py`): a small rewrite of what the broker sends, or of what the client sends so that
the broker mis-hears it. The harness then meets a broker that breaks one rule, and the suite
must report that rule as failed, with nothing broken.

Rules:
- Both directions are cut into frames (the client's starts with the 8-octet protocol header)
  and handed, one by one and in order, to the link's own `Deviation` instance (a new one per
  connection, so a deviation may keep per-connection state). Method frames are decoded with
  the project's codec on demand; rewritten methods are encoded with it (`encode_method`).
- What a deviation does not touch is forwarded byte for byte.
- A deviation that drops a content-bearing method (basic.deliver, get-ok, return, publish)
  calls `drop_content`, and the header and body frames that follow it on that channel are
  dropped too. The broker side's content is collected per channel, so a deviation can re-send
  a message it saw (`Message`).
- `actions` counts what the deviation did (`Io.record`); `close()` ends everything within
  seconds. Every wait here is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, TypeVar

from codec import (
    BasicDeliver,
    BasicGetOk,
    BasicReturn,
    CodecError,
    FrameReader,
    Method,
    MethodFrame,
    encode_method,
)

T = TypeVar("T")
_HEADER = struct.Struct(">BHI")  # frame type, channel, payload size (0-9-1 §4.2.3)
METHOD, HEADER, BODY = 1, 2, 3
_BODY_SIZE = struct.Struct(">HHQ")  # content header: class id, weight, body size


@dataclass(frozen=True)
class Frame:
    raw: bytes

    @property
    def type(self) -> int:
        return self.raw[0] if len(self.raw) > 7 and not self.raw.startswith(b"AMQP") else 0

    @property
    def channel(self) -> int:
        return _HEADER.unpack_from(self.raw)[1] if self.type else 0

    @cached_property
    def method(self) -> Method | None:
        if self.type != METHOD:
            return None
        reader = FrameReader(frame_max=0)
        reader.receive_data(self.raw)
        try:
            decoded = reader.next_frame()
        except CodecError:
            return None
        return decoded.method if isinstance(decoded, MethodFrame) else None


def encode(channel: int, method: Method) -> bytes:
    return encode_method(channel, method)


@dataclass
class Message:
    """A content-bearing method from the broker with its header and body frames (raw)."""

    channel: int
    method: Method
    frames: list[bytes] = field(default_factory=list)
    remaining: int = -1  # body octets still to come; -1 until the header frame

    @property
    def complete(self) -> bool:
        return self.remaining == 0


class Io:
    """What a deviation can do on its link: write to either side, and record an action."""

    def __init__(self, proxy: DeviantProxy, client: asyncio.StreamWriter, broker: asyncio.StreamWriter) -> None:
        self.proxy, self.client, self.broker = proxy, client, broker

    def to_client(self, data: bytes) -> None:
        if not self.client.transport.is_closing():
            self.client.write(data)

    def to_broker(self, data: bytes) -> None:
        if not self.broker.transport.is_closing():
            self.broker.write(data)

    def record(self, text: str) -> None:
        self.proxy.record(text)


class Deviation:
    """One deviation, one instance per connection. Subclasses override `client`/`broker`."""

    name: ClassVar[str] = ""
    area: ClassVar[str] = ""
    rules: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""

    def __init__(self) -> None:
        self._dropping: dict[tuple[str, int], int] = {}  # (side, channel) -> body octets left (-1: header next)
        self.messages: dict[int, Message] = {}  # broker side: the content method being assembled, per channel

    # -- hooks -----------------------------------------------------------------------------------
    def client(self, frame: Frame, io: Io) -> None:
        io.to_broker(frame.raw)

    def broker(self, frame: Frame, io: Io) -> None:
        io.to_client(frame.raw)

    def message(self, message: Message, io: Io) -> None:
        """A broker message (deliver, get-ok, return) is complete (its frames were forwarded)."""

    # -- helpers ---------------------------------------------------------------------------------
    def drop_content(self, side: str, channel: int) -> None:
        self._dropping[(side, channel)] = -1

    def handle(self, side: str, frame: Frame, io: Io) -> None:
        key = (side, frame.channel)
        if frame.type in (HEADER, BODY) and key in self._dropping:
            self._consume(key, frame)
            return
        if side == "broker":
            self._collect(frame)
        (self.client if side == "client" else self.broker)(frame, io)
        message = self.messages.get(frame.channel) if side == "broker" and frame.type != METHOD else None
        if message is not None and message.complete:
            del self.messages[frame.channel]
            self.message(message, io)

    def _consume(self, key: tuple[str, int], frame: Frame) -> None:
        left = self._dropping[key]
        left = _BODY_SIZE.unpack_from(frame.raw, 7)[2] if frame.type == HEADER else left - (len(frame.raw) - 8)
        if left <= 0:
            del self._dropping[key]
        else:
            self._dropping[key] = left

    def _collect(self, frame: Frame) -> None:
        if frame.type == METHOD and isinstance(frame.method, BasicDeliver | BasicGetOk | BasicReturn):
            self.messages[frame.channel] = Message(frame.channel, frame.method)
            return
        message = self.messages.get(frame.channel)
        if message is None or frame.type not in (HEADER, BODY):
            return
        message.frames.append(frame.raw)
        if frame.type == HEADER:
            message.remaining = _BODY_SIZE.unpack_from(frame.raw, 7)[2]
        else:
            message.remaining -= len(frame.raw) - 8


class Splitter:
    """Whole frames (and an 8-octet protocol header) off the front of a byte stream."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[Frame]:
        frames, buf = [], self.buf + data
        while True:
            if buf.startswith(b"AMQP") and len(buf) >= 8:
                frames.append(Frame(buf[:8]))
                buf = buf[8:]
                continue
            if len(buf) < _HEADER.size:
                break
            end = _HEADER.size + _HEADER.unpack_from(buf)[2] + 1
            if len(buf) < end:
                break
            frames.append(Frame(buf[:end]))
            buf = buf[end:]
        self.buf = buf
        return frames


class DeviantProxy:
    """`with DeviantProxy(("127.0.0.1", port), SomeDeviation) as proxy: proxy.url`."""

    def __init__(self, upstream: tuple[str, int], deviation: type[Deviation] | None) -> None:
        self.upstream, self.deviation = upstream, deviation or Deviation
        self.actions: list[str] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="deviant-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def start(self) -> DeviantProxy:
        self._thread.start()
        server = self._call(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self._server, self.port = server, server.sockets[0].getsockname()[1]
        return self

    def record(self, text: str) -> None:
        with self._lock:
            self.actions.append(text)

    def close(self) -> None:
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for writer in self._writers:
                writer.transport.abort()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=2)

        with contextlib.suppress(Exception):
            self._call(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> DeviantProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 5.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.upstream), 5)
        except (OSError, TimeoutError):
            writer.transport.abort()
            return
        self._writers += [writer, up_writer]
        io, deviation = Io(self, writer, up_writer), self.deviation()
        await asyncio.gather(self._pump(reader, "client", deviation, io, up_writer),
                             self._pump(up_reader, "broker", deviation, io, writer))

    async def _pump(self, reader: asyncio.StreamReader, side: str, deviation: Deviation, io: Io,
                    other: asyncio.StreamWriter) -> None:
        splitter = Splitter()
        while True:
            try:
                data = await reader.read(65536)
            except OSError:
                data = b""
            if not data:
                break
            for frame in splitter.feed(data):
                deviation.handle(side, frame, io)
        other.transport.abort()

