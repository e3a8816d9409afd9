"""Trace audit: replay one channel's recorded frames and report what the broker got wrong.

Responsibility: plain-Python per-channel checkers over the frame records of
`conformance.plugin.results` (one channel = one (run, test, connection, channel) in `seq` order).
They run in-process on Python lists (tests, the single-process baseline) and inside Spark
through `reports.audit_arrow` (applyInArrow per channel, mapInArrow per run).

What is checked (each finding names its rule):
- ACK-01 `tag-sequence`: basic.deliver / basic.get-ok tags count 1, 2, 3, ... per channel
  lifetime (reset by channel.open). After a gap the count resynchronises, so one slip is one
  finding. (Direct reply-to deliveries, which reuse a tag, are not recognisable in the records.)
- ACK-03 `ack-unknown-tag`, ACK-04 `ack-settled-tag`, ACK-05 `multi-ack-beyond`: the client
  acked (ack/nack/reject) a tag never delivered, one already settled, or `multiple=true` with
  a tag that is not outstanding. Provoking that is legitimate (tests do it on purpose); the
  finding is the broker's answer: an error when the broker answers a later request
  (a `*-ok`) or closes the channel with a code other than 406, a warning when the trace ends
  before any channel.close.
- PC-02 `confirm-unpublished`, PC-05 `confirm-duplicate`: a broker basic.ack/basic.nack for a
  sequence number the client never published in confirm mode, or one already confirmed.
  PC-05 `confirm-missing` (warning; PC-13 allows it): published seqnos still unconfirmed when
  the client closed the channel cleanly (channel.close answered by close-ok).
- QOS-02 `prefetch-exceeded`: more unacked deliveries to a consumer than the per-consumer
  prefetch (`global=false`) in force when it was created. Needs the frame columns
  `prefetch_count`/`no_ack`; `global=true` limits depend on the profile (QOS-03) and are not
  checked.
- RQ-04 `redelivered-missing`: a message requeued on this channel (nack/reject requeue=true,
  basic.recover) delivered again on it with redelivered=false. Needs a message identity per
  delivery (`body_digest` of the first body frame); without it the check is off.

Rules: ERR-03 — once the broker sent channel.close the client's later frames are ignored.
Raw bytes the client sent (a recorded `raw` frame: hand-built or malformed frames) are opaque:
from then on the channel lifetime is only checked for what the broker alone decides (ACK-01),
since the client may have published or acked anything.
Acks inside a transaction (ACK-08) are checked at once, settled at tx.commit and restored by
tx.rollback. Checkers never raise on odd input: an unexpected frame is skipped, not fatal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from reports.audit_state import (
    ACK_IN,
    ACK_OUT,
    BODY_IN,
    CLOSE_IN,
    CLOSE_OK_IN,
    CLOSE_OUT,
    CONFIRM_SELECT_OUT,
    CONSUME_OK_IN,
    CONSUME_OUT,
    DELIVER_IN,
    GET_OK_IN,
    GET_OUT,
    KINDS,
    N_CODES,
    NACK_IN,
    NACK_OUT,
    OPEN_OUT,
    PUBLISH_OUT,
    QOS_OUT,
    RAW_OUT,
    RECOVER_OUT,
    REJECT_OUT,
    REPLY_IN,
    REQUEST_OUT,
    TX_COMMIT_OUT,
    TX_ROLLBACK_OUT,
    TX_SELECT_OUT,
    ChannelState,
    Columns,
    Consumer,
    Finding,
    Handler,
    frame_code,
)

__all__ = ["BODY_IN", "KINDS", "RAW_OUT", "ChannelFrame", "Columns", "Finding", "audit_channel",
           "audit_channel_columns", "frame_code"]


def audit_channel_columns(cols: Columns, start: int = 0, stop: int | None = None) -> list[Finding]:
    """Audit one channel: rows start..stop of `cols`, already in seq order."""
    state = ChannelState()
    codes, handlers = cols.code, _HANDLERS
    for i in range(start, len(codes) if stop is None else stop):
        code = codes[i]
        if code == OPEN_OUT:
            _finish(state)
            found, state = state.findings, ChannelState()
            state.findings = found
            handlers = _HANDLERS
            continue
        if state.broker_closed and code != CLOSE_OK_IN:
            continue  # ERR-03: the broker ignores what follows its channel.close
        if code == RAW_OUT:
            state.pending_error = None
            handlers = _OPAQUE_HANDLERS
            continue
        handlers[code](state, cols, i)
    _finish(state)
    return state.findings


class ChannelFrame(NamedTuple):
    """One frame record, the fields the audit reads (a convenience for tests and callers)."""

    seq: int
    direction: str
    method: str | None
    delivery_tag: int | None = None
    multiple: bool | None = None
    requeue: bool | None = None
    redelivered: bool | None = None
    consumer_tag: str | None = None
    reply_code: int | None = None
    frame_type: str = "method"
    prefetch_count: int | None = None
    no_ack: bool | None = None
    global_qos: bool | None = None
    body_digest: str | None = None


def audit_channel(frames: Sequence[ChannelFrame]) -> list[Finding]:
    """Audit one channel's frames (any order: they are sorted by seq)."""
    rows = [(code, f) for f in sorted(frames, key=lambda f: f.seq)
            if (code := frame_code(f.direction, f.frame_type, f.method)) is not None]
    fs = [f for _, f in rows]

    def column(name: str) -> list[Any]:
        return [getattr(f, name) for f in fs]

    cols = Columns([c for c, _ in rows], column("seq"), column("delivery_tag"), column("multiple"),
                   column("requeue"), column("redelivered"), column("consumer_tag"), column("reply_code"),
                   column("prefetch_count"), column("no_ack"), column("global_qos"), column("body_digest"))
    return audit_channel_columns(cols)


