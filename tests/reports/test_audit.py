"""The per-channel trace audit as plain Python (no JVM): examples per finding, and properties.

Properties: every trace of a correct broker (`channel_sim`) audits clean; one mutation of such
a trace gives the finding it stands for; the Arrow adapter agrees with the plain checker.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.model.recorded_frames import Context, Finding
from conformance.results.records import PARTITION_KEY, SCHEMAS
from reports.audit.channel import ChannelFrame, audit_channel
from reports.audit.lake import audit_lake
from reports.audit.partition import audit_group, audit_table
from tests.reports.channel_sim import CONFIRMS, REQUEUE, ChannelSim, steps, valid_traces

F = ChannelFrame
S = 1_000_000  # one second in microseconds


def kinds(findings: list[Finding]) -> list[str]:
    return [f.kind for f in findings]


def renumber(frames: list[ChannelFrame]) -> list[ChannelFrame]:
    return [f._replace(seq=i) for i, f in enumerate(frames)]


def deliver(tag: int, ctag: str = "c1", redelivered: bool = False) -> ChannelFrame:
    return F(0, "in", "basic.deliver", delivery_tag=tag, consumer_tag=ctag, redelivered=redelivered)


OPEN = [F(0, "out", "channel.open"), F(0, "in", "channel.open-ok")]
CONSUME = [F(0, "out", "basic.consume", consumer_tag="c1"), F(0, "in", "basic.consume-ok", consumer_tag="c1")]


# --- examples --------------------------------------------------------------------------------


def test_audit_tags_count_from_one_per_channel_lifetime() -> None:
    frames = renumber([*OPEN, *CONSUME, deliver(1), deliver(2), deliver(4), deliver(5),
                       F(0, "out", "channel.close"), F(0, "in", "channel.close-ok"), *OPEN, *CONSUME, deliver(1)])
    found = audit_channel(frames)
    assert kinds(found) == ["tag-sequence"]
    assert found[0].seq == 6 and found[0].detail == "delivery tag 4, expected 3" and found[0].rule_id == "ACK-01"


def test_audit_get_ok_shares_the_tag_counter() -> None:
    frames = renumber([*OPEN, *CONSUME, deliver(1), F(0, "out", "basic.get"),
                       F(0, "in", "basic.get-ok", delivery_tag=1)])
    assert kinds(audit_channel(frames)) == ["tag-sequence"]


def test_audit_unknown_tag_answered_by_406_is_clean() -> None:
    frames = renumber([*OPEN, *CONSUME, deliver(1), F(0, "out", "basic.ack", delivery_tag=7),
                       F(0, "in", "channel.close", reply_code=406), F(0, "out", "channel.close-ok")])
    assert audit_channel(frames) == []


def test_audit_double_ack_the_broker_accepts_is_an_error() -> None:
    frames = renumber([*OPEN, *CONSUME, deliver(1), F(0, "out", "basic.ack", delivery_tag=1),
                       F(0, "out", "basic.ack", delivery_tag=1), F(0, "out", "basic.qos", prefetch_count=1),
                       F(0, "in", "basic.qos-ok")])
    found = audit_channel(frames)
    assert [(f.kind, f.severity, f.rule_id) for f in found] == [("ack-settled-tag", "error", "ACK-04")]
    assert "kept the channel open" in found[0].detail


def test_audit_wrong_close_code_and_unanswered_error() -> None:
    wrong = renumber([*OPEN, F(0, "out", "basic.ack", delivery_tag=3), F(0, "in", "channel.close", reply_code=404)])
    assert [(f.kind, f.severity) for f in audit_channel(wrong)] == [("ack-unknown-tag", "error")]
    silent = renumber([*OPEN, F(0, "out", "basic.reject", delivery_tag=0, requeue=True)])
    assert [(f.kind, f.severity) for f in audit_channel(silent)] == [("ack-unknown-tag", "warning")]
    closed_ok = renumber([*OPEN, F(0, "out", "basic.ack", delivery_tag=2), F(0, "out", "channel.close"),
                          F(0, "in", "channel.close-ok")])
    assert [(f.kind, f.severity) for f in audit_channel(closed_ok)] == [("ack-unknown-tag", "error")]


def test_audit_multiple_ack_needs_the_named_tag_outstanding() -> None:
    frames = renumber([*OPEN, *CONSUME, deliver(1), deliver(2), F(0, "out", "basic.ack", delivery_tag=5, multiple=True),
                       F(0, "out", "basic.get"), F(0, "in", "basic.get-empty")])
    assert kinds(audit_channel(frames)) == ["multi-ack-beyond"]
    zero = renumber([*OPEN, F(0, "out", "basic.ack", delivery_tag=0, multiple=True)])  # ACK-06: fine
    assert audit_channel(zero) == []


def test_audit_confirms_unpublished_duplicate_and_missing() -> None:
    publish = F(0, "out", "basic.publish")
    frames = renumber([*OPEN, F(0, "out", "confirm.select"), F(0, "in", "confirm.select-ok"), publish, publish,
                       publish, F(0, "in", "basic.ack", delivery_tag=1), F(0, "in", "basic.ack", delivery_tag=1),
                       F(0, "in", "basic.nack", delivery_tag=9), F(0, "out", "channel.close"),
                       F(0, "in", "channel.close-ok")])
    found = audit_channel(frames)  # 2 and 3 are pending at the client's close: they die with it (PC-13)
    assert [(f.kind, f.severity) for f in found] == [("confirm-duplicate", "error"), ("confirm-unpublished", "error")]
    stays_open = [f._replace(ts=S) for f in frames[:-2]]  # the recording ends 2 s later, the channel open
    found = audit_channel(stays_open, Context(recording_end=3 * S))
    assert [(f.kind, f.severity) for f in found] == [("confirm-duplicate", "error"), ("confirm-unpublished", "error"),
                                                     ("confirm-missing", "warning")]
    assert found[2].detail.endswith(": 2, 3") and found[2].seq == frames[5].seq  # at the publish of 2


def test_audit_publishes_before_select_are_not_numbered() -> None:
    frames = renumber([*OPEN, F(0, "out", "basic.publish"), F(0, "out", "confirm.select"),
                       F(0, "in", "confirm.select-ok"), F(0, "out", "basic.publish"),
                       F(0, "in", "basic.ack", delivery_tag=2)])
    assert kinds(audit_channel(frames)) == ["confirm-unpublished"]


def test_audit_prefetch_window_per_consumer() -> None:
    frames = renumber([*OPEN, F(0, "out", "basic.qos", prefetch_count=2, global_qos=False), F(0, "in", "basic.qos-ok"),
                       *CONSUME, deliver(1), deliver(2), deliver(3)])
    found = audit_channel(frames)
    assert [(f.kind, f.rule_id) for f in found] == [("prefetch-exceeded", "QOS-02")]
    acked = renumber([*frames[:-1], F(0, "out", "basic.ack", delivery_tag=1), deliver(3)])
    assert audit_channel(acked) == []


def test_audit_redelivery_after_requeue_needs_the_flag() -> None:
    body = F(0, "in", None, frame_type="body", body_digest="m1")
    frames = renumber([*OPEN, *CONSUME, deliver(1), body, F(0, "out", "basic.nack", delivery_tag=1, requeue=True),
                       deliver(2), body])
    assert [(f.kind, f.rule_id) for f in audit_channel(frames)] == [("redelivered-missing", "RQ-04")]
    flagged = [*frames[:-2], deliver(2, redelivered=True)._replace(seq=frames[-2].seq), frames[-1]]
    assert audit_channel(flagged) == []


def test_audit_a_dead_lettered_copy_in_another_queue_is_no_redelivery() -> None:
    """Requeued from q, then the same body from dlq (dead-lettered there, e.g. by a length limit):
    a new message in dlq, whose redelivered flag is not RQ-04's; from q again it is a redelivery."""
    body = F(0, "in", None, frame_type="body", body_digest="m1")

    def fetch(tag: int, queue: str) -> list[ChannelFrame]:
        return [F(0, "out", "basic.get", queue=queue), F(0, "in", "basic.get-ok", delivery_tag=tag), body]

    requeued = [*OPEN, *fetch(1, "q"), F(0, "out", "basic.reject", delivery_tag=1, requeue=True)]
    assert audit_channel(renumber([*requeued, *fetch(2, "dlq")])) == []
    assert kinds(audit_channel(renumber([*requeued, *fetch(2, "q")]))) == ["redelivered-missing"]


