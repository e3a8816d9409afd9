"""Trace audit: replay one channel's recorded frames and report what the broker got wrong.

Responsibility: plain-Python per-channel checkers over the frame records of
`conformance.results` (one channel = one (run, test, connection, channel) in `seq` order).
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
Acks inside a transaction (ACK-08) are checked at once, settled at tx.commit and restored by
tx.rollback. Checkers never raise on odd input: an unexpected frame is skipped, not fatal.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

# Direction-specific frame codes; everything else is irrelevant to the audit and dropped.
(DELIVER_IN, GET_OK_IN, GET_OUT, ACK_OUT, NACK_OUT, REJECT_OUT, ACK_IN, NACK_IN, PUBLISH_OUT,
 CONFIRM_SELECT_OUT, QOS_OUT, CONSUME_OUT, CONSUME_OK_IN, RECOVER_OUT, OPEN_OUT, CLOSE_OUT, CLOSE_IN,
 CLOSE_OK_IN, TX_SELECT_OUT, TX_COMMIT_OUT, TX_ROLLBACK_OUT, REPLY_IN, REQUEST_OUT, BODY_IN) = range(24)
N_CODES = 24

_OUT = {"basic.get": GET_OUT, "basic.ack": ACK_OUT, "basic.nack": NACK_OUT, "basic.reject": REJECT_OUT,
        "basic.publish": PUBLISH_OUT, "confirm.select": CONFIRM_SELECT_OUT, "basic.qos": QOS_OUT,
        "basic.consume": CONSUME_OUT, "basic.recover": RECOVER_OUT, "basic.recover-async": RECOVER_OUT,
        "channel.open": OPEN_OUT, "channel.close": CLOSE_OUT, "tx.select": TX_SELECT_OUT,
        "tx.commit": TX_COMMIT_OUT, "tx.rollback": TX_ROLLBACK_OUT}
_IN = {"basic.deliver": DELIVER_IN, "basic.get-ok": GET_OK_IN, "basic.ack": ACK_IN, "basic.nack": NACK_IN,
       "basic.consume-ok": CONSUME_OK_IN, "channel.close": CLOSE_IN, "channel.close-ok": CLOSE_OK_IN}
# Client frames that carry no request (no reply expects them): never prove the broker is alive.
_NOT_REQUESTS = frozenset({"channel.close-ok", "channel.flow-ok", "basic.cancel-ok"})

KINDS: dict[str, tuple[str, str]] = {  # kind -> (rule id, severity)
    "tag-sequence": ("ACK-01", "error"),
    "ack-unknown-tag": ("ACK-03", "error"),
    "ack-settled-tag": ("ACK-04", "error"),
    "multi-ack-beyond": ("ACK-05", "error"),
    "confirm-unpublished": ("PC-02", "error"),
    "confirm-duplicate": ("PC-05", "error"),
    "confirm-missing": ("PC-05", "warning"),
    "prefetch-exceeded": ("QOS-02", "error"),
    "redelivered-missing": ("RQ-04", "error"),
}


def frame_code(direction: str | None, frame_type: str | None, method: str | None) -> int | None:
    """The audit code of one frame record, or None when the audit ignores it."""
    if method is None:
        return BODY_IN if frame_type == "body" and direction == "in" else None
    if direction == "out":
        if method in _OUT:
            return _OUT[method]
        return None if method in _NOT_REQUESTS or method.startswith("connection.") else REQUEST_OUT
    if method in _IN:
        return _IN[method]
    if method.endswith("-ok") or method == "basic.get-empty":
        return None if method.startswith("connection.") else REPLY_IN
    return None


class Finding(NamedTuple):
    seq: int
    kind: str
    detail: str
    severity: str = "error"

    @property
    def rule_id(self) -> str:
        return KINDS[self.kind][0]


class Columns(NamedTuple):
    """One or more channels' frames as parallel lists (the audit's input), in seq order.

    Optional columns are None when the records lack them; the checks needing them are off.
    """

    code: Sequence[int]
    seq: Sequence[int]
    delivery_tag: Sequence[int | None]
    multiple: Sequence[bool | None]
    requeue: Sequence[bool | None]
    redelivered: Sequence[bool | None]
    consumer_tag: Sequence[str | None]
    reply_code: Sequence[int | None]
    prefetch_count: Sequence[int | None] | None = None
    no_ack: Sequence[bool | None] | None = None
    global_qos: Sequence[bool | None] | None = None
    body_digest: Sequence[str | None] | None = None


@dataclass(slots=True)
class Consumer:
    limit: int  # 0 = unlimited
    no_ack: bool
    unacked: int = 0


@dataclass(slots=True)
class ChannelState:
    """Everything the broker promised on one channel lifetime, as seen in the frames."""

    findings: list[Finding] = field(default_factory=list)
    next_tag: int = 1
    outstanding: dict[int, str | None] = field(default_factory=dict)  # tag -> consumer tag; ascending
    identity: dict[int, str] = field(default_factory=dict)  # tag -> message identity, when known
    awaiting_body: int = 0  # tag of the last delivery whose identity is still unknown
    awaiting_redelivered: bool = False  # that delivery's redelivered flag
    requeued: Counter[str] = field(default_factory=Counter)
    consumers: dict[str, Consumer] = field(default_factory=dict)
    consume_limits: deque[tuple[str | None, int, bool]] = field(default_factory=deque)
    consumer_prefetch: int = 0
    get_no_ack: bool = False
    confirming: bool = False
    published: int = 0
    unconfirmed: dict[int, None] = field(default_factory=dict)  # ascending seqnos
    tx: bool = False
    tx_settled: list[tuple[int, str | None, bool]] = field(default_factory=list)  # (tag, ctag, requeue)
    pending_error: Finding | None = None  # an invalid ack the broker must answer with 406
    requests_after_error: int = 0
    broker_closed: bool = False
    client_closed: bool = False

    def find(self, seq: int, kind: str, detail: str) -> None:
        self.findings.append(Finding(seq, kind, detail, KINDS[kind][1]))


Handler = Callable[[ChannelState, Columns, int], None]


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
            continue
        if state.broker_closed and code != CLOSE_OK_IN:
            continue  # ERR-03: the broker ignores what follows its channel.close
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