# --- deliveries ----------------------------------------------------------------------------


def _deliver(s: ChannelState, c: Columns, i: int) -> None:
    tag = c.delivery_tag[i] or 0
    if tag != s.next_tag:  # ACK-01
        s.find(c.seq[i], "tag-sequence", f"delivery tag {tag}, expected {s.next_tag}")
    s.next_tag = tag + 1
    ctag = c.consumer_tag[i]
    consumer = s.consumers.get(ctag) if ctag is not None else None
    _expect_identity(s, c, i, tag)
    if consumer is not None and consumer.no_ack:
        return
    s.outstanding[tag] = ctag
    if consumer is not None:
        consumer.unacked += 1
        if consumer.limit and consumer.unacked > consumer.limit:  # QOS-02
            s.find(c.seq[i], "prefetch-exceeded",
                   f"consumer {ctag} holds {consumer.unacked} unacked deliveries, prefetch {consumer.limit}")


def _get_ok(s: ChannelState, c: Columns, i: int) -> None:
    tag = c.delivery_tag[i] or 0
    if tag != s.next_tag:  # ACK-01: basic.get-ok shares the channel's counter
        s.find(c.seq[i], "tag-sequence", f"basic.get-ok tag {tag}, expected {s.next_tag}")
    s.next_tag = tag + 1
    _expect_identity(s, c, i, tag)
    if not s.get_no_ack:
        s.outstanding[tag] = None
    _reply(s, c, i)


def _expect_identity(s: ChannelState, c: Columns, i: int, tag: int) -> None:
    s.awaiting_body = tag if c.body_digest is not None else 0
    if s.awaiting_body:
        s.identity.pop(tag, None)
    s.awaiting_redelivered = bool(c.redelivered[i])


def _body(s: ChannelState, c: Columns, i: int) -> None:
    tag, s.awaiting_body = s.awaiting_body, 0
    digest = c.body_digest[i] if c.body_digest is not None else None
    if not tag or digest is None:
        return
    if tag in s.outstanding:
        s.identity[tag] = digest
    if s.requeued[digest] > 0:
        s.requeued[digest] -= 1
        if not s.awaiting_redelivered:  # RQ-04
            s.find(c.seq[i], "redelivered-missing",
                   f"delivery tag {tag} repeats a message requeued on this channel without redelivered=true")


def _get(s: ChannelState, c: Columns, i: int) -> None:
    s.get_no_ack = bool(c.no_ack[i]) if c.no_ack is not None else False
    _request(s, c, i)


def _qos(s: ChannelState, c: Columns, i: int) -> None:
    if c.prefetch_count is not None and not (c.global_qos is not None and c.global_qos[i]):
        s.consumer_prefetch = c.prefetch_count[i] or 0  # QOS-02: applies to later consumers
    _request(s, c, i)


def _consume(s: ChannelState, c: Columns, i: int) -> None:
    no_ack = bool(c.no_ack[i]) if c.no_ack is not None else False
    limit = s.consumer_prefetch if c.prefetch_count is not None else 0
    s.consume_limits.append((c.consumer_tag[i] or None, limit, no_ack))
    _request(s, c, i)