def test_audit_transactions_restore_rolled_back_acks() -> None:
    frames = renumber([*OPEN, F(0, "out", "tx.select"), F(0, "in", "tx.select-ok"), *CONSUME, deliver(1),
                       F(0, "out", "basic.ack", delivery_tag=1), F(0, "out", "tx.rollback"),
                       F(0, "in", "tx.rollback-ok"), F(0, "out", "basic.ack", delivery_tag=1), F(0, "out", "tx.commit"),
                       F(0, "in", "tx.commit-ok")])
    assert audit_channel(frames) == []


def test_audit_ignores_client_frames_after_the_brokers_close() -> None:  # ERR-03
    frames = renumber([*OPEN, F(0, "in", "channel.close", reply_code=406), F(0, "out", "basic.ack", delivery_tag=9),
                       F(0, "out", "channel.close-ok")])
    assert audit_channel(frames) == []


# --- properties ------------------------------------------------------------------------------


@given(valid_traces())
@settings(max_examples=150, deadline=None)
def test_audit_correct_broker_traces_are_clean(frames: list[ChannelFrame]) -> None:
    assert audit_channel(frames) == []


def _positions(frames: list[ChannelFrame], direction: str, *methods: str) -> list[int]:
    return [i for i, f in enumerate(frames) if f.direction == direction and f.method in methods]


