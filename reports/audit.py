"""Trace audit: the conformance model judges recorded frames, channel by channel.

Responsibility: hand recorded frame records of `conformance.results.records` (one channel = one
(run, test, connection, channel) in `seq` order) to the model's observer
(`conformance.model.observer.observe_channel`) and return its findings. No rule is stated
here: every judgment (ACK-01/03..09, QOS-02/03, RQ-01/02/04, PC-02/04/05/13, CCN-01/02/04, TMO-02) is
the model's, with the kinds and rule ids of `conformance.model.trace.KINDS`.
What the model cannot judge is reported as findings of severity `unjudged` (a connection
recorded mid-stream, undecodable frames such as unknown methods), never dropped.

This module holds the in-process entry point for Python lists (tests, small traces);
`reports.audit_arrow` feeds Arrow tables and builds each connection's `Context`, and
`reports.audit_spark` runs that on Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from conformance.model.observer import observe_channel
from conformance.model.trace import (
    BODY_IN,
    DEFAULT_CONTEXT,
    GAP,
    KINDS,
    PRIORITY_IN,
    RAW_OUT,
    UNJUDGED,
    Columns,
    Context,
    Finding,
    frame_code,
)

__all__ = ["BODY_IN", "DEFAULT_CONTEXT", "GAP", "KINDS", "PRIORITY_IN", "RAW_OUT", "UNJUDGED", "ChannelFrame", "Columns", "Context", "Finding",
           "audit_channel", "audit_channel_columns", "frame_code"]


def audit_channel_columns(cols: Columns, start: int = 0, stop: int | None = None,
                          context: Context = DEFAULT_CONTEXT) -> list[Finding]:
    """Audit one channel: rows start..stop of `cols`, already in seq order."""
    return observe_channel(cols, start, stop, context)


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
    return audit_channel_columns(cols, context=context)
