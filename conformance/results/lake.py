"""RecordingLake: recorded frames into the results lake, flushed incrementally.

Responsibility: give a recording (the relay's, or an imported capture's) a run in the results
lake: the run record (`runs/run=<id>/run.parquet`, client "recorded", the upstream URL without
password) and its frames in the existing frames schema (`conformance.results.records.SCHEMAS`),
as numbered part files under `frames/run=<id>/`.

Rules:
- Rows are buffered and written as a new part file at each `flush()` (the relay calls it every
  flush interval and when the buffer reaches `batch_rows`), atomically (temporary name, then
  rename): a crash loses at most what arrived since the last flush, and readers never see a
  half-written file.
- `take()` hands the buffered rows over and `write_part(rows)` writes them, so an event loop
  can swap the buffer itself and write in a worker thread.
- Every frame of a recording has the test id `test_id` (one recording = one "test"), so the
  audit sees all its connections together (a queue deleted on one connection, a consumer on
  another); `seq` counts frames across the recording.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from conformance.results.parts import write_atomically
from conformance.results.records import PARTITION_KEY, SCHEMAS, RunRecord, harness_version, redact_url

RECORDED = "recorded"


@dataclass
class RecordingLake:
    root: Path
    upstream: str
    run_id: str = field(default_factory=lambda: f"rec-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}")
    test_id: str = "recording"
    batch_rows: int = 20_000

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self._dir = self.root / "frames" / f"{PARTITION_KEY}={self.run_id}"
        self._rows: list[dict[str, Any]] = []
        self._parts = 0
        self._lock = threading.Lock()
        self._token = uuid.uuid4().hex[:8]
        self.seq = 0
        self.frames_written = 0
        self.record = RunRecord(self.run_id, redact_url(self.upstream), RECORDED, harness_version(), 1.0,
                                datetime.now(UTC))
        self.write_run()

    def write_run(self) -> None:
        path = self.root / "runs" / f"{PARTITION_KEY}={self.run_id}" / "run.parquet"
        write_atomically(pa.Table.from_pylist([vars(self.record)], schema=SCHEMAS["runs"]), path)

    def add(self, connection: int, direction: str, row: dict[str, Any], ts: float | None = None) -> None:
        """One frame record (`StreamTap` output) of `connection`, stamped now (or at `ts`, epoch s)."""
        row["run_id"], row["test_id"], row["connection"], row["seq"] = self.run_id, self.test_id, connection, self.seq
        row["direction"] = direction
        row["ts"] = round((time.time() if ts is None else ts) * 1_000_000)  # microseconds: the column's unit
        self.seq += 1
        self._rows.append(row)

    def add_all(self, connection: int, direction: str, rows: list[dict[str, Any]]) -> None:
        """Frame records that arrived together (one read): one clock reading for all."""
        now = round(time.time() * 1_000_000)
        run_id, test_id, seq = self.run_id, self.test_id, self.seq
        for row in rows:
            row["run_id"], row["test_id"], row["connection"], row["seq"] = run_id, test_id, connection, seq
            row["direction"], row["ts"] = direction, now
            seq += 1
        self.seq = seq
        self._rows.extend(rows)

    def __len__(self) -> int:
        return len(self._rows)

    def take(self) -> list[dict[str, Any]]:
        rows, self._rows = self._rows, []
        return rows

    def write_part(self, rows: list[dict[str, Any]]) -> None:
        """Write rows as the next part file (thread-safe: parts are numbered under a lock)."""
        if not rows:
            return
        table = pa.Table.from_pylist(rows, schema=SCHEMAS["frames"])
        with self._lock:
            part = self._parts
            self._parts += 1
        write_atomically(table, self._dir / f"part-{part:05d}-{self._token}.parquet")
        self.frames_written += len(rows)

    def flush(self) -> None:
        self.write_part(self.take())

    def close(self, exit_status: int = 0) -> None:
        self.flush()
        self.record.finished = datetime.now(UTC)
        self.record.exit_status = exit_status
        self.write_run()