@given(valid_traces(prefix=tuple(REQUEUE)), st.integers(0, 10_000), st.integers(1, 5))
@settings(max_examples=80, deadline=None)
def test_audit_a_shifted_delivery_tag_is_found(frames: list[ChannelFrame], pick: int, shift: int) -> None:
    where = _positions(frames, "in", "basic.deliver", "basic.get-ok")
    i = where[pick % len(where)]
    frames[i] = frames[i]._replace(delivery_tag=(frames[i].delivery_tag or 0) + shift)
    assert "tag-sequence" in kinds(audit_channel(frames))


@given(valid_traces(prefix=tuple(CONFIRMS)), st.integers(0, 10_000))
@settings(max_examples=80, deadline=None)
def test_audit_a_repeated_confirm_is_found(frames: list[ChannelFrame], pick: int) -> None:
    where = _positions(frames, "in", "basic.ack", "basic.nack")
    i = where[pick % len(where)]
    found = kinds(audit_channel(renumber([*frames[: i + 1], frames[i], *frames[i + 1 :]])))
    assert "confirm-duplicate" in found


@given(valid_traces(prefix=tuple(REQUEUE)), st.integers(0, 10_000))
@settings(max_examples=80, deadline=None)
def test_audit_a_repeated_client_ack_is_found(frames: list[ChannelFrame], pick: int) -> None:
    where = [i for i in _positions(frames, "out", "basic.ack", "basic.reject", "basic.nack")
             if frames[i].delivery_tag]  # tag 0 + multiple may be repeated legally (ACK-06)
    i = where[pick % len(where)]
    found = kinds(audit_channel(renumber([*frames[: i + 1], frames[i], *frames[i + 1 :]])))
    assert {"ack-settled-tag", "multi-ack-beyond"} & set(found)


@given(valid_traces(prefix=tuple(REQUEUE)), st.integers(0, 10_000))
@settings(max_examples=80, deadline=None)
def test_audit_a_cleared_redelivered_flag_is_found(frames: list[ChannelFrame], pick: int) -> None:
    # In the simulated broker a message is only ever delivered again after a requeue on this channel.
    redelivered = [i for i in _positions(frames, "in", "basic.deliver", "basic.get-ok") if frames[i].redelivered]
    i = redelivered[pick % len(redelivered)]
    frames[i] = frames[i]._replace(redelivered=False)
    assert "redelivered-missing" in kinds(audit_channel(frames))


def _table(frames: list[ChannelFrame], test_id: str = "t::x", connection: int = 1) -> pa.Table:
    names = ("seq", "direction", "method", "delivery_tag", "multiple", "requeue", "redelivered", "consumer_tag",
             "reply_code", "frame_type", "prefetch_count", "no_ack", "global_qos", "body_digest", "queue",
             "reply_text")
    rows = [{**{name: getattr(f, name) for name in names}, "run_id": "r1", "test_id": test_id,
             "connection": connection, "channel": 1, "ts": f.ts} for f in frames]
    return pa.Table.from_pylist(rows, schema=SCHEMAS["frames"])


