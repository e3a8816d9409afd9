"""The trace audit of one channel given as Python values (tests, small traces).

Responsibility: sort one channel's frame records (`ChannelFrame`: the fields the audit reads of a
`conformance.results.records` frame record) by `seq`, turn them into the model's columns and
hand them to the model (`conformance.model.recorded_channel.observe_channel`), which returns
the findings. No rule is stated here: every judgment (ACK-01/03..09, QOS-02/03, RQ-01/02/04,
PC-02/04/05/13, CCN-01/02/04, TMO-02) is the model's, with the kinds and rule ids of
`conformance.model.recorded_frames.KINDS`. What the model cannot judge is reported as findings
of severity `unjudged` (a connection recorded mid-stream, undecodable frames such as unknown
methods), never dropped.

Tables of frames are audited by `reports.audit.partition` (the work of each Spark task) under a
plan of `reports.audit.plan` (the driver's side).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from conformance.model.recorded_channel import observe_channel
from conformance.model.recorded_frames import DEFAULT_CONTEXT, Columns, Context, Finding, frame_code


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
    queue: str | None = None
    ts: int = 0  # microseconds
    reply_text: str | None = None
    nowait: bool | None = None
    priority: int | None = None


def audit_channel(frames: Sequence[ChannelFrame], context: Context = DEFAULT_CONTEXT) -> list[Finding]:
    """Audit one channel's frames (any order: they are sorted by seq)."""
    rows = [(code, f) for f in sorted(frames, key=lambda f: f.seq)
            if (code := frame_code(f.direction, f.frame_type, f.method, f.priority)) is not None]
    fs = [f for _, f in rows]

    def column(name: str) -> list[Any]:
        return [getattr(f, name) for f in fs]

    cols = Columns([c for c, _ in rows], *(column(name) for name in Columns._fields[1:]))
    return observe_channel(cols, context=context)
