"""The trace audit's work inside a Spark task: frame tables in, violation tables out (no Spark).

Responsibility: what runs on the executors (and, for the `driver` plan, in this process): adapt
the model (`conformance.model.recorded_channel.observe_channel`) to pyarrow tables of frame
records. Compute each row's frame code with vectorised kernels, drop the rows the model ignores
(content headers, heartbeats, connection methods), order the rest by (run, test, connection,
channel, seq), cut them into channels and judge each with its connection's `Context`
(`reports.audit.context`: the broker's profile and capabilities, the client's
consumer_cancel_notify, queue deletions anywhere in the recording, mid-stream connections).
The bodies of the Spark plans (`reports.audit.plan`, the driver's side) are here: `audit_bins`
(a mapInArrow task of the shuffle-free plan: read whole run partitions, audit them one after the
other) and `audit_group` (one channel: the applyInArrow body of the grouped plan).

Rules:
- A channel is keyed by (run_id, test_id, connection, channel): connection ids are unique
  within a test, and a channel never spans tests or runs.
- Columns the results schema lacks (older lakes; see `OPTIONAL_COLUMNS`) turn their checks
  off; they are never invented.
- Output rows follow `reports.schema.VIOLATIONS`, ordered like the input channels.
- The functions shipped to the workers are module-level (importable by the Python workers).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from conformance.model.recorded_channel import observe_channel
from conformance.model.recorded_frames import (
    BODY_IN,
    DEFAULT_CONTEXT,
    GAP,
    PRIORITY_IN,
    RAW_OUT,
    Columns,
    Context,
    frame_code,
)
from reports.audit.context import CONTEXT_COLUMNS, ConnectionKey, recording_contexts
from reports.schema import VIOLATIONS

KEY_COLUMNS = ("run_id", "test_id", "connection", "channel")
AUDIT_COLUMNS = (*KEY_COLUMNS, "seq", "direction", "frame_type", "method", "delivery_tag", "multiple",
                 "requeue", "redelivered", "consumer_tag", "reply_code")
OPTIONAL_COLUMNS = ("prefetch_count", "no_ack", "global_qos", "body_digest", "queue", "ts", "reply_text", "nowait",
                    "priority",
                    *(c for c in CONTEXT_COLUMNS if c not in ("ts", "queue", "nowait")))
_COLUMN_KINDS = {"prefetch_count": "sparse", "no_ack": "sparse", "global_qos": "sparse", "body_digest": "str",
                 "queue": "sparse", "ts": "ts", "reply_text": "sparse", "nowait": "sparse",
                 "priority": "sparse"}  # sparse: read on a few frame kinds only (qos, consume, get, close...)

DICTIONARY_COLUMNS = ("run_id", "test_id", "direction", "frame_type", "method", "queue", "reply_text", "product",
                      "version", "emulates", "queue_type")  # few distinct values (or mostly null): read as indices
_PARQUET = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=DICTIONARY_COLUMNS))
_TAKEN = frozenset(Columns._fields[2:])  # what the observer reads per row (codes and seq come as numpy)


def input_columns(schema: pa.Schema) -> list[str]:
    """The columns the audit reads from a frames table with this schema."""
    return [*AUDIT_COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in schema.names)]


def frame_codes(table: pa.Table) -> np.ndarray:
    """Each row's frame code (`conformance.model.recorded_frames.frame_code`), -1 where the audit ignores it."""
    method = _Dictionary(table["method"])
    code_in = np.array([_code("in", m) for m in method.names] + [-1], dtype=np.int16)
    code_out = np.array([_code("out", m) for m in method.names] + [-1], dtype=np.int16)
    incoming = _Dictionary(table["direction"]).equal("in")
    codes: np.ndarray = np.where(incoming, code_in[method.indices], code_out[method.indices])
    frame_type = _Dictionary(table["frame_type"])
    codes[frame_type.equal("raw") & ~incoming] = RAW_OUT  # opaque client bytes (recorded_frames.RAW_OUT)
    codes[frame_type.equal("gap")] = GAP  # undecodable: the rest of the channel is not judged
    if "body_digest" in table.column_names:  # message identity comes from the first body frame
        codes[frame_type.equal("body") & incoming] = BODY_IN
    if "priority" in table.column_names:  # only headers with a priority matter (RQ-01 order)
        priority = pc.greater(table["priority"], 0).fill_null(False).to_numpy(zero_copy_only=False)
        codes[frame_type.equal("header") & priority & incoming] = PRIORITY_IN
    return codes


