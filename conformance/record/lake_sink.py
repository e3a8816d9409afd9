"""LakeSink: the traffic recorder's interposer, frame records of every relayed link into a results lake.

Responsibility: give each link of the relay (`conformance.interpose.relay.Relay`) one `StreamTap`
per direction as its sink; their frame records go to a `RecordingLake`, flushed every
`flush_interval` seconds (and whenever `batch_rows` rows are buffered) by a background task that
writes in a worker thread. Bytes are forwarded unchanged both ways (the relay's default transform).

Rules:
- The relay forwards first and the taps see a copy: recording never alters, delays for
  decoding, reorders or injects a byte.
- The flusher runs from the relay's start to its close; at close every buffered row is written.
"""

from __future__ import annotations

import asyncio
import contextlib

from conformance.interpose.relay import IN, OUT, Interposer, Link, Plumbing
from conformance.interpose.tap import StreamTap
from conformance.results.lake import RecordingLake


class LakeSink(Interposer):
    """`Relay((host, port), LakeSink(lake))`: every relayed frame recorded in `lake`."""

    def __init__(self, lake: RecordingLake, flush_interval: float = 1.0) -> None:
        self.lake, self.flush_interval = lake, flush_interval
        self._flusher: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def plumb(self, link: Link) -> Plumbing:
        taps = {OUT: StreamTap(OUT, client_side=True), IN: StreamTap(IN, client_side=False)}
        lake, number = self.lake, link.number

        def record(direction: str, data: bytes) -> None:
            if rows := taps[direction].feed(data):
                lake.add_all(number, direction, rows)
                if len(lake) >= lake.batch_rows:
                    self._wake.set()

        return Plumbing(sinks=(record,))

    async def started(self) -> None:
        self._flusher = asyncio.create_task(self._flush_loop())

    async def closed(self) -> None:
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
