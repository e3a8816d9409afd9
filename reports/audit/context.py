"""What the audit knows of each recorded connection and of the recording around it.

Responsibility: from the few frame records that describe a recording (connection.start and
start-ok, queue.delete and its answer, basic.consume, recorder gaps) build each connection's
`conformance.model.recorded_frames.Context`:
- the broker's profile (`conformance.catalogue.profiles.detect` over the product, version and
  `emulates` claim of its connection.start) plus the capabilities it advertises
  (`recorded_traits`, docs/design.md 11);
- whether the client advertised consumer_cancel_notify (CCN-01), and the broker too; unknown
  (and what depends on it counted as not judged) when the start-ok's capabilities were not
  recorded, as in lakes written before the `capabilities` column;
- every queue.delete of the recording that the broker did not refuse, on any connection, with
  whether it was answered (CCN-02), and how many consumers each queue had;
- how many channels read (consume from or get from) each queue in the recording (RQ-01/02:
  the order of a queue with one reader is the queue's alone), and each queue's declared type;
- `judged` False for a connection recorded mid-stream: the recorder wrote a `gap` row on
  channel -1 (the connection itself) for bytes it could not frame;
- `connection_closed` when a connection.close (either side) was recorded: its channels ended
  there, and the confirms still pending died with them (PC-13).

Rules: works on any frames table holding whole recordings (a run, or one test with all its
connections); the rows it reads are a small subset, selected with vectorised filters first.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from conformance.catalogue.profiles import detect
from conformance.model.recorded_frames import Context, Deletion, recorded_traits

ConnectionKey = tuple[str, str, int]  # (run_id, test_id, connection)
CONTEXT_COLUMNS = ("ts", "queue", "product", "version", "emulates", "capabilities", "nowait", "queue_type")
_ALWAYS = ("connection.start", "connection.start-ok", "queue.delete", "queue.declare", "connection.close")
_WITH_DELETIONS = ("queue.delete-ok", "channel.close", "basic.consume")  # only read when a queue.delete is there
_READERS = ("basic.consume", "basic.get")  # who reads each queue (RQ-01/02 order), counted vectorised
CONTEXT_METHODS = (*_ALWAYS, *_WITH_DELETIONS, "basic.get")


def context_rows(frames: pa.Table) -> pa.Table:
    """The rows `recording_contexts` reads (a small subset of any frames table), in key order."""
    method = frames["method"]
    wanted = pc.is_in(method, pa.array(_ALWAYS))
    if "frame_type" in frames.column_names:
        gap = pc.and_(pc.equal(frames["frame_type"], "gap"), pc.equal(frames["channel"], -1))
        wanted = pc.or_(wanted, gap)
    if pc.any(pc.equal(method, "queue.delete")).as_py():
        wanted = pc.or_(wanted, pc.is_in(method, pa.array(_WITH_DELETIONS)))
    names = ["run_id", "test_id", "connection", "channel", "seq", "direction", "frame_type", "method",
             *(c for c in CONTEXT_COLUMNS if c in frames.column_names)]
    rows = frames.filter(pc.fill_null(wanted, False)).select(names)
    rows = rows.cast(pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
                                for f in rows.schema]))  # a few rows: plain strings sort
    return rows.sort_by([(k, "ascending") for k in ("run_id", "test_id", "connection", "channel", "seq")])


def recording_contexts(frames: pa.Table) -> dict[ConnectionKey, Context]:
    """Each connection's context, for every connection of `frames` that has anything to say."""
    rows = context_rows(frames)
    if rows.num_rows == 0:
        return {}
    ends, readers = _recording_ends(frames), _readers(frames)
    if "ts" in rows.column_names:
        rows = rows.set_column(rows.column_names.index("ts"), "ts", rows["ts"].cast(pa.int64()))
    ordered = rows.to_pylist()
    per_recording: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in ordered:
        per_recording[row["run_id"], row["test_id"]].append(row)
    contexts: dict[ConnectionKey, Context] = {}
    for (run, test), recording in per_recording.items():
        deletions, consumers = _deletions(recording), Counter(
            r.get("queue") for r in recording if r["method"] == "basic.consume" and r["direction"] == "out")
        for connection, context in _connections(recording, deletions, dict(consumers)).items():
            contexts[run, test, connection] = replace(context, recording_end=ends.get((run, test), 0),
                                                      readers=readers.get((run, test), {}),
                                                      queue_types=_queue_types(recording, context))
    return contexts


