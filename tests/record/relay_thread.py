"""The traffic recorder (the relay with a `LakeSink`) on its own event loop in a thread, for tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from conformance.interpose.relay import Relay, RelayThread
from conformance.record.lake_sink import LakeSink
from conformance.results.lake import RecordingLake


@contextlib.contextmanager
def lake_relay(out: Path, upstream_host: str, upstream_port: int, flush_interval: float = 0.5) -> Iterator[RelayThread]:
    """`with lake_relay(out, host, port) as relay:` clients connect to `relay.port`; frames land in `out`."""
    lake = RecordingLake(out, f"amqp://{upstream_host}:{upstream_port}")
    relay = Relay((upstream_host, upstream_port), LakeSink(lake, flush_interval), close_timeout=20)
    try:
        with RelayThread(relay, timeout=30, name="recording-relay") as running:
            yield running
    finally:
        lake.close()
