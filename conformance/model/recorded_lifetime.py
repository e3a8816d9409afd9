"""One channel lifetime rebuilt from its recorded frames: what the broker owes the client on it.

Responsibility: the state of one channel lifetime as the frames show it (`ChannelLifetime`: the
model's channel, unacked deliveries, pending confirms, consumers, deletions, the broker's answer
owed to an invalid ack) and the handlers `conformance.model.recorded_channel` dispatches to for
the channel's requests and replies, its close (ACK-03, ERR-03, TMO-02), consumer cancels and
queue deletions (CCN-01..04) and publisher confirms (PC-02/04/05/13); what was owed and never
came is judged when the lifetime ends (`finish`). Deliveries and acks are rebuilt in
`recorded_deliveries`, the queues' requeue order in `recorded_queue_order`. Every decision calls
the model's rule where it is declared (see `recorded_channel`'s docstring); the handlers only map
recorded fields onto those calls and word the findings.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from codec.constants import ReplyCode
from conformance.model import timeouts
from conformance.model.channel import ChannelState, confirm_tags
from conformance.model.order import RequeueOrder
from conformance.model.recorded_frames import (
    ACK_IN,
    DELIVER_IN,
    GET_OK_IN,
    KINDS,
    OPEN_OUT,
    Columns,
    Context,
    Finding,
)
from conformance.model.traits import Traits

UNKNOWN_TAG_CODE = ReplyCode.PRECONDITION_FAILED  # ACK-03: the channel.close an unknown tag gets


ConsumeRequest = tuple[str | None, str | None, bool, int, bool]  # ctag, queue, no_ack, prefetch, under a channel limit


@dataclass(slots=True)
class ChannelLifetime:
    """Everything the broker promised on one channel lifetime, as seen in the frames."""

    context: Context
    traits: Traits
    channel: ChannelState  # the model's channel: tag counter, consumers, prefetch
    findings: list[Finding] = field(default_factory=list)
    outstanding: dict[int, str | None] = field(default_factory=dict)  # tag -> consumer tag; ascending
    identity: dict[int, str] = field(default_factory=dict)  # tag -> message identity, when known
    awaiting_body: int = 0  # tag of the last delivery whose identity is still unknown
    awaiting_redelivered: bool = False  # that delivery's redelivered flag
    requeued: Counter[tuple[str, str]] = field(default_factory=Counter)  # (identity, queue) requeued on this channel
    tag_queue: dict[int, str] = field(default_factory=dict)  # tag -> the queue it came from, when known ("" not)
    order: RequeueOrder = field(default_factory=RequeueOrder)  # RQ-01/02 (recorded_queue_order)
    order_judged: bool = False  # RQ-01/02 are the recorded broker's rules (a RabbitMQ profile)
    consume_requests: deque[ConsumeRequest] = field(default_factory=deque)
    qos_requests: deque[tuple[int, bool]] = field(default_factory=deque)  # (prefetch_count, global) until qos-ok
    global_bound: int = 0  # QOS-03/09: the highest channel limit in force since it was switched on (0: off)
    global_consumers: set[str] = field(default_factory=set)  # consumers created under it: classic (QOS-06)
    not_judged: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # kind -> (first seq, count, why)
    consumed: dict[str, tuple[str | None, int, int]] = field(default_factory=dict)  # ctag -> (queue, since ts, seq)
    cancelled: dict[str, int] = field(default_factory=dict)  # client cancel-ok seen (CCN-04) -> its ts
    cancel_unconfirmed: set[str] = field(default_factory=set)  # cancelled with nowait: deliveries may still come
    broker_cancelled: set[str] = field(default_factory=set)
    deleting: tuple[int, str, int] | None = None  # (seq, queue, ts) of an unanswered queue.delete
    get_no_ack: bool = False
    get_queue: str | None = None  # the queue of the last basic.get
    unconfirmed: dict[int, tuple[int, int]] = field(default_factory=dict)  # ascending seqnos -> (publish seq, us) (PC-05)
    tx: bool = False
    tx_settled: list[tuple[int, str | None, bool]] = field(default_factory=list)  # (tag, ctag, requeue)
    pending_error: Finding | None = None  # an invalid ack the broker must answer with 406
    requests_after_error: int = 0
    broker_closed: bool = False
    client_closed: bool = False
    last_ts: int = 0  # the lifetime's last frame (microseconds), set when it ends

    def find(self, seq: int, kind: str, detail: str) -> None:
        self.findings.append(Finding(seq, kind, detail, KINDS[kind][1]))

    def skip(self, seq: int, kind: str, why: str) -> None:
        """Count one frame the model cannot judge (reported once per lifetime by `finish`)."""
        first, count, _ = self.not_judged.get(kind, (seq, 0, why))
        self.not_judged[kind] = (first, count + 1, why)


Handler = Callable[[ChannelLifetime, Columns, int], None]
TIMEOUT_SLACK_US = 50_000  # the recorder's clock is not the broker's: 50 ms either way


# --- requests, replies and the broker's answer to invalid acks (ACK-03, ERR-03) -------------


def request(s: ChannelLifetime, c: Columns, i: int) -> None:
    if s.pending_error is not None and not nowait(c, i):  # a nowait request is never answered
        s.requests_after_error += 1


def nowait(c: Columns, i: int) -> bool:
    """The request asked for no reply (nowait=true): nothing is owed for it."""
    return c.nowait is not None and c.nowait[i] is True


def reply(s: ChannelLifetime, c: Columns, i: int) -> None:
    error = s.pending_error
    if error is not None and s.requests_after_error:
        s.find(error.seq, error.kind,
               f"{error.detail}: the broker kept the channel open (answered a later request at seq "
               f"{c.seq[i]}); expected channel.close {UNKNOWN_TAG_CODE:d}")
        s.pending_error = None


def client_close(s: ChannelLifetime, c: Columns, i: int) -> None:
    s.client_closed = True


def broker_close(s: ChannelLifetime, c: Columns, i: int) -> None:
    error, s.pending_error = s.pending_error, None
    s.broker_closed = True
    s.deleting = None  # the close answers a pending request
    s.unconfirmed.clear()  # PC-13: pending confirms die with the channel
    code = c.reply_code[i]
    if error is not None and code != UNKNOWN_TAG_CODE:
        s.find(error.seq, error.kind, f"{error.detail}: the broker closed the channel with "
                                      f"{code}, expected {UNKNOWN_TAG_CODE:d} PRECONDITION_FAILED")
    elif error is None and code == UNKNOWN_TAG_CODE and c.reply_text is not None:
        _judge_timeout(s, c, i, timeouts.timeout_in_close_text(c.reply_text[i]))


def _judge_timeout(s: ChannelLifetime, c: Columns, i: int, value: int | None) -> None:
    """TMO-02 / TMO-3x-1: a timeout close needs an unacked delivery at least T old."""
    if value is None:
        return
    if not s.outstanding and not s.tx_settled:
        s.find(c.seq[i], "timeout-without-delivery",
               f"channel.close for a delivery acknowledgement timeout ({value} ms) with no unacked delivery")
        return
    if value < 0 or c.ts is None:
        return
    oldest = next(iter(s.outstanding), None)  # ascending tags: the oldest unacked delivery (TMO-3x-1)
    delivered = _delivery_row(c, i, oldest) if oldest is not None else None
    if delivered is None:
        return
    earliest, _ = timeouts.detection_window(s.traits.profile, value)
    age_us = int(c.ts[i]) - int(c.ts[delivered])
    if age_us + TIMEOUT_SLACK_US < earliest * 1000:
        s.find(c.seq[i], "timeout-early", f"channel.close for a {value} ms acknowledgement timeout when the oldest "
                                          f"unacked delivery was {age_us / 1000:.0f} ms old")


def _delivery_row(c: Columns, i: int, tag: int) -> int | None:
    """The row before `i` that delivered `tag` (timeouts are rare: a scan back is cheaper than
    remembering every delivery's time)."""
    for j in range(i - 1, -1, -1):
        if c.code[j] in (DELIVER_IN, GET_OK_IN) and c.delivery_tag[j] == tag:
            return j
        if c.code[j] == OPEN_OUT:
            return None
    return None


def close_ok(s: ChannelLifetime, c: Columns, i: int) -> None:
    error, s.pending_error = s.pending_error, None
    if error is not None and not s.broker_closed:
        s.find(error.seq, error.kind, f"{error.detail}: the broker answered the client's channel.close "
                                      f"with close-ok; expected channel.close {UNKNOWN_TAG_CODE:d} first")
    s.unconfirmed.clear()  # PC-13: confirms pending at the client's close die with the channel
    s.broker_closed = True  # the lifetime is over; only channel.open starts a new one


def finish(s: ChannelLifetime) -> None:
    """The lifetime ended (a new channel.open, or the trace): what was owed and never came,
    and what could not be judged."""
    for kind, (seq, count, why) in s.not_judged.items():
        s.findings.append(Finding(seq, kind, f"{count} frame(s) not judged: {why}", KINDS[kind][1]))
    s.not_judged = {}
    error = s.pending_error
    if error is not None:
        s.findings.append(Finding(error.seq, error.kind,
                                  f"{error.detail}: the trace ends before the broker's channel.close "
                                  f"{UNKNOWN_TAG_CODE:d}", "warning"))
        s.pending_error = None
    end = s.last_ts if s.client_closed or s.broker_closed else max(s.last_ts, s.context.recording_end)
    _owed_cancels(s, end)
    _missing_confirms(s, end)
    if s.deleting is not None:
        seq, queue, ts = s.deleting
        consumers = s.context.consumers.get(queue, 0)
        if consumers and end - ts >= s.context.grace_us:  # CCN-02: the broker must drop them and answer
            s.find(seq, "delete-unanswered", f"queue.delete of {queue!r}, which had {consumers} consumer(s), was "
                                             f"never answered ({(end - ts) / 1e6:.1f} s until the channel ended)")
        s.deleting = None


def _missing_confirms(s: ChannelLifetime, end: int) -> None:
    """PC-05: a publish never confirmed on a channel that stayed open, for `grace_us` after it,
    until the recording ended. One pending when the channel closed (the client's channel.close,
    the broker's, or the connection's close) is not missing: pending confirms die with the
    channel (PC-13)."""
    if s.client_closed or s.broker_closed or s.context.connection_closed:
        return
    missing = [seqno for seqno, (_seq, at) in s.unconfirmed.items() if end - at >= s.context.grace_us]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        s.find(s.unconfirmed[missing[0]][0], "confirm-missing",
               f"{len(missing)} published seqno(s) never confirmed while the channel stayed open until the "
               f"recording ended: {shown}")


def _owed_cancels(s: ChannelLifetime, end: int) -> None:
    """CCN-02: a consumer whose queue was deleted gets basic.cancel when its connection asked
    (not judged, and counted, when the client's capabilities were not recorded)."""
    notify = s.context.cancel_notify
    if notify is False or not s.context.deletions:
        return
    for ctag, (queue, since, seq) in s.consumed.items():
        if ctag in s.broker_cancelled or queue is None:
            continue
        until = min(end, s.cancelled.get(ctag, end))  # the client's own cancel ends what is owed
        for deletion in s.context.deletions.get(queue, ()):
            if deletion.ts > since and until - deletion.ts >= s.context.grace_us:
                what = (f"consumer {ctag} of queue {queue!r}: the queue was deleted "
                        f"({'answered' if deletion.answered else 'never answered'}) and no basic.cancel came")
                if notify is None:
                    _capabilities_unknown(s, seq, what)
                else:
                    s.find(seq, "cancel-missing", f"{what}, though the client advertised consumer_cancel_notify")
                break


def _capabilities_unknown(s: ChannelLifetime, seq: int, what: str) -> None:
    s.find(seq, "unjudged-capabilities", f"{what}: not judged, client capabilities not recorded "
                                         f"({s.context.notify_unknown})")


# --- consumers: cancel and deletion (CCN-01..04) --------------------------------------------


def client_cancel(s: ChannelLifetime, c: Columns, i: int) -> None:
    ctag = c.consumer_tag[i]
    if ctag is not None and nowait(c, i):  # no cancel-ok will come: the request ends what is owed (CCN-02)
        s.cancelled.setdefault(ctag, int(c.ts[i]) if c.ts is not None else 0)
        s.cancel_unconfirmed.add(ctag)
    request(s, c, i)


def cancel_ok(s: ChannelLifetime, c: Columns, i: int) -> None:
    ctag = c.consumer_tag[i]
    if ctag is not None:  # CCN-04: nothing for it may follow
        s.channel.consumers.pop(ctag, None)
        s.cancelled[ctag] = int(c.ts[i]) if c.ts is not None else 0
        s.cancel_unconfirmed.discard(ctag)
    reply(s, c, i)


def broker_cancel(s: ChannelLifetime, c: Columns, i: int) -> None:
    ctag = c.consumer_tag[i]
    if s.context.cancel_notify is False:  # CCN-01: only a client that asked gets basic.cancel
        s.find(c.seq[i], "cancel-unrequested", f"basic.cancel for consumer {ctag} on a connection that did not "
                                               "advertise consumer_cancel_notify")
    elif s.context.cancel_notify is None:
        _capabilities_unknown(s, c.seq[i], f"basic.cancel for consumer {ctag}")
    if ctag is not None:
        s.channel.consumers.pop(ctag, None)
        s.broker_cancelled.add(ctag)


def delete(s: ChannelLifetime, c: Columns, i: int) -> None:
    queue = c.queue[i] if c.queue is not None else None
    if queue is not None and not nowait(c, i):  # nowait: no delete-ok is owed (CCN-02 still is)
        s.deleting = (c.seq[i], queue, c.ts[i] if c.ts is not None else 0)
    request(s, c, i)


def delete_ok(s: ChannelLifetime, c: Columns, i: int) -> None:
    s.deleting = None
    reply(s, c, i)


# --- publisher confirms (PC-01/02/04/05/13) -------------------------------------------------


def confirm_select(s: ChannelLifetime, c: Columns, i: int) -> None:
    s.channel.confirm = True  # PC-01: selecting again does not reset the counter
    request(s, c, i)


def publish(s: ChannelLifetime, c: Columns, i: int) -> None:
    channel = s.channel
    if channel.confirm and not s.client_closed:  # PC-02: seqnos count publishes after select
        s.unconfirmed[channel.publish_seqno] = (c.seq[i], int(c.ts[i]) if c.ts is not None else 0)
        channel.publish_seqno += 1


def confirm(s: ChannelLifetime, c: Columns, i: int) -> None:
    tag = c.delivery_tag[i] or 0
    multiple = c.multiple[i] is True
    unconfirmed = s.unconfirmed
    seqnos = confirm_tags(unconfirmed, tag, multiple)  # PC-04/05
    if seqnos is not None:
        for seqno in seqnos:
            del unconfirmed[seqno]
        return
    published = s.channel.publish_seqno - 1
    what = f"{'basic.ack' if c.code[i] == ACK_IN else 'basic.nack'} delivery-tag={tag}{' multiple' if multiple else ''}"
    if 0 < tag <= published:
        s.find(c.seq[i], "confirm-duplicate", f"{what}: seqno {tag} was already confirmed")
    else:
        s.find(c.seq[i], "confirm-unpublished", f"{what}: {published} published in confirm mode")


# --- after opaque client bytes: only what the broker alone decides -------------------------


def ignore(s: ChannelLifetime, c: Columns, i: int) -> None:
    return None


def tag_only(s: ChannelLifetime, c: Columns, i: int) -> None:
    tag = c.delivery_tag[i] or 0
    expected = s.channel.take_tag()  # ACK-01
    if tag != expected:
        what = "delivery tag" if c.code[i] == DELIVER_IN else "basic.get-ok tag"
        s.find(c.seq[i], "tag-sequence", f"{what} {tag}, expected {expected}")
        s.channel.next_tag = tag + 1


def opaque_close(s: ChannelLifetime, c: Columns, i: int) -> None:
    s.broker_closed = True
