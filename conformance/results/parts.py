"""Results files (docs/design.md decision 7): a run's records written as Parquet part files, read back.

Responsibility: write the records of `conformance.results.records` into a results directory
and read a table of it back.

Rules:
- Layout: ``<dir>/<table>/run=<run_id>/part-<n>-<writer>.parquet`` (hive partitioning by
  run; the runs table holds one ``run.parquet``). A run writes only under its own
  ``run=<id>`` directories. Files are written under a dot-name and renamed, so readers never
  see a half-written file; readers (pyarrow's dataset discovery, Spark) skip dot-files.
- Rows are kept as JSON lines (nulls left out, timestamps in ISO 8601) and turned into a table
  by Arrow's own JSON reader under the table's schema: `pa.Table.from_pylist` would import
  pandas on its first call, about 0.3 CPU-s in every process that writes.
- Memory is bounded: rows are flushed every `batch_rows` rows and when the writer closes.
- A staged writer (a pytest-xdist worker's) flushes its rows to a dot-file of JSON lines in the
  same directory (``.part-<writer>.jsonl``) and never imports Arrow (nor numpy: about 0.16 CPU-s
  of every worker's start); whoever ran the workers turns a run's staged files into part files
  (`publish_staged`) once they are done. A line cut short (a worker killed while writing) is
  left out; the rest of its file is kept.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.results.observations import FrameRecord
from conformance.results.records import (
    PARTITION_KEY,
    TABLES,
    RunRecord,
    TestRecord,
    frame_rows,
    json_line,
    schemas,
)

if TYPE_CHECKING:
    import pyarrow as pa

STAGED_PREFIX = ".part-"
STAGED_SUFFIX = ".jsonl"


class _PartBuffer:
    """Rows of one table, kept as JSON lines and flushed to numbered part files under the run's
    partition directory (or, staged, appended to the writer's one file of JSON lines there)."""

    def __init__(self, directory: Path, table: str, staged: bool) -> None:
        self.directory, self.table, self.staged = directory, table, staged
        self.rows: list[bytes] = []
        self.parts = 0
        self.token = uuid.uuid4().hex[:8]  # two writers of one run (e.g. workers) never clash

    def add(self, row: Mapping[str, Any]) -> None:
        self.rows.append(json_line(row))

    def flush(self) -> None:
        if not self.rows:
            return
        if self.staged:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.directory / f"{STAGED_PREFIX}{self.token}{STAGED_SUFFIX}", "ab") as staged:
                staged.write(b"".join(self.rows))
        else:
            write_atomically(table_from_json_lines(self.rows, schemas()[self.table]),
                             self.directory / f"part-{self.parts:05d}-{self.token}.parquet")
            self.parts += 1
        self.rows = []


def table_from_json_lines(lines: Sequence[bytes], schema: pa.Schema) -> pa.Table:
    """The rows as a table of `schema`, through Arrow's own JSON reader (see the module rules)."""
    import pyarrow as pa
    import pyarrow.json as pj

    data = b"".join(lines)
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
    read = pj.ReadOptions(use_threads=False, block_size=max(len(data) + 1, 1 << 20))  # one block: any row fits
    table = pj.read_json(pa.BufferReader(data), read_options=read, parse_options=options)
    return table.select(schema.names).cast(schema)


def write_atomically(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, temporary)
    os.replace(temporary, path)


@dataclass
class ResultsWriter:
    """Writes one run's records under `root`; `close()` flushes everything left. `staged`: see the
    module rules."""

    root: Path
    run_id: str
    batch_rows: int = 50_000
    wall_offset: float = field(default_factory=lambda: time.time() - time.monotonic())
    staged: bool = False

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        partition = f"{PARTITION_KEY}={self.run_id}"
        self._tests = _PartBuffer(self.root / "tests" / partition, "tests", self.staged)
        self._frames = _PartBuffer(self.root / "frames" / partition, "frames", self.staged)
        self._run_path = self.root / "runs" / partition / "run.parquet"
        self.tests_written = 0

    def write_run(self, record: RunRecord) -> None:
        """Write (or rewrite) the run record: once at the start, again with `finished`."""
        write_atomically(table_from_json_lines([json_line(asdict(record))], schemas()["runs"]), self._run_path)

    def add_test(self, record: TestRecord, frames: Sequence[FrameRecord] = ()) -> None:
        record.frames = len(frames)
        self._tests.add(asdict(record))
        self.tests_written += 1
        for row in frame_rows(self.run_id, record.test_id, frames, self.wall_offset):
            self._frames.add(row)
        if len(self._frames.rows) >= self.batch_rows:
            self._frames.flush()
        if len(self._tests.rows) >= self.batch_rows:
            self._tests.flush()

    def close(self) -> None:
        self._tests.flush()
        self._frames.flush()


def publish_staged(root: Path | str, run_id: str) -> int:
    """Turn the staged files of `run_id` (every staged writer's) into part files; the rows published."""
    published = 0
    for table in ("tests", "frames"):
        directory = Path(root) / table / f"{PARTITION_KEY}={run_id}"
        for staged in sorted(directory.glob(f"{STAGED_PREFIX}*{STAGED_SUFFIX}")):
            data = staged.read_bytes()
            whole = data[:data.rfind(b"\n") + 1]  # a line cut short is left out
            if whole:
                token = staged.name[len(STAGED_PREFIX):-len(STAGED_SUFFIX)]
                write_atomically(table_from_json_lines([whole], schemas()[table]),
                                 directory / f"part-00000-{token}.parquet")
                published += whole.count(b"\n")
            staged.unlink()
    return published


def read_table(root: Path | str, table: str, run_id: str | None = None) -> pa.Table:
    """One table of a results directory (all runs, or one), with the `run` partition column."""
    if table not in TABLES:
        raise ValueError(f"unknown results table {table!r} (one of: {', '.join(TABLES)})")
    import pyarrow as pa
    import pyarrow.dataset as ds  # here, not at the top: it imports pandas, ~0.25 s of every run's start-up

    partitioning = ds.partitioning(pa.schema([(PARTITION_KEY, pa.string())]), flavor="hive")
    schema = schemas()[table].append(pa.field(PARTITION_KEY, pa.string()))
    dataset = ds.dataset(Path(root) / table, format="parquet", partitioning=partitioning, schema=schema)
    expression = ds.field(PARTITION_KEY) == run_id if run_id is not None else None
    return dataset.to_table(filter=expression)