@given(st.lists(steps(), min_size=1, max_size=3), st.randoms(use_true_random=False))
@settings(max_examples=60, deadline=None)
def test_audit_arrow_adapter_agrees_with_the_checker(plans: list[list[tuple[str, int, bool]]],
                                                     shuffle: random.Random) -> None:
    tables, expected = [], []
    for n, plan in enumerate(plans):
        frames = ChannelSim().run(plan, close=False)
        if frames and n % 2:  # break some channels so there is something to agree on
            frames = renumber([*frames, F(0, "out", "basic.ack", delivery_tag=99)])
        tables.append(_table(frames, test_id=f"t::{n}", connection=n + 1))
        expected += [(f"t::{n}", f.seq, f.kind, f.detail) for f in audit_channel(frames)]
    table = pa.concat_tables(tables)
    order = list(range(table.num_rows))
    shuffle.shuffle(order)  # the adapter sorts by (test, connection, channel, seq) itself
    found = audit_table(table.take(pa.array(order, pa.int64())))
    got = list(zip(found["test_id"].to_pylist(), found["seq"].to_pylist(), found["kind"].to_pylist(),
                   found["detail"].to_pylist(), strict=True))
    assert sorted(got) == sorted(expected)
    per_group = pa.concat_tables([audit_group(t) for t in tables])  # the applyInArrow body, one channel each
    assert per_group.sort_by([("test_id", "ascending"), ("seq", "ascending")]).equals(
        found.sort_by([("test_id", "ascending"), ("seq", "ascending")]))


def test_audit_lake_reads_a_run_of_several_part_files_like_one_table(tmp_path: Path) -> None:
    # each part file has its own string dictionaries (methods, tests): read_run_frames unifies them
    parts = [renumber([*OPEN, *CONSUME, deliver(1), deliver(3)]),
             renumber([*OPEN, F(0, "out", "queue.delete", queue="q"), F(0, "in", "queue.delete-ok"),
                       F(0, "out", "confirm.select"), F(0, "in", "confirm.select-ok"),
                       F(0, "in", "basic.ack", delivery_tag=1)]),
             renumber([*OPEN, *CONSUME, deliver(1), F(0, "out", "basic.ack", delivery_tag=1),
                       F(0, "out", "basic.ack", delivery_tag=1), F(0, "out", "basic.qos")])]
    tables = [_table(frames, test_id=f"t::{n}", connection=n + 1) for n, frames in enumerate(parts)]
    run = tmp_path / "frames" / f"{PARTITION_KEY}=r1"
    run.mkdir(parents=True)
    for n, table in enumerate(tables):
        pq.write_table(table, run / f"part-{n:05d}.parquet")
    found = audit_lake(tmp_path)
    assert found.num_rows == 3
    assert found.sort_by([("test_id", "ascending"), ("seq", "ascending")]).equals(
        audit_table(pa.concat_tables(tables)).sort_by([("test_id", "ascending"), ("seq", "ascending")]))


@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=40), st.integers(1, 8))
def test_audit_runs_are_packed_into_balanced_bins(sizes: list[int], slots: int) -> None:
    from reports.audit.lake import pack

    runs = [(f"r{i}", f"d{i}", size) for i, size in enumerate(sizes)]
    bins = pack(runs, slots)
    assert sorted(d for b in bins for d in b) == sorted(d for _, d, _ in runs)
    assert len(bins) == min(slots, len(runs)) and all(bins)
    size = {d: s for _, d, s in runs}
    totals = [sum(size[d] for d in b) for b in bins]
    assert max(totals) - min(totals) <= max(sizes)  # greedy largest-first: within one run of each other


def test_audit_raw_client_bytes_leave_only_the_tag_check() -> None:
    raw = F(0, "out", None, frame_type="raw")  # e.g. a publish sent as hand-built bytes
    frames = renumber([*OPEN, F(0, "out", "confirm.select"), F(0, "in", "confirm.select-ok"), raw,
                       F(0, "in", "basic.ack", delivery_tag=1), *CONSUME, deliver(1), deliver(3),
                       F(0, "out", "basic.ack", delivery_tag=7)])
    assert [(f.kind, f.detail) for f in audit_channel(frames)] == [("tag-sequence", "delivery tag 3, expected 2")]