def _consume_ok(s: ChannelState, c: Columns, i: int) -> None:
    ctag = c.consumer_tag[i]
    pending = s.consume_limits
    match = next((p for p in pending if p[0] == ctag), None) or (pending[0] if pending else None)
    if match is not None:
        pending.remove(match)
    if ctag is not None:
        limit, no_ack = (match[1], match[2]) if match else (0, False)
        s.consumers[ctag] = Consumer(limit, no_ack)
    _reply(s, c, i)


# --- consumer acknowledgements (ACK-03..08) ------------------------------------------------


def _client_ack(s: ChannelState, c: Columns, i: int) -> None:
    if s.pending_error is not None or s.client_closed:
        return  # the broker is about to close the channel anyway
    tag = c.delivery_tag[i] or 0
    code = c.code[i]
    multiple = bool(c.multiple[i]) and code != REJECT_OUT
    requeue = code != ACK_OUT and bool(c.requeue[i])
    if multiple and tag == 0:  # ACK-06: everything outstanding
        tags = list(s.outstanding)
    elif tag not in s.outstanding:
        kind = "multi-ack-beyond" if multiple else "ack-unknown-tag" if tag == 0 or tag >= s.next_tag \
            else "ack-settled-tag"
        s.pending_error = Finding(c.seq[i], kind, _ack_text(code, tag, multiple), KINDS[kind][1])
        s.requests_after_error = 0
        return
    elif multiple:
        tags = [t for t in s.outstanding if t <= tag]
    else:
        tags = [tag]
    for t in tags:
        ctag = s.outstanding.pop(t)
        if s.tx:
            s.tx_settled.append((t, ctag, requeue))
        else:
            _settle(s, t, ctag, requeue)


def _ack_text(code: int, tag: int, multiple: bool) -> str:
    name = {ACK_OUT: "basic.ack", NACK_OUT: "basic.nack", REJECT_OUT: "basic.reject"}[code]
    return f"{name} delivery-tag={tag}{' multiple' if multiple else ''}"


def _settle(s: ChannelState, tag: int, ctag: str | None, requeue: bool) -> None:
    consumer = s.consumers.get(ctag) if ctag is not None else None
    if consumer is not None and consumer.unacked:
        consumer.unacked -= 1
    digest = s.identity.pop(tag, None)
    if requeue and digest is not None:
        s.requeued[digest] += 1


def _recover(s: ChannelState, c: Columns, i: int) -> None:
    if s.pending_error is None and not s.client_closed:
        for tag, ctag in list(s.outstanding.items()):  # ACK-09: requeue everything unacked
            _settle(s, tag, ctag, True)
        s.outstanding.clear()
    _request(s, c, i)


def _tx_select(s: ChannelState, c: Columns, i: int) -> None:
    s.tx = True
    _request(s, c, i)


def _tx_commit(s: ChannelState, c: Columns, i: int) -> None:
    for tag, ctag, requeue in s.tx_settled:  # ACK-08: settlements take effect at commit
        _settle(s, tag, ctag, requeue)
    s.tx_settled.clear()
    _request(s, c, i)


def _tx_rollback(s: ChannelState, c: Columns, i: int) -> None:
    if s.tx_settled:  # ACK-08: rolled-back acks are outstanding again
        merged = {**s.outstanding, **{t: ctag for t, ctag, _ in s.tx_settled}}
        s.outstanding = dict(sorted(merged.items()))
        s.tx_settled.clear()
    _request(s, c, i)


# --- publisher confirms (PC) ---------------------------------------------------------------


def _confirm_select(s: ChannelState, c: Columns, i: int) -> None:
    s.confirming = True  # PC-01: selecting again does not reset the counter
    _request(s, c, i)


def _publish(s: ChannelState, c: Columns, i: int) -> None:
    if s.confirming and not s.client_closed:  # PC-02: seqnos count publishes after select
        s.published += 1
        s.unconfirmed[s.published] = None


def _confirm(s: ChannelState, c: Columns, i: int) -> None:
    tag = c.delivery_tag[i] or 0
    what = f"{'basic.ack' if c.code[i] == ACK_IN else 'basic.nack'} delivery-tag={tag}"
    if bool(c.multiple[i]):
        if tag > s.published:
            s.find(c.seq[i], "confirm-unpublished", f"{what} multiple, only {s.published} published")
        covered = []
        for seqno in s.unconfirmed:
            if seqno > tag:
                break
            covered.append(seqno)
        if not covered and tag <= s.published:
            s.find(c.seq[i], "confirm-duplicate", f"{what} multiple confirms nothing new")
        for seqno in covered:
            del s.unconfirmed[seqno]
    elif tag in s.unconfirmed:
        del s.unconfirmed[tag]
    elif 0 < tag <= s.published:
        s.find(c.seq[i], "confirm-duplicate", f"{what}: seqno {tag} was already confirmed")
    else:
        s.find(c.seq[i], "confirm-unpublished", f"{what}: {s.published} published in confirm mode")


