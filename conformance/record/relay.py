"""RecordingRelay: a transparent TCP relay between AMQP clients and a broker that records frames.

Responsibility: accept client connections, open one upstream connection per client, forward
bytes both ways unchanged, and show each direction's bytes to a `StreamTap` whose frame
records go to a `RecordingLake`, flushed every `flush_interval` seconds (and whenever
`batch_rows` rows are buffered) by a background task that writes in a worker thread.

Rules (a thin asyncio transport; decoding is the sans-IO tap's):
- Bytes are written downstream before the tap sees them; the relay never alters, delays for
  decoding, reorders or injects a byte.
- Backpressure: a direction reads its next chunk only after the previous one drained, so
  memory per connection is bounded by one read (`CHUNK`) plus the tap's partial frame.
- Either side ending cleanly (EOF) is passed on as EOF (half-close); either side resetting
  (or any socket error) aborts both sockets of that connection; the relay keeps serving others.
- An upstream that refuses the connection: the client's socket is closed at once, and the
  refusal is counted (`refused`).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from conformance.record.tap import StreamTap
from conformance.results.lake import RecordingLake

CHUNK = 256 * 1024


@dataclass
class RelayStats:
    connections: int = 0
    open: int = 0
    refused: int = 0
    resets: int = 0
    bytes_out: int = 0
    bytes_in: int = 0


@dataclass
class RecordingRelay:
    lake: RecordingLake
    upstream_host: str
    upstream_port: int
    flush_interval: float = 1.0
    stats: RelayStats = field(default_factory=RelayStats)

    def __post_init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (0: a free port); returns the address bound."""
        self._server = await asyncio.start_server(self._client, host, port)
        self._flusher = asyncio.create_task(self._flush_loop())
        address = self._server.sockets[0].getsockname()
        return address[0], address[1]

    async def close(self) -> None:
        """Stop listening, end open connections, write everything buffered."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()  # the pumps see the end and the connection tasks finish
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await asyncio.to_thread(self.lake.flush)

    async def _flush_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.flush_interval)
            self._wake.clear()
            rows = self.lake.take()
            if rows:
                await asyncio.to_thread(self.lake.write_part, rows)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.stats.connections += 1
        connection = self.stats.connections
        try:
            try:
                up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
            except OSError:
                self.stats.refused += 1
                writer.transport.abort()
                return
            self._writers.add(up_writer)
            self.stats.open += 1
            out = StreamTap("out", client_side=True)
            inn = StreamTap("in", client_side=False)
            pumps = (self._pump(reader, up_writer, out, connection), self._pump(up_reader, writer, inn, connection))
            results = await asyncio.gather(*pumps, return_exceptions=True)
            if any(isinstance(r, BaseException) for r in results):
                self.stats.resets += 1
            for w in (writer, up_writer):
                w.transport.abort()
                self._writers.discard(w)
            self.stats.open -= 1
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, tap: StreamTap,
                    connection: int) -> None:
        lake, counter = self.lake, "bytes_out" if tap.direction == "out" else "bytes_in"
        try:
            while data := await src.read(CHUNK):
                dst.write(data)  # forward first: the tap only ever sees a copy
                setattr(self.stats, counter, getattr(self.stats, counter) + len(data))
                if rows := tap.feed(data):
                    lake.add_all(connection, tap.direction, rows)
                if len(lake) >= lake.batch_rows:
                    self._wake.set()
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()  # a clean end is passed on as a half-close
        except (ConnectionError, OSError):
            dst.transport.abort()  # a reset on one side resets the other
            raise
