"""The audit of recorded traffic: cancel notification, deletions, timeouts, what is not judged,
and the connection contexts built from a recording (no JVM)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from conformance.model.recorded_frames import Context, Deletion, recorded_traits
from conformance.model.traits import GlobalQos
from conformance.results.records import SCHEMAS
from reports.audit.channel import ChannelFrame, audit_channel
from reports.audit.context import recording_contexts
from reports.audit.partition import audit_table

F = ChannelFrame
S = 1_000_000  # one second in microseconds


def renumber(frames: list[ChannelFrame]) -> list[ChannelFrame]:
    return [f._replace(seq=i) for i, f in enumerate(frames)]


def kinds(frames: list[ChannelFrame], context: Context | None = None) -> list[tuple[str, str]]:
    found = audit_channel(renumber(frames), context) if context else audit_channel(renumber(frames))
    return [(f.kind, f.rule_id) for f in found]


OPEN = [F(0, "out", "channel.open"), F(0, "in", "channel.open-ok")]
CONSUME = [F(0, "out", "basic.consume", consumer_tag="c1", queue="q"),
           F(0, "in", "basic.consume-ok", consumer_tag="c1", ts=1 * S)]


def test_audit_delivery_after_cancel_ok_is_ccn_04() -> None:
    cancelled = [*OPEN, *CONSUME, F(0, "out", "basic.cancel", consumer_tag="c1"),
                 F(0, "in", "basic.deliver", delivery_tag=1, consumer_tag="c1"),  # in flight: allowed
                 F(0, "in", "basic.cancel-ok", consumer_tag="c1"),
                 F(0, "in", "basic.deliver", delivery_tag=2, consumer_tag="c1")]
    assert kinds(cancelled) == [("delivery-after-cancel", "CCN-04")]


def test_audit_broker_cancel_needs_the_capability() -> None:
    frames = [*OPEN, *CONSUME, F(0, "in", "basic.cancel", consumer_tag="c1")]
    assert kinds(frames, Context(cancel_notify=False)) == [("cancel-unrequested", "CCN-01")]
    assert kinds(frames, Context(cancel_notify=True)) == []
    assert kinds(frames) == [("unjudged-capabilities", "CCN-01")]  # unknown capability: counted, not judged


def test_audit_a_deleted_queue_owes_its_consumers_a_cancel() -> None:
    deleted = Context(cancel_notify=True, deletions={"q": [Deletion("q", 2 * S, True)]})
    lived_on = [*OPEN, *CONSUME, F(0, "out", "basic.qos", prefetch_count=1, ts=4 * S),
                F(0, "in", "basic.qos-ok", ts=4 * S)]
    assert kinds(lived_on, deleted) == [("cancel-missing", "CCN-02")]
    notified = [*OPEN, *CONSUME, F(0, "in", "basic.cancel", consumer_tag="c1", ts=2 * S), *lived_on[4:]]
    assert kinds(notified, deleted) == []
    closed_at_once = [*OPEN, *CONSUME, F(0, "out", "channel.close", ts=2 * S + 1000),
                      F(0, "in", "channel.close-ok", ts=2 * S + 2000)]
    assert kinds(closed_at_once, deleted) == []  # within the grace: no proof
    assert kinds(lived_on, Context(cancel_notify=False, deletions=deleted.deletions)) == []  # silently dropped


def test_audit_an_unanswered_delete_of_a_consumed_queue() -> None:
    frames = [*OPEN, F(0, "out", "queue.delete", queue="q", ts=1 * S), F(0, "out", "channel.close", ts=6 * S)]
    assert kinds(frames, Context(consumers={"q": 1})) == [("delete-unanswered", "CCN-02")]
    assert kinds(frames, Context(consumers={})) == []
    answered = [*frames[:3], F(0, "in", "queue.delete-ok", ts=1 * S + 10), frames[3]]
    assert kinds(answered, Context(consumers={"q": 1})) == []


def test_audit_a_timeout_close_needs_an_old_enough_unacked_delivery() -> None:
    text = ("PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: 5000 ms. "
            "This timeout value can be configured, see consumers doc guide to learn more")
    close = F(0, "in", "channel.close", reply_code=406, reply_text=text, ts=7 * S)
    delivered = [*OPEN, *CONSUME, F(0, "in", "basic.deliver", delivery_tag=1, consumer_tag="c1", ts=1 * S)]
    on_time = Context(traits=recorded_traits("rabbitmq-3.10", ()))
    assert kinds([*delivered, close], on_time) == []
    assert kinds([*delivered, close._replace(ts=3 * S)], on_time) == [("timeout-early", "TMO-02")]
    assert kinds([*OPEN, *CONSUME, close], on_time) == [("timeout-without-delivery", "TMO-02")]


def test_audit_counts_what_it_cannot_judge() -> None:
    gap = [*OPEN, *CONSUME, F(0, "in", None, frame_type="gap"), F(0, "in", "basic.deliver", delivery_tag=9)]
    found = audit_channel(renumber(gap))
    assert [(f.kind, f.severity) for f in found] == [("unjudged-gap", "unjudged")]
    assert "1 frame(s) after it" in found[0].detail
    mid = audit_channel(renumber([F(0, "in", "basic.deliver", delivery_tag=7)]), Context(judged=False))
    assert [(f.kind, f.severity) for f in mid] == [("unjudged-mid-stream", "unjudged")]


def test_audit_advertised_per_consumer_qos_overrides_the_base_profile() -> None:
    plain = recorded_traits("amqp-0-9-1", ())
    advertised = recorded_traits("amqp-0-9-1", ("per_consumer_qos",))
    assert plain.global_qos is GlobalQos.CONNECTION and not plain.per_consumer_qos
    assert advertised.global_qos is GlobalQos.CHANNEL and advertised.per_consumer_qos
    frames = [*OPEN, F(0, "out", "basic.qos", prefetch_count=1, global_qos=False), F(0, "in", "basic.qos-ok"),
              *CONSUME, F(0, "in", "basic.deliver", delivery_tag=1, consumer_tag="c1"),
              F(0, "in", "basic.deliver", delivery_tag=2, consumer_tag="c1")]
    assert kinds(frames, Context(traits=advertised)) == [("prefetch-exceeded", "QOS-02")]
    assert kinds(frames, Context(traits=plain)) == [("unjudged-global-qos", "QOS-03")]  # the spec's limit: counted


def _row(connection: int, channel: int, seq: int, direction: str, method: str | None, **fields: Any) -> dict[str, Any]:
    return {"run_id": "r", "test_id": "rec", "connection": connection, "channel": channel, "seq": seq, "ts": 0,
            "direction": direction, "frame_type": fields.pop("frame_type", "method"), "method": method, **fields}


def test_audit_contexts_come_from_the_whole_recording() -> None:
    rows = [
        _row(1, 0, 0, "in", "connection.start", product="RabbitMQ", version="3.10.8",
             capabilities=["consumer_cancel_notify", "per_consumer_qos"]),
        _row(1, 0, 1, "out", "connection.start-ok", capabilities=["consumer_cancel_notify"]),
        _row(1, 1, 2, "out", "basic.consume", queue="q", consumer_tag="c1"),
        _row(1, 1, 3, "in", "basic.consume-ok", consumer_tag="c1", ts=1 * S),
        _row(1, 1, 4, "out", "basic.qos", prefetch_count=1, ts=5 * S),
        _row(2, 0, 0, "in", "connection.start", product="GarageMQ", version="0.1", capabilities=[]),
        _row(2, 1, 1, "out", "queue.delete", queue="q", ts=2 * S),
        _row(2, 1, 2, "in", "queue.delete-ok", ts=2 * S),
        _row(2, 1, 3, "out", "queue.delete", queue="busy", ts=2 * S),
        _row(2, 1, 4, "in", "channel.close", reply_code=406),
        _row(3, -1, 0, "in", None, frame_type="gap"),
        _row(3, 1, 1, "in", "basic.deliver", delivery_tag=5),
    ]
    table = pa.Table.from_pylist(rows, schema=SCHEMAS["frames"])
    contexts = recording_contexts(table)
    first, second, third = (contexts["r", "rec", n] for n in (1, 2, 3))
    assert first.traits is not None and first.traits.profile == "rabbitmq-3.10" and first.cancel_notify is True
    assert second.traits is not None and second.traits.profile == "amqp-0-9-1" and second.cancel_notify is None
    assert list(first.deletions) == ["q"]  # "busy" was refused with a channel.close
    assert third.judged is False
    found = audit_table(table)
    assert sorted(zip(found["connection"].to_pylist(), found["kind"].to_pylist(), strict=True)) == [
        (1, "cancel-missing"), (3, "unjudged-mid-stream"), (3, "unjudged-mid-stream")]  # channels -1 and 1


def test_audit_nowait_requests_owe_no_reply() -> None:
    consume = [F(0, "out", "basic.qos", prefetch_count=1, global_qos=False), F(0, "in", "basic.qos-ok"),
               F(0, "out", "basic.consume", consumer_tag="c1", queue="q", nowait=True, ts=1 * S)]
    over = [F(0, "in", "basic.deliver", delivery_tag=n, consumer_tag="c1") for n in (1, 2)]
    assert kinds([*OPEN, *consume, *over]) == [("prefetch-exceeded", "QOS-02")]  # a consumer from the request on
    delete = [F(0, "out", "queue.delete", queue="q", nowait=True, ts=2 * S), F(0, "out", "channel.close", ts=6 * S)]
    assert kinds([*OPEN, *delete], Context(consumers={"q": 1})) == []  # no delete-ok is owed
    deleted = Context(cancel_notify=True, deletions={"q": [Deletion("q", 3 * S, True)]})
    cancel = F(0, "out", "basic.cancel", consumer_tag="c1", nowait=True, ts=2 * S)
    after = [F(0, "in", "basic.deliver", delivery_tag=1, consumer_tag="c1", ts=2 * S + 10),  # in flight: allowed
             F(0, "out", "basic.qos", prefetch_count=0, ts=6 * S), F(0, "in", "basic.qos-ok", ts=6 * S)]
    assert kinds([*OPEN, *consume, cancel, *after], deleted) == []  # the client's cancel ended what was owed
    pending = [F(0, "out", "queue.declare", queue="a"), F(0, "out", "basic.ack", delivery_tag=9),
               F(0, "out", "queue.bind", queue="a", nowait=True), F(0, "in", "queue.declare-ok")]
    found = audit_channel(renumber([*OPEN, *pending]))  # the declare-ok answers the declare sent before the ack
    assert [(f.kind, f.severity) for f in found] == [("ack-unknown-tag", "warning")]  # the trace ends first


def _consumer(tag: str, queue: str) -> list[ChannelFrame]:
    return [F(0, "out", "basic.consume", consumer_tag=tag, queue=queue), F(0, "in", "basic.consume-ok", consumer_tag=tag)]


def _deliveries(*tags: str, first: int = 1) -> list[ChannelFrame]:
    return [F(0, "in", "basic.deliver", delivery_tag=n, consumer_tag=t) for n, t in enumerate(tags, first)]


def test_audit_global_prefetch_is_one_limit_for_the_channel() -> None:
    rabbit = Context(traits=recorded_traits("rabbitmq-3.10", ()))
    qos = [F(0, "out", "basic.qos", prefetch_count=2, global_qos=True), F(0, "in", "basic.qos-ok")]
    both = [*OPEN, *qos, *_consumer("a", "q1"), *_consumer("b", "q2")]
    assert kinds([*both, *_deliveries("a", "b")], rabbit) == []
    assert kinds([*both, *_deliveries("a", "b", "a")], rabbit) == [("global-prefetch-exceeded", "QOS-03")]
    acked = [*both, *_deliveries("a", "b"), F(0, "out", "basic.ack", delivery_tag=1), *_deliveries("a", first=3)]
    assert kinds(acked, rabbit) == []
    held = [*OPEN, *_consumer("g", "q0"), *_deliveries("g"), *qos[:1], *_deliveries("g", first=2), *qos[1:],
            *_consumer("a", "q1"), *_deliveries("a", first=3)]  # QOS-05: the two held count
    assert kinds(held, rabbit) == [("global-prefetch-exceeded", "QOS-03")]
    assert kinds([*held[:-1], *_deliveries("g", first=3)], rabbit) == [("unjudged-global-qos", "QOS-03")]  # quorum?
    lowered = [*both, *_deliveries("a", "b"), F(0, "out", "basic.qos", prefetch_count=1, global_qos=True),
               F(0, "in", "basic.qos-ok"), *_deliveries("a", first=3)]  # QOS-09: in flight when lowered
    assert kinds(lowered, rabbit) == [("global-prefetch-exceeded", "QOS-03")]
    assert kinds(lowered[:-1], rabbit) == []
    unknown = [*both, *_deliveries("a", "b", "a")]
    assert kinds(unknown) == [("unjudged-global-qos", "QOS-03")]  # no connection.start: the version decides
    spec = Context(traits=recorded_traits("amqp-0-9-1", ()))
    assert kinds(unknown, spec) == [("unjudged-global-qos", "QOS-03")]  # connection-wide: not one channel's


def _message(tag: int, body: str, redelivered: bool = False, priority: int | None = None) -> list[ChannelFrame]:
    return [F(0, "in", "basic.deliver", delivery_tag=tag, consumer_tag="c1", redelivered=redelivered),
            F(0, "in", None, frame_type="header", priority=priority), F(0, "in", None, frame_type="body", body_digest=body)]


def test_audit_requeue_order_follows_the_queue_type() -> None:
    """RQ-01/RQ-02: two rejects in a row; the window (prefetch 2) was full, so both landed."""
    window = [F(0, "out", "basic.qos", prefetch_count=2), F(0, "in", "basic.qos-ok"), *CONSUME,
              *_message(1, "m0"), *_message(2, "m1"),
              F(0, "out", "basic.reject", delivery_tag=1, requeue=True),
              F(0, "out", "basic.reject", delivery_tag=2, requeue=True)]
    in_order = [*OPEN, *window, *_message(3, "m0", True), *_message(4, "m1", True)]
    reversed_ = [*OPEN, *window, *_message(3, "m1", True), *_message(4, "m0", True)]

    def context(**fields: Any) -> Context:
        return Context(traits=recorded_traits("rabbitmq-3.10", ()), **{"readers": {"q": 1}, **fields})

    for kind in ("classic", "quorum", None):
        typed = context(queue_types={"q": kind} if kind else {})
        assert kinds(in_order, typed) == []
        expected = ("returns-order", "RQ-02") if kind == "quorum" else ("requeue-order", "RQ-01")
        assert kinds(reversed_, typed) == [expected]
    shared = context(readers={"q": 2})
    assert kinds(reversed_, shared) == [("unjudged-requeue-order", "RQ-01")]
    spec = kinds(reversed_, Context(traits=recorded_traits("amqp-0-9-1", ()), readers={"q": 1}))
    assert [k for k in spec if "order" in k[0]] == []  # 0-9-1 leaves the position open: not a rule
    dropped = [*OPEN, *window, *_message(3, "m1", True)]  # m0 never comes back (TTL, a length limit): no proof
    assert kinds(dropped, context()) == []
    fresh = [*OPEN, *window, *_message(3, "m2"), *_message(4, "m0", True)]  # classic: m0 is back first
    assert kinds(fresh, context(queue_types={"q": "classic"})) == [("requeue-order", "RQ-01")]
    assert kinds(fresh, context(queue_types={"q": "quorum"})) == []  # 3.10: re-enqueued at the back
    prioritised = [*OPEN, *window[:4], *_message(1, "m0", priority=5), *window[7:], *_message(3, "m1", True),
                   *_message(4, "m0", True)]  # a priority queue orders by priority
    assert kinds(prioritised, context()) == [("unjudged-requeue-order", "RQ-01")]


# -- PC-13: pending confirms die with the channel; PC-05: a confirm missing on an open channel --
SELECT = [F(0, "out", "confirm.select"), F(0, "in", "confirm.select-ok")]
PUBLISHED = [F(0, "out", "basic.publish", ts=1 * S) for _ in range(3)]
ONE_CONFIRMED = [*OPEN, *SELECT, *PUBLISHED, F(0, "in", "basic.ack", delivery_tag=1, ts=1 * S + 500)]
LATER = Context(recording_end=10 * S)  # the recording goes on 9 s after the publishes


def test_audit_confirms_pending_when_the_channel_closed_are_not_missing() -> None:
    client_close = [F(0, "out", "channel.close", ts=5 * S), F(0, "in", "channel.close-ok", ts=5 * S)]
    broker_close = [F(0, "in", "channel.close", reply_code=406, ts=5 * S), F(0, "out", "channel.close-ok", ts=5 * S)]
    for close in (client_close, broker_close):
        assert kinds([*ONE_CONFIRMED, *close], LATER) == []
    assert kinds(ONE_CONFIRMED, Context(recording_end=10 * S, connection_closed=True)) == []  # the connection's close


def test_audit_a_confirm_missing_on_a_channel_that_stays_open_is_pc_05() -> None:
    found = audit_channel(renumber(ONE_CONFIRMED), LATER)
    assert [(f.kind, f.rule_id, f.severity) for f in found] == [("confirm-missing", "PC-05", "warning")]
    assert found[0].detail.startswith("2 published seqno(s) never confirmed while the channel stayed open")
    assert found[0].detail.endswith(": 2, 3")
    assert kinds(ONE_CONFIRMED, Context(recording_end=1 * S + 900_000)) == []  # still within the grace: in flight


def test_audit_recorded_connection_close_ends_its_channels_confirms() -> None:
    """From a recording (the Arrow path and its contexts): connection 1 closes its connection with
    two confirms pending, connection 2 leaves its channel open with one missing for 9 s."""
    rows = []
    for connection in (1, 2):
        rows += [_row(connection, 0, 0, "in", "connection.start", product="RabbitMQ", version="4.3.6", capabilities=[]),
                 _row(connection, 1, 1, "out", "channel.open"), _row(connection, 1, 2, "in", "channel.open-ok"),
                 _row(connection, 1, 3, "out", "confirm.select"), _row(connection, 1, 4, "in", "confirm.select-ok"),
                 *(_row(connection, 1, n, "out", "basic.publish", ts=1 * S) for n in (5, 6, 7)),
                 _row(connection, 1, 8, "in", "basic.ack", delivery_tag=1, multiple=False, ts=1 * S)]
    rows += [_row(1, 0, 9, "out", "connection.close", ts=1 * S), _row(1, 0, 10, "in", "connection.close-ok", ts=1 * S),
             _row(2, 1, 9, "out", "basic.qos", prefetch_count=1, ts=10 * S), _row(2, 1, 10, "in", "basic.qos-ok", ts=10 * S)]
    table = pa.Table.from_pylist(rows, schema=SCHEMAS["frames"])
    contexts = recording_contexts(table)
    assert contexts["r", "rec", 1].connection_closed and not contexts["r", "rec", 2].connection_closed
    found = audit_table(table).to_pylist()
    assert [(f["connection"], f["kind"], f["seq"]) for f in found] == [(2, "confirm-missing", 6)]
