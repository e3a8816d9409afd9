"""Relay: the one interposer, an asyncio TCP relay between AMQP clients and a broker.

Responsibility: accept client connections, open one upstream connection per client (a `Link`,
numbered from 1), and pump each direction ("out": client to broker, "in": broker to client)
through the link's `Plumbing`, which an `Interposer` gives for each new link: a `Transform` per
direction (what is written for the bytes read: by default the same bytes) and sinks that see a
copy of the bytes read (the taps that record frames). `RelayThread` runs a relay on its own
event loop in a thread, for synchronous callers.

Rules (a thin asyncio transport; frame cutting and decoding are sans-IO, in `frames` and `tap`):
- A transform writes first; the sinks see a copy afterwards and never alter, delay or reorder a byte.
- Backpressure: a direction reads its next chunk only after the previous one drained, so
  memory per link is bounded by one read (`CHUNK`) plus what a transform or sink holds.
- A clean end (EOF) of a direction goes to its transform (`ended`: by default passed on as a
  half-close); a socket error on either side aborts both sockets of that link (counted in
  `resets`). Once both directions ended, both sockets are aborted. The relay keeps serving others.
- An upstream that refuses the connection (or does not accept it within `connect_timeout`):
  the client's socket is aborted at once, and the refusal is counted (`refused`).
- `close()` stops listening, aborts every link and waits for them, bounded; then the
  interposer's `closed()` (a sink writes what it buffered).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from conformance.interpose.frames import Frame, FrameCutter

T = TypeVar("T")
OUT, IN = "out", "in"  # client to broker, broker to client
CHUNK = 256 * 1024
Sink = Callable[[str, bytes], None]  # (direction, a copy of the bytes read)


class Link:
    """One relayed connection: what a transform may do to either side of it."""

    def __init__(self, number: int, client: asyncio.StreamWriter, broker: asyncio.StreamWriter) -> None:
        self.number, self.client, self.broker = number, client, broker

    def writer(self, direction: str) -> asyncio.StreamWriter:
        """Where bytes travelling in `direction` are written."""
        return self.broker if direction == OUT else self.client

    def send(self, direction: str, data: bytes) -> None:
        writer = self.writer(direction)
        if not writer.transport.is_closing():
            writer.write(data)

    def to_broker(self, data: bytes) -> None:
        self.send(OUT, data)

    def to_client(self, data: bytes) -> None:
        self.send(IN, data)

    def send_later(self, delay: float, direction: str, data: bytes) -> None:
        asyncio.get_running_loop().call_later(delay, self.send, direction, data)

    def half_close(self, direction: str) -> None:
        writer = self.writer(direction)
        if not writer.transport.is_closing() and writer.can_write_eof():
            writer.write_eof()

    def abort(self, direction: str | None = None) -> None:
        """Abort the socket `direction` writes to, or (None) both."""
        for writer in (self.writer(direction),) if direction else (self.client, self.broker):
            writer.transport.abort()

    def reset_client(self) -> None:
        """Close the client's socket with RST (SO_LINGER 0): an abrupt end, not a FIN after the data."""
        sock = self.client.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.client.transport.abort()


class Transform:
    """One direction of a link: the bytes read in, what is written. This one forwards them
    unchanged and passes a clean end on as a half-close (`half_close=False`: aborts the link)."""

    def __init__(self, *, half_close: bool = True) -> None:
        self.half_close = half_close

    def received(self, link: Link, direction: str, data: bytes) -> None:
        link.send(direction, data)

    def ended(self, link: Link, direction: str) -> None:
        if self.half_close:
            link.half_close(direction)
        else:
            link.abort()


FORWARD = Transform()
FORWARD_THEN_ABORT = Transform(half_close=False)


class Framed(Transform):
    """Cuts the direction into frames (a protocol header at any boundary is one) and hands each,
    in order, to `on_frame`, which writes what it wants through the link; once framing is lost,
    the rest is forwarded unchanged. A clean end aborts the link."""

    def __init__(self, on_frame: Callable[[Frame], None]) -> None:
        super().__init__(half_close=False)
        self.on_frame = on_frame
        self.cutter = FrameCutter(headers_anywhere=True)

    def received(self, link: Link, direction: str, data: bytes) -> None:
        for raw in self.cutter.feed(data):
            self.on_frame(Frame(raw))
        if self.cutter.lost:
            link.send(direction, self.cutter.unframed())


