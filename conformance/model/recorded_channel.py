"""One recorded channel rebuilt lifetime by lifetime: its frames in, findings out (the trace audit).

Responsibility: replay one recorded channel (`recorded_frames.Columns`, seq order) through the
model's own rules, one channel lifetime (channel.open to its close) after the other, each frame
handed to the handler of its code (`recorded_lifetime`, `recorded_deliveries`,
`recorded_queue_order` rebuild that lifetime's state), and report what the broker did that no
rule allows. The decisions are the model's:
`settle_tags` (ACK-03..06), `confirm_tags` (PC-02/04/05), the channel's tag counter (ACK-01),
`prefetch.apply_qos` / `take_credit` / `release` (QOS-02/03/05), `redelivered_flag`
(RQ-04), the cancel rules of `consumers` (CCN-01/02/04) and the timeout oracle (TMO-02,
TMO-3x-2). This module only keeps what one channel lifetime has seen so far (`ChannelLifetime`)
and the bookkeeping a passive observer needs: it cannot see the queues, so it judges a
delivery only by what this channel saw (a message requeued here must come back flagged).

Rules:
- ERR-03: once the broker sent channel.close the client's later frames are ignored.
- An invalid client ack is legitimate (tests provoke it); the finding is the broker's answer:
  an error when it answers a later request or closes with another code than the model's,
  a warning when the trace ends first.
- Raw client bytes (`raw`): the client may have sent anything, so from then on only what the
  broker alone decides (ACK-01) is judged. A `gap` (undecodable frame): nothing more is judged
  on the channel; its frames are counted (severity `unjudged`), as are all frames of a
  connection recorded mid-stream (`Context.judged` False).
- ACK-08: acks inside a transaction are judged at once, settled at tx.commit, restored by
  tx.rollback.
- basic.qos takes effect at its qos-ok. A channel-wide limit (global=true on RabbitMQ ≤4.2)
  is judged for consumers created under it (classic queues, QOS-06) against the highest limit
  since it was switched on (QOS-09); deliveries the recording cannot judge against it are
  counted (`unjudged-global-qos`) with the reason.
- nowait=true requests owe no reply: a nowait basic.consume creates its consumer at once, a
  nowait queue.delete owes no delete-ok (its consumers' basic.cancel still is, CCN-02), a
  nowait basic.cancel ends what a deletion owes the consumer, but deliveries already in flight
  may still follow it (CCN-04 is judged after a cancel-ok only); a nowait request never counts
  as one the broker answered.
- PC-13: confirms pending when the channel closed (the client's channel.close, the broker's,
  or the connection's close) died with it; a publish is a missing confirm (PC-05, a warning)
  only on a channel that stayed open until the recording ended, at least the context's grace
  after the publish.
Observers never raise on odd input: an unexpected frame is skipped, not fatal.
"""

from __future__ import annotations

from conformance.model import recorded_deliveries, recorded_lifetime, recorded_queue_order
from conformance.model.channel import ChannelState
from conformance.model.recorded_frames import (
    ACK_IN,
    ACK_OUT,
    BODY_IN,
    CANCEL_IN,
    CANCEL_OK_IN,
    CANCEL_OUT,
    CLOSE_IN,
    CLOSE_OK_IN,
    CLOSE_OUT,
    CONFIRM_SELECT_OUT,
    CONSUME_OK_IN,
    CONSUME_OUT,
    DEFAULT_CONTEXT,
    DELETE_OK_IN,
    DELETE_OUT,
    DELIVER_IN,
    GAP,
    GET_OK_IN,
    GET_OUT,
    N_CODES,
    NACK_IN,
    NACK_OUT,
    OPEN_OUT,
    PRIORITY_IN,
    PUBLISH_OUT,
    QOS_OK_IN,
    QOS_OUT,
    RAW_OUT,
    RECOVER_OUT,
    REJECT_OUT,
    REPLY_IN,
    REQUEST_OUT,
    TX_COMMIT_OUT,
    TX_ROLLBACK_OUT,
    TX_SELECT_OUT,
    UNJUDGED,
    Columns,
    Context,
    Finding,
)
from conformance.model.recorded_lifetime import ChannelLifetime, Handler
from conformance.model.traits import traits

_DEFAULT_TRAITS = traits("rabbitmq-3.10")  # unknown broker: global=false per consumer, global=true not judged