def _code(direction: str, method: str | None) -> int:
    code = frame_code(direction, "method", method) if method is not None else None
    return -1 if code is None else code


def audit_table(frames: pa.Table, contexts: Mapping[ConnectionKey, Context] | None = None) -> pa.Table:
    """Audit every channel of a frames table (any row order); one row per finding.

    `contexts`: each connection's context; by default computed from `frames` itself (which
    then must hold whole recordings: a run or a test with all its connections)."""
    if contexts is None:
        contexts = recording_contexts(frames)
    codes = frame_codes(frames)
    keep = np.flatnonzero(codes >= 0)
    if len(keep) == 0:
        return VIOLATIONS.empty_table()
    # the sort keys of the kept rows as numpy; the table is taken once: the kept rows, in order
    run, test = _Dictionary(frames["run_id"]), _Dictionary(frames["test_id"])
    conn, chan, seq = (_ints(frames[name])[keep] for name in ("connection", "channel", "seq"))
    runs, tests = run.indices[keep], test.indices[keep]
    order = np.lexsort((seq, chan, conn, tests, runs))
    keys = (runs[order], tests[order], conn[order], chan[order])
    change = np.zeros(len(order), dtype=bool)
    change[0] = True
    for key in keys:
        change[1:] |= key[1:] != key[:-1]
    starts = np.flatnonzero(change).tolist()
    rows = keep[order]
    taken = frames.select([n for n in frames.column_names if n in _TAKEN]).take(rows)  # the observer's columns
    cols = _columns(taken, codes[rows], seq[order])
    return _findings_table(cols, starts, keys, run.names, test.names, contexts)


class _Dictionary:
    """A string column as numpy indices into its distinct values (`names`); a null is
    `len(names)`. Free for a dictionary column (`read_run_frames`)."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        encoded = pc.dictionary_encode(column).combine_chunks()
        self.names: list[str] = encoded.dictionary.to_pylist()
        self.indices: np.ndarray = encoded.indices.fill_null(len(self.names)).to_numpy()

    def equal(self, value: str) -> np.ndarray:
        """Where the column holds `value` (null: False), as numpy booleans."""
        found: np.ndarray = np.array([n == value for n in self.names] + [False])[self.indices]
        return found


def _ints(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(column, 0).to_numpy())


def _columns(table: pa.Table, codes: np.ndarray, seq: np.ndarray) -> Columns:
    def ints(name: str) -> list[int]:
        return pc.fill_null(table[name], 0).to_numpy().tolist()  # type: ignore[no-any-return]

    def flags(name: str) -> list[bool]:
        return pc.fill_null(table[name], False).to_numpy(zero_copy_only=False).tolist()  # type: ignore[no-any-return]

    def sparse(name: str) -> Any:  # a {row: value} dict read like a list: most rows are null
        return _Sparse(table[name])

    def optional(name: str) -> Any:
        if name not in table.column_names:
            return None
        kind = _COLUMN_KINDS[name]
        if kind == "ts":  # read a few times per channel: numpy, not a list of a million ints
            return pc.fill_null(table[name].cast(pa.int64()), 0).to_numpy()
        return sparse(name) if kind == "sparse" else table[name].to_pylist()

    return Columns(codes.tolist(), seq.tolist(), ints("delivery_tag"), flags("multiple"), sparse("requeue"),
                   flags("redelivered"), table["consumer_tag"].to_pylist(), ints("reply_code"),
                   *(optional(name) for name in Columns._fields[8:]))


class _Sparse(dict[int, Any]):
    """A mostly-null column as {row: value}; absent rows read as None (e.g. reply_text)."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        rows = np.flatnonzero(pc.is_valid(column).to_numpy(zero_copy_only=False))
        super().__init__(zip(rows.tolist(), column.take(pa.array(rows)).to_pylist(), strict=True))

    def __missing__(self, key: int) -> None:
        return None


