"""Shapes judged against a target profile: the pre-flight's findings.

Responsibility: turn the aggregated shapes of a recording (`reports.preflight_spark` collects
them; tests build them by hand) into `Finding`s for a source and a target profile, and write the
preflight.json document.

Rules:
- A rule yields a finding only when the catalogue's version table says it differs between the two
  profiles (`Check.differs`) and the workload exercises it; one finding per (rule, what).
- The kind: `breaks` when the target refuses what the recording shows accepted; `differs` when
  both accept with other visible behaviour, or both refuse differently, or the target accepts what
  the source refused; `deprecated` when accepted the same way but deprecated on the target only.
- The source's behaviour is what the recording shows (the recorded reply); the catalogue's
  prediction for the source fills in what the wire cannot show (semantics, deprecation).
- Behaviour over time: quorum messages returned past the target's delivery limit (RQ-06), and
  manual-ack deliveries held past the target's consumer timeout (TMO-03).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from conformance.catalogue.rules import expectation
from conformance.model import timeouts
from conformance.preflight.behaviour import CHECKS, OK, Behaviour, Check, returned_out

KINDS = ("breaks", "differs", "deprecated")
Row = Mapping[str, Any]


@dataclass
class Finding:
    rule: str
    kind: str
    count: int
    connections: int
    what: str
    source_behaviour: str
    target_behaviour: str
    example: dict[str, Any]
    source: str = "catalogue"  # catalogue | live (a difference only the live replay saw)
    live: str | None = None  # the replay's verdict on this finding (--replay)
    frames: list[dict[str, Any]] = field(default_factory=list)  # the example's frame window

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def kind_of(source: Behaviour, target: Behaviour) -> str | None:
    """breaks | differs | deprecated | None (the same for the application)."""
    if target.outcome != OK and source.outcome == OK:
        return "breaks"
    if (target.outcome, target.code) != (source.outcome, source.code):
        return "differs"
    if target.outcome == OK and target.text != source.text:
        return "differs"
    if target.deprecated and not source.deprecated:
        return "deprecated"
    return None


def recorded(shape: Row, predicted: Behaviour) -> Behaviour:
    """The source's behaviour as the recording shows it (the prediction where it shows nothing)."""
    reply = shape.get("reply")
    if reply == OK:
        return Behaviour(OK, None, predicted.text if predicted.outcome == OK else "", predicted.deprecated)
    if reply in ("channel.close", "connection.close"):
        return Behaviour(reply, shape.get("reply_code"), shape.get("reply_text") or "")
    return predicted


def judge(requests: Iterable[Row], returns: Iterable[Row], held: Iterable[Row], source: str,
          target: str) -> list[Finding]:
    """The findings of a workload (aggregated shapes) moving from `source` to `target`."""
    findings: dict[tuple[str, str], Finding] = {}
    for shape in requests:
        for check in CHECKS:
            if check.applies(shape) and check.differs(source, target):
                _add(findings, check, shape, source, target)
    found = sorted(findings.values(), key=lambda f: (KINDS.index(f.kind), f.rule, f.what))
    found += _delivery_limit(list(returns), source, target)
    found += _held(list(held), source, target)
    return found


def _add(findings: dict[tuple[str, str], Finding], check: Check, shape: Row, source: str, target: str) -> None:
    src = recorded(shape, check.behaviour(source, shape))
    tgt = check.behaviour(target, shape)
    kind = kind_of(src, tgt)
    if kind is None:
        return
    key = (check.rule, check.what)
    found = findings.get(key)
    if found is None:
        findings[key] = Finding(check.rule, kind, int(shape["count"]), int(shape["connections"]), check.what,
                                src.describe(), tgt.describe(), example(shape))
        return
    found.count += int(shape["count"])
    found.connections += int(shape["connections"])
    if KINDS.index(kind) < KINDS.index(found.kind):
        found.kind, found.source_behaviour, found.target_behaviour = kind, src.describe(), tgt.describe()
        found.example = example(shape)


def example(row: Row) -> dict[str, Any]:
    """Where one occurrence is: run, test, connection, channel, seq (and the request's arguments)."""
    keys = ("run_id", "test_id", "connection", "channel", "seq", "queue", "raw_arguments", "exchange_type",
            "flags", "method", "queue_type", "global_qos", "delivery_limit")
    return {k: row[k] for k in keys if row.get(k) not in (None, "")}


def _delivery_limit(returns: list[Row], source: str, target: str) -> list[Finding]:
    """RQ-06: quorum messages the target would dead-letter or drop that the source kept (or back)."""
    if expectation("RQ-06", source) == expectation("RQ-06", target):
        return []
    findings: dict[bool, Finding] = {}
    for row in returns:
        if row.get("queue_type") != "quorum":
            continue
        counts = (row.get("by_reject") or 0, row.get("by_nack") or 0, row.get("by_other") or 0)
        out_src = returned_out(source, row.get("delivery_limit"), *counts)
        out_tgt = returned_out(target, row.get("delivery_limit"), *counts)
        if out_src == out_tgt:
            continue
        total = sum(counts)
        found = findings.get(out_tgt)
        if found is None:
            gone = "dead-lettered or dropped once over the delivery limit"
            src, tgt = ("redelivered every time", gone) if out_tgt else (gone, "redelivered every time")
            found = findings[out_tgt] = Finding(
                "RQ-06", "differs", 0, 0, "quorum message returned to its queue more times than "
                f"{'the target' if out_tgt else 'the source'}'s delivery limit allows", src, tgt, example(row))
        found.count += int(row.get("messages") or 1)
        found.connections += int(row.get("connections") or 1)
        if total > found.example.get("returns", 0):
            found.example = {**example(row), "returns": total, "by_reject": counts[0], "by_nack": counts[1],
                             "by_other": counts[2]}
    return list(findings.values())


def _held(held: list[Row], source: str, target: str) -> list[Finding]:
    """TMO-03: manual-ack deliveries held longer than one profile's consumer timeout and not the other's."""
    findings: list[Finding] = []
    for row in held:
        kind = row.get("queue_type") or "classic"
        if kind not in (timeouts.CLASSIC, timeouts.QUORUM):
            continue
        held_ms = int(row.get("held_ms") or 0)
        limits = [timeouts.effective_consumer_timeout(p, None, row.get("consumer_timeout"), queue_type=kind)
                  for p in (source, target)]
        over = [limit is not None and held_ms > limit for limit in limits]
        if over[0] == over[1]:
            continue
        def said(limit: int | None, past: bool) -> str:
            return f"timeout {limit} ms: {'the delivery times out' if past else 'no timeout'}"
        findings.append(Finding("TMO-03", "differs", int(row.get("queues") or 1), int(row.get("connections") or 1),
                                f"{kind} queue delivery held {held_ms} ms before it was settled",
                                said(limits[0], over[0]), said(limits[1], over[1]), example(row)))
    return findings


def document(source: str, target: str, findings: list[Finding], **extra: Any) -> dict[str, Any]:
    """preflight.json: {"source", "target", "findings": [...]} (plus what `extra` adds)."""
    return {"source": source, "target": target, **extra, "findings": [f.as_json() for f in findings]}