@dataclass(frozen=True)
class Plumbing:
    """What the relay does on one link: a transform per direction, sinks that see both."""

    out: Transform = FORWARD
    inn: Transform = FORWARD
    sinks: tuple[Sink, ...] = ()


class Interposer:
    """What a relay does to its links; this one forwards every byte and records nothing."""

    def plumb(self, link: Link) -> Plumbing:
        return Plumbing()

    async def started(self) -> None:
        """The relay listens (a sink starts its background work here)."""

    async def closed(self) -> None:
        """Every link has ended (a sink writes what it buffered here)."""


@dataclass
class RelayStats:
    connections: int = 0
    open: int = 0
    refused: int = 0
    resets: int = 0
    bytes_out: int = 0
    bytes_in: int = 0


class Relay:
    """`await Relay((host, port), interposer).start("127.0.0.1", 0)` -> the address bound."""

    def __init__(self, upstream: tuple[str, int], interposer: Interposer | None = None, *,
                 connect_timeout: float = 5.0, close_timeout: float = 5.0) -> None:
        self.upstream, self.interposer = upstream, interposer or Interposer()
        self.connect_timeout, self.close_timeout = connect_timeout, close_timeout
        self.stats = RelayStats()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen on host:port (0: a free port); returns the address bound."""
        self._server = await asyncio.start_server(self._client, host, port)
        await self.interposer.started()
        address = self._server.sockets[0].getsockname()
        return address[0], address[1]

    async def close(self) -> None:
        """Stop listening, end open links (bounded by `close_timeout`), then the interposer's `closed`."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()  # the pumps see the end and the link tasks finish
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.close_timeout)
        await self.interposer.closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.stats.connections += 1
        number = self.stats.connections
        try:
            try:
                opening = asyncio.open_connection(*self.upstream)
                up_reader, up_writer = await asyncio.wait_for(opening, self.connect_timeout)
            except (OSError, TimeoutError):
                self.stats.refused += 1
                writer.transport.abort()
                return
            self._writers.add(up_writer)
            await self._relay(Link(number, writer, up_writer), reader, up_reader)
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)

    async def _relay(self, link: Link, from_client: asyncio.StreamReader, from_broker: asyncio.StreamReader) -> None:
        plumbing = self.interposer.plumb(link)
        self.stats.open += 1
        results = await asyncio.gather(self._pump(link, OUT, from_client, plumbing.out, plumbing.sinks),
                                       self._pump(link, IN, from_broker, plumbing.inn, plumbing.sinks),
                                       return_exceptions=True)
        link.abort()
        self._writers.discard(link.broker)
        self.stats.open -= 1
        if any(isinstance(r, OSError) for r in results):
            self.stats.resets += 1
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, OSError):
                raise result  # a transform's or sink's bug: the loop's exception handler reports it

    async def _pump(self, link: Link, direction: str, src: asyncio.StreamReader, transform: Transform,
                    sinks: tuple[Sink, ...]) -> None:
        dst, stats = link.writer(direction), self.stats
        try:
            while data := await src.read(CHUNK):
                transform.received(link, direction, data)  # written first: the sinks see a copy
                if direction == OUT:
                    stats.bytes_out += len(data)
                else:
                    stats.bytes_in += len(data)
                for sink in sinks:
                    sink(direction, data)
                await dst.drain()
            transform.ended(link, direction)
        except OSError:
            link.abort()  # a reset on one side resets the other
            raise


class RelayThread:
    """A `Relay` on its own event loop in a daemon thread, listening on a free loopback port:
    `with RelayThread(relay) as running: connect to running.port`. Every wait is bounded by `timeout`."""

    def __init__(self, relay: Relay, *, timeout: float = 5.0, name: str = "relay") -> None:
        self.relay, self.timeout = relay, timeout
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def start(self, port: int = 0) -> Self:
        """Listen on 127.0.0.1:`port` (0: a free one)."""
        self._thread.start()
        _, self.port = self.call(self.relay.start("127.0.0.1", port))
        return self

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the relay's loop; its result (within `timeout`)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.timeout)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self.call(self.relay.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(self.timeout)
        if not self._thread.is_alive():
            self.loop.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
