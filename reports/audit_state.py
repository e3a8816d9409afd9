"""The trace audit's vocabulary and per-channel state (see `reports.audit` for the checks).

Responsibility: the audit codes of frame records (`frame_code`), the finding kinds with their
rule ids and severities (`KINDS`), the columnar input (`Columns`), the findings (`Finding`), and
what one channel lifetime has promised so far (`ChannelState`).

Rules: plain data, no checking logic; codes are direction-specific small ints so the hot loop
dispatches through a list.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

# Direction-specific frame codes; everything else is irrelevant to the audit and dropped.
(DELIVER_IN, GET_OK_IN, GET_OUT, ACK_OUT, NACK_OUT, REJECT_OUT, ACK_IN, NACK_IN, PUBLISH_OUT,
 CONFIRM_SELECT_OUT, QOS_OUT, CONSUME_OUT, CONSUME_OK_IN, RECOVER_OUT, OPEN_OUT, CLOSE_OUT, CLOSE_IN,
 CLOSE_OK_IN, TX_SELECT_OUT, TX_COMMIT_OUT, TX_ROLLBACK_OUT, REPLY_IN, REQUEST_OUT, BODY_IN, RAW_OUT) = range(25)
N_CODES = 25

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
        if frame_type == "raw" and direction == "out":
            return RAW_OUT
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
