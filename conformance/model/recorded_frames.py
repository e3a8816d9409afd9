"""Recorded frames as the model reads them: frame codes, the columnar input, findings, context.

Responsibility: the vocabulary of `conformance.model.recorded_channel` (the model judging one recorded
channel): which recorded frames matter and as what (`frame_code`), the finding kinds with their
rule ids and severities (`KINDS`), one or more channels' frames as parallel columns (`Columns`),
what is known of the channel's connection (`Context`), and a finding (`Finding`).

Rules:
- Codes are direction-specific small ints, so `recorded_channel`'s hot loop dispatches through a list.
- A frame the recorder could not decode (frame type `gap`: an unknown method, a malformed frame,
  or a capture that starts mid-stream) makes what follows on its channel unjudgeable; the
  observer counts it (severity `unjudged`), it never guesses.
- Optional columns are None when the records lack them; the checks needing them are off.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from conformance.model.traits import GlobalQos, Traits, traits

# Direction-specific frame codes; everything else is irrelevant to the trace audit and dropped.
(DELIVER_IN, GET_OK_IN, GET_OUT, ACK_OUT, NACK_OUT, REJECT_OUT, ACK_IN, NACK_IN, PUBLISH_OUT,
 CONFIRM_SELECT_OUT, QOS_OUT, CONSUME_OUT, CONSUME_OK_IN, RECOVER_OUT, OPEN_OUT, CLOSE_OUT, CLOSE_IN,
 CLOSE_OK_IN, TX_SELECT_OUT, TX_COMMIT_OUT, TX_ROLLBACK_OUT, REPLY_IN, REQUEST_OUT, BODY_IN, RAW_OUT,
 CANCEL_OUT, CANCEL_OK_IN, CANCEL_IN, DELETE_OUT, DELETE_OK_IN, GAP, QOS_OK_IN, PRIORITY_IN) = range(33)
N_CODES = 33  # PRIORITY_IN: a content header carrying priority > 0 (other headers are dropped)

_OUT = {"basic.get": GET_OUT, "basic.ack": ACK_OUT, "basic.nack": NACK_OUT, "basic.reject": REJECT_OUT,
        "basic.publish": PUBLISH_OUT, "confirm.select": CONFIRM_SELECT_OUT, "basic.qos": QOS_OUT,
        "basic.consume": CONSUME_OUT, "basic.recover": RECOVER_OUT, "basic.recover-async": RECOVER_OUT,
        "channel.open": OPEN_OUT, "channel.close": CLOSE_OUT, "tx.select": TX_SELECT_OUT,
        "tx.commit": TX_COMMIT_OUT, "tx.rollback": TX_ROLLBACK_OUT, "basic.cancel": CANCEL_OUT,
        "queue.delete": DELETE_OUT}
_IN = {"basic.deliver": DELIVER_IN, "basic.get-ok": GET_OK_IN, "basic.ack": ACK_IN, "basic.nack": NACK_IN,
       "basic.consume-ok": CONSUME_OK_IN, "channel.close": CLOSE_IN, "channel.close-ok": CLOSE_OK_IN,
       "basic.cancel-ok": CANCEL_OK_IN, "basic.cancel": CANCEL_IN, "queue.delete-ok": DELETE_OK_IN,
       "basic.qos-ok": QOS_OK_IN}
# Client frames that carry no request (no reply expects them): never prove the broker is alive.
_NOT_REQUESTS = frozenset({"channel.close-ok", "channel.flow-ok", "basic.cancel-ok"})

UNJUDGED = "unjudged"
KINDS: dict[str, tuple[str, str]] = {  # kind -> (rule id, severity)
    "tag-sequence": ("ACK-01", "error"),
    "ack-unknown-tag": ("ACK-03", "error"),
    "ack-settled-tag": ("ACK-04", "error"),
    "multi-ack-beyond": ("ACK-05", "error"),
    "confirm-unpublished": ("PC-02", "error"),
    "confirm-duplicate": ("PC-05", "error"),
    "confirm-missing": ("PC-05", "warning"),
    "prefetch-exceeded": ("QOS-02", "error"),
    "global-prefetch-exceeded": ("QOS-03", "error"),
    "redelivered-missing": ("RQ-04", "error"),
    "requeue-order": ("RQ-01", "error"),  # on a queue of unknown type: RQ-02 does not allow it either
    "returns-order": ("RQ-02", "error"),
    "cancel-missing": ("CCN-02", "error"),
    "delete-unanswered": ("CCN-02", "error"),
    "cancel-unrequested": ("CCN-01", "error"),
    "delivery-after-cancel": ("CCN-04", "error"),
    "timeout-early": ("TMO-02", "error"),
    "timeout-without-delivery": ("TMO-02", "error"),
    "unjudged-gap": ("-", UNJUDGED),
    "unjudged-mid-stream": ("-", UNJUDGED),
    "unjudged-capabilities": ("CCN-01", UNJUDGED),
    "unjudged-global-qos": ("QOS-03", UNJUDGED),
    "unjudged-requeue-order": ("RQ-01", UNJUDGED),
}


def frame_code(direction: str | None, frame_type: str | None, method: str | None,
               priority: int | None = None) -> int | None:
    """The code of one frame record, or None when the trace audit ignores it."""
    if method is None:
        if frame_type == "header":
            return PRIORITY_IN if direction == "in" and priority else None
        if frame_type == "gap":
            return GAP
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
    """One or more channels' frames as parallel lists (`recorded_channel`'s input), in seq order."""

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
    queue: Sequence[str | None] | None = None
    ts: Sequence[int] | None = None  # microseconds since the epoch
    reply_text: Sequence[str | None] | None = None
    nowait: Sequence[bool | None] | None = None  # the request expects no reply
    priority: Sequence[int | None] | None = None  # content: the message's priority property


@dataclass(frozen=True, slots=True)
class Deletion:
    """A queue.delete seen anywhere in the recording that the broker did not refuse."""

    queue: str
    ts: int  # microseconds: when the client asked
    answered: bool  # queue.delete-ok came


@dataclass(frozen=True, slots=True)
class Context:
    """What is known of a channel's connection and of the rest of the recording.

    `traits` None: the broker's product is unknown (no connection.start recorded), so
    profile-dependent checks (timeouts) are off; `cancel_notify` None: the client's capability
    is unknown (CCN-01), `notify_unknown` says why, and what depends on it is counted as not
    judged; `judged` False: the connection was recorded mid-stream.
    """

    traits: Traits | None = None
    cancel_notify: bool | None = None
    notify_unknown: str = "no connection.start-ok recorded"  # why cancel_notify is None
    deletions: Mapping[str, Sequence[Deletion]] = field(default_factory=dict)
    consumers: Mapping[str, int] = field(default_factory=dict)  # queue -> consumers in the recording
    readers: Mapping[str, int] = field(default_factory=dict)  # queue -> channels consuming or getting from it
    queue_types: Mapping[str, str] = field(default_factory=dict)  # queue -> "classic" | "quorum" | ... when declared
    judged: bool = True
    recording_end: int = 0  # microseconds: the recording's last frame (a channel never closed lasts until then)
    grace_us: int = 1_000_000  # how long a broker may take to send what a deletion (or a publish, PC-05) owes
    connection_closed: bool = False  # connection.close recorded: every channel ended there (PC-13)


DEFAULT_CONTEXT = Context()


def recorded_traits(profile: str, server_capabilities: Collection[str]) -> Traits:
    """docs/design.md decision 11: the base profile plus what the broker advertises. A broker that
    advertises `per_consumer_qos` gets RabbitMQ's meaning of basic.qos (QOS-02/03) whatever
    its base profile."""
    base = traits(profile)
    if "per_consumer_qos" in server_capabilities and not base.per_consumer_qos:
        return replace(base, global_qos=GlobalQos.CHANNEL, per_consumer_qos=True)
    return base