def _findings_table(cols: Columns, starts: list[int], keys: tuple[np.ndarray, ...],
                    runs: list[str], tests: list[str], contexts: Mapping[ConnectionKey, Context]) -> pa.Table:
    rows: dict[str, list[object]] = {name: [] for name in VIOLATIONS.names}
    bounds = [*starts, len(cols.code)]
    for start, stop in pairwise(bounds):
        key = (runs[keys[0][start]], tests[keys[1][start]], int(keys[2][start]), int(keys[3][start]))
        context = contexts.get(key[:3], DEFAULT_CONTEXT) if contexts else DEFAULT_CONTEXT
        findings = observe_channel(cols, start, stop, context)
        if not findings:
            continue
        for f in findings:
            for name, value in zip(VIOLATIONS.names, (*key, f.seq, f.kind, f.rule_id, f.severity, f.detail),
                                   strict=True):
                rows[name].append(value)
    return pa.table(rows, schema=VIOLATIONS)


# --- one channel (a Spark group) ----------------------------------------------------------

_CODES: dict[tuple[str | None, str | None, str | None, bool], int | None] = {}
_EMPTY = VIOLATIONS.empty_table()


def audit_group(frames: pa.Table, contexts: Mapping[ConnectionKey, Context] | None = None) -> pa.Table:
    """Audit a table holding exactly one channel's frames (any order): the applyInArrow body.

    `contexts` come from the whole recording (`reports.audit.context`); without them the
    channel is judged with the default context. Plain Python lists throughout: for a group of
    a few hundred rows the vectorised path of `audit_table` costs more than it saves.
    """
    if frames.num_rows == 0:
        return _EMPTY
    data = {name: frames.column(name).to_pylist() for name in input_columns(frames.schema)}
    if "ts" in data:
        data["ts"] = frames.column("ts").cast(pa.int64()).fill_null(0).to_pylist()
    order = sorted(range(frames.num_rows), key=data["seq"].__getitem__)
    priority = data.get("priority")
    codes = [_cached_code(data["direction"][i], data["frame_type"][i], data["method"][i],
                          priority[i] if priority is not None else None) for i in order]
    kept = [i for i, code in zip(order, codes, strict=True) if code is not None]
    if not kept:
        return _EMPTY

    def column(name: str) -> list[Any] | None:
        values = data.get(name)
        return None if values is None else [values[i] for i in kept]

    def required(name: str) -> list[Any]:
        return [data[name][i] for i in kept]

    cols = Columns([c for c in codes if c is not None], *(required(n) for n in Columns._fields[1:8]),
                   *(column(n) for n in Columns._fields[8:]))
    key = tuple(data[name][0] for name in KEY_COLUMNS)
    context = (contexts or {}).get((key[0], key[1], key[2]), DEFAULT_CONTEXT)
    findings = observe_channel(cols, context=context)
    if not findings:
        return _EMPTY
    rows = [(*key, f.seq, f.kind, f.rule_id, f.severity, f.detail) for f in findings]
    return pa.Table.from_pylist([dict(zip(VIOLATIONS.names, row, strict=True)) for row in rows], schema=VIOLATIONS)


def _cached_code(direction: str | None, frame_type: str | None, method: str | None, priority: int | None) -> int | None:
    key = (direction, frame_type, method, bool(priority))
    if key not in _CODES:
        _CODES[key] = frame_code(direction, frame_type, method, 1 if priority else None)
    return _CODES[key]


# --- run partitions (a mapInArrow task of the shuffle-free plan) --------------------------


def read_run_frames(directory: str, *, use_threads: bool = True) -> pa.Table:
    """The audit's columns of one run partition directory (its part files, any number).

    The few-valued strings (`DICTIONARY_COLUMNS`) come as dictionary arrays, one dictionary
    per column: the audit reads their indices, never the strings of every row."""
    fs, path = pafs.FileSystem.from_uri(directory)
    dataset = ds.dataset(path, filesystem=fs, format=_PARQUET)  # one writer per run: one schema
    table = dataset.to_table(columns=input_columns(dataset.schema), use_threads=use_threads)
    return table.unify_dictionaries()


def audit_runs(directories: list[str], *, use_threads: bool = True) -> Iterator[pa.Table]:
    """Audit run partitions one after the other (memory bounded by the largest run)."""
    for directory in directories:
        yield audit_table(read_run_frames(directory, use_threads=use_threads))


def audit_bins(batches: Iterator[pa.RecordBatch], use_threads: bool = True) -> Iterator[pa.RecordBatch]:
    """The mapInArrow body: each row names the run partition directories of one bin."""
    for batch in batches:
        for directories in batch.column("directories").to_pylist():
            for table in audit_runs(directories, use_threads=use_threads):
                yield from table.to_batches()