def _queue_types(rows: list[dict[str, Any]], context: Context) -> dict[str, str]:
    """Each queue's type as declared in the recording (x-queue-type; without it a classic queue
    on RabbitMQ 3.10, which has no default queue type setting). Declarations that disagree, or
    a type the recording cannot tell, leave the queue out."""
    found: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        if row["method"] == "queue.declare" and row["direction"] == "out" and row.get("queue"):
            kind = row.get("queue_type")
            if kind is None:
                continue  # passive, or a lake without the column
            if not kind and context.traits is not None and context.traits.profile == "rabbitmq-3.10":
                kind = "classic"
            found[row["queue"]].add(kind or "?")
    return {queue: kinds.pop() for queue, kinds in found.items() if len(kinds) == 1 and "?" not in kinds}


def _readers(frames: pa.Table) -> dict[tuple[str, str], dict[str, int]]:
    """Per recording: how many channels consume from or get from each queue."""
    if "queue" not in frames.column_names:
        return {}
    wanted = pc.and_(pc.equal(frames["direction"], "out"), pc.is_in(frames["method"], pa.array(_READERS)))
    rows = frames.filter(pc.fill_null(wanted, False))
    channel = pc.add(pc.multiply(rows["connection"].cast(pa.int64()), 1 << 20), rows["channel"].cast(pa.int64()))
    table = pa.table({"run_id": rows["run_id"], "test_id": rows["test_id"], "queue": rows["queue"], "ch": channel})
    counts = table.group_by(["run_id", "test_id", "queue"]).aggregate([("ch", "count_distinct")])
    found: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for r in counts.to_pylist():
        if r["queue"]:
            found[r["run_id"], r["test_id"]][r["queue"]] = r["ch_count_distinct"]
    return dict(found)


def _recording_ends(frames: pa.Table) -> dict[tuple[str, str], int]:
    """The last frame's time (microseconds) of each recording."""
    if "ts" not in frames.column_names:
        return {}
    table = frames.select(["run_id", "test_id"]).append_column("us", frames["ts"].cast(pa.int64()))
    ends = table.group_by(["run_id", "test_id"]).aggregate([("us", "max")])
    return {(r["run_id"], r["test_id"]): r["us_max"] or 0 for r in ends.to_pylist()}


def _deletions(rows: list[dict[str, Any]]) -> dict[str, list[Deletion]]:
    """queue.delete requests the broker did not refuse (no channel.close answered them); a
    nowait=true delete owes no answer, so it counts as answered unless a close refused it."""
    found: dict[str, list[Deletion]] = defaultdict(list)
    for n, row in enumerate(rows):
        if row["method"] != "queue.delete" or row["direction"] != "out" or not row.get("queue"):
            continue
        answer = next((r for r in rows[n + 1:] if r["connection"] == row["connection"]
                       and r["channel"] == row["channel"] and r["direction"] == "in"
                       and r["method"] in ("queue.delete-ok", "channel.close")), None)
        if answer is None or answer["method"] == "queue.delete-ok":
            answered = answer is not None or row.get("nowait") is True
            found[row["queue"]].append(Deletion(row["queue"], row.get("ts") or 0, answered))
    return dict(found)


def _connections(rows: list[dict[str, Any]], deletions: dict[str, list[Deletion]],
                 consumers: dict[Any, int]) -> dict[int, Context]:
    server: dict[int, dict[str, Any]] = {}
    client: dict[int, list[str] | None] = {}
    mid_stream: set[int] = set()
    connections: set[int] = set()
    closed: set[int] = set()
    for row in rows:
        connection = row["connection"]
        connections.add(connection)
        if row["frame_type"] == "gap":
            mid_stream.add(connection)
        elif row["method"] == "connection.close":
            closed.add(connection)
        elif row["method"] == "connection.start" and row["direction"] == "in":
            server[connection] = row
        elif row["method"] == "connection.start-ok" and row["direction"] == "out":
            client[connection] = row.get("capabilities")  # None: not recorded (an older lake)
    contexts = {}
    for connection in connections:
        start = server.get(connection)
        server_caps = list(start.get("capabilities") or []) if start else []
        traits = None
        # a lake written before the emulates column cannot tell a broker that emulates RabbitMQ
        # from a plain 0-9-1 one: only RabbitMQ itself is identified there
        identified = start is not None and ("emulates" in start or str(start.get("product")).lower() == "rabbitmq")
        if start is not None and identified:
            profile = detect({"product": start.get("product") or "", "version": start.get("version") or "",
                              "emulates": start.get("emulates") or ""})
            traits = recorded_traits(profile, server_caps)
        notify, unknown = None, "no connection.start-ok recorded"
        if (capabilities := client.get(connection)) is not None:
            notify = "consumer_cancel_notify" in capabilities and (
                start is None or "consumer_cancel_notify" in server_caps)
        elif connection in client:
            unknown = "the lake has no capabilities column: written before it existed"
        contexts[connection] = Context(traits, notify, unknown, deletions, {q: n for q, n in consumers.items() if q},
                                       judged=connection not in mid_stream, connection_closed=connection in closed)
    return contexts
