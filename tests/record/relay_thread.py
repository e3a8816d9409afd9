"""A RecordingRelay on its own event loop in a thread, for tests and the relay benchmark."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from conformance.record.relay import RecordingRelay
from conformance.results.lake import RecordingLake


class RelayThread:
    """Start with `with RelayThread(out, host, port) as relay:`; `relay.port` accepts clients."""

    def __init__(self, out: Path, upstream_host: str, upstream_port: int, flush_interval: float = 0.5) -> None:
        self.lake = RecordingLake(out, f"amqp://{upstream_host}:{upstream_port}")
        self.loop = asyncio.new_event_loop()
        self.relay = RecordingRelay(self.lake, upstream_host, upstream_port, flush_interval=flush_interval)
        self.thread = threading.Thread(target=self.loop.run_forever, name="recording-relay", daemon=True)
        self.port = 0

    def __enter__(self) -> RelayThread:
        self.thread.start()
        _, self.port = asyncio.run_coroutine_threadsafe(self.relay.start("127.0.0.1", 0), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self.thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.relay.close(), self.loop).result(30)
        self.lake.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