# --- channel lifetime and the broker's answer to invalid acks ------------------------------


def _request(s: ChannelState, c: Columns, i: int) -> None:
    if s.pending_error is not None:
        s.requests_after_error += 1


def _reply(s: ChannelState, c: Columns, i: int) -> None:
    error = s.pending_error
    if error is not None and s.requests_after_error:
        s.find(error.seq, error.kind,
               f"{error.detail}: the broker kept the channel open (answered a later request at seq "
               f"{c.seq[i]}); expected channel.close 406")
        s.pending_error = None


def _client_close(s: ChannelState, c: Columns, i: int) -> None:
    s.client_closed = True


def _broker_close(s: ChannelState, c: Columns, i: int) -> None:
    error, s.pending_error = s.pending_error, None
    s.broker_closed = True
    s.unconfirmed.clear()  # PC-13: pending confirms die with the channel
    if error is not None and c.reply_code[i] != 406:
        s.find(error.seq, error.kind, f"{error.detail}: the broker closed the channel with "
                                      f"{c.reply_code[i]}, expected 406 PRECONDITION_FAILED")


def _close_ok(s: ChannelState, c: Columns, i: int) -> None:
    error, s.pending_error = s.pending_error, None
    if error is not None and not s.broker_closed:
        s.find(error.seq, error.kind, f"{error.detail}: the broker answered the client's channel.close "
                                      "with close-ok; expected channel.close 406 first")
    if s.client_closed and not s.broker_closed and s.unconfirmed:
        missing = list(s.unconfirmed)
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        s.find(c.seq[i], "confirm-missing",
               f"{len(missing)} published seqno(s) never confirmed before the channel closed: {shown}")
    s.unconfirmed.clear()
    s.broker_closed = True  # the lifetime is over; only channel.open starts a new one


def _finish(s: ChannelState) -> None:
    error = s.pending_error
    if error is not None:
        s.findings.append(Finding(error.seq, error.kind,
                                  f"{error.detail}: the trace ends before the broker's channel.close 406",
                                  "warning"))
        s.pending_error = None


def _ignore(s: ChannelState, c: Columns, i: int) -> None:
    return None


def _tag_only(s: ChannelState, c: Columns, i: int) -> None:
    tag = c.delivery_tag[i] or 0
    if tag != s.next_tag:  # ACK-01
        what = "delivery tag" if c.code[i] == DELIVER_IN else "basic.get-ok tag"
        s.find(c.seq[i], "tag-sequence", f"{what} {tag}, expected {s.next_tag}")
    s.next_tag = tag + 1


def _opaque_close(s: ChannelState, c: Columns, i: int) -> None:
    s.broker_closed = True


_HANDLERS: list[Handler] = [_ignore] * N_CODES
for _code, _handler in ((DELIVER_IN, _deliver), (GET_OK_IN, _get_ok), (GET_OUT, _get), (ACK_OUT, _client_ack),
                        (NACK_OUT, _client_ack), (REJECT_OUT, _client_ack), (ACK_IN, _confirm),
                        (NACK_IN, _confirm), (PUBLISH_OUT, _publish), (CONFIRM_SELECT_OUT, _confirm_select),
                        (QOS_OUT, _qos), (CONSUME_OUT, _consume), (CONSUME_OK_IN, _consume_ok),
                        (RECOVER_OUT, _recover), (CLOSE_OUT, _client_close), (CLOSE_IN, _broker_close),
                        (CLOSE_OK_IN, _close_ok), (TX_SELECT_OUT, _tx_select), (TX_COMMIT_OUT, _tx_commit),
                        (TX_ROLLBACK_OUT, _tx_rollback), (REPLY_IN, _reply), (REQUEST_OUT, _request),
                        (BODY_IN, _body)):
    _HANDLERS[_code] = _handler

# After opaque raw bytes from the client: only what the broker alone decides is checked.
_OPAQUE_HANDLERS: list[Handler] = [_ignore] * N_CODES
for _code, _handler in ((DELIVER_IN, _tag_only), (GET_OK_IN, _tag_only), (CLOSE_IN, _opaque_close),
                        (CLOSE_OK_IN, _opaque_close)):
    _OPAQUE_HANDLERS[_code] = _handler