d, life = recorded_deliveries, recorded_lifetime
HANDLERS: list[Handler] = [life.ignore] * N_CODES
for _code, _handler in (
        (DELIVER_IN, d.deliver), (GET_OK_IN, d.get_ok), (GET_OUT, d.get), (ACK_OUT, d.client_ack),
        (NACK_OUT, d.client_ack), (REJECT_OUT, d.client_ack), (QOS_OUT, d.qos), (QOS_OK_IN, d.qos_ok),
        (CONSUME_OUT, d.consume),
        (CONSUME_OK_IN, d.consume_ok), (RECOVER_OUT, d.recover), (TX_SELECT_OUT, d.tx_select),
        (TX_COMMIT_OUT, d.tx_commit), (TX_ROLLBACK_OUT, d.tx_rollback), (BODY_IN, d.body),
        (ACK_IN, life.confirm), (NACK_IN, life.confirm), (PUBLISH_OUT, life.publish),
        (CONFIRM_SELECT_OUT, life.confirm_select), (CLOSE_OUT, life.client_close),
        (CLOSE_IN, life.broker_close), (CLOSE_OK_IN, life.close_ok), (REPLY_IN, life.reply),
        (REQUEST_OUT, life.request), (CANCEL_OUT, life.client_cancel), (CANCEL_OK_IN, life.cancel_ok),
        (CANCEL_IN, life.broker_cancel), (DELETE_OUT, life.delete), (DELETE_OK_IN, life.delete_ok),
        (PRIORITY_IN, recorded_queue_order.on_priority)):
    HANDLERS[_code] = _handler

# After opaque raw bytes from the client: only what the broker alone decides is judged.
OPAQUE_HANDLERS: list[Handler] = [life.ignore] * N_CODES
for _code, _handler in ((DELIVER_IN, life.tag_only), (GET_OK_IN, life.tag_only),
                        (CLOSE_IN, life.opaque_close), (CLOSE_OK_IN, life.opaque_close)):
    OPAQUE_HANDLERS[_code] = _handler


def new_lifetime(context: Context, findings: list[Finding] | None = None) -> ChannelLifetime:
    trace = ChannelLifetime(context, context.traits or _DEFAULT_TRAITS, ChannelState(0, 0))
    # RQ-01/02 are rules of the recorded broker: a RabbitMQ profile (0-9-1 leaves the position open)
    trace.order_judged = context.traits is not None and context.traits.requeue_position
    if findings is not None:
        trace.findings = findings
    return trace


def observe_channel(cols: Columns, start: int = 0, stop: int | None = None,
                    context: Context = DEFAULT_CONTEXT) -> list[Finding]:
    """Judge one channel: rows start..stop of `cols`, already in seq order."""
    stop = len(cols.code) if stop is None else stop
    if not context.judged:
        if stop <= start:
            return []
        return [Finding(cols.seq[start], "unjudged-mid-stream",
                        f"connection recorded mid-stream (or its framing lost): {stop - start} frame(s) of "
                        "this channel not judged",
                        UNJUDGED)]
    trace = new_lifetime(context)
    codes, table, ts = cols.code, HANDLERS, cols.ts
    for i in range(start, stop):
        code = codes[i]
        if code == OPEN_OUT:
            if i > start:  # the first row's trace is new: nothing to finish, nothing to renew
                trace.last_ts = ts[i - 1] if ts is not None else 0
                life.finish(trace)
                trace = new_lifetime(context, trace.findings)
                table = HANDLERS
            continue
        if code == GAP:
            trace.last_ts = ts[i] if ts is not None else 0
            life.finish(trace)
            why = (cols.reply_text[i] if cols.reply_text is not None else None) or "no reason recorded"
            trace.findings.append(Finding(cols.seq[i], "unjudged-gap", f"an undecodable frame ({why}): it and the "
                                          f"{stop - i - 1} frame(s) after it on this channel are not judged", UNJUDGED))
            return trace.findings
        if trace.broker_closed and code != CLOSE_OK_IN:
            continue  # ERR-03: the broker ignores what follows its channel.close
        if code == RAW_OUT:
            trace.pending_error = None
            table = OPAQUE_HANDLERS
            continue
        table[code](trace, cols, i)
    trace.last_ts = ts[stop - 1] if ts is not None and stop > start else 0
    life.finish(trace)
    return trace.findings
