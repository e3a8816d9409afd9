"""The trace audit's findings as the report shows them: with their target, test page and frames.

Responsibility: turn the audit's finding rows (`reports.audit.plan.audit_findings`) into the
report's `Violation`s, each with its target and the page of its test when that test failed
(the test page lists them too), ordered by severity; and give the first `EVIDENCE_FINDINGS` of
them their evidence: the channel's frames within `EVIDENCE_RADIUS` of the finding's frame, read
with one broadcast join.

Rules: only the shown findings' windows reach the driver.
"""

from __future__ import annotations

from collections import defaultdict

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from conformance.results.records import tag_from_column
from reports.model import EvidenceFrame, FailingTest, Violation

_SEVERITY_ORDER = {"error": 0, "warning": 1, "unjudged": 2}
EVIDENCE_RADIUS = 4  # frames either side of a finding's frame
EVIDENCE_FINDINGS = 2000  # as many as the audit page shows
_EVIDENCE_FIELDS = ("delivery_tag", "multiple", "requeue", "redelivered", "consumer_tag", "queue", "prefetch_count",
                    "reply_code", "reply_text")


def report_violations(rows: list[Row], targets: dict[str, str],
                      pages: dict[tuple[str, str], FailingTest]) -> list[Violation]:
    """Each finding row as a `Violation` of its run's target (`targets`: run id -> label), linked to
    its test's page and listed on it when the test failed (`pages`); errors first."""
    violations = []
    for r in rows:
        test = pages.get((r.run_id, r.test_id))
        v = Violation(targets.get(r.run_id, "?"), r.run_id, r.test_id, r.connection, r.channel, r.seq, r.kind,
                      r.rule_id, r.severity, r.detail, test.page if test else None)
        violations.append(v)
        if test is not None:
            test.violations.append(v)
    violations.sort(key=lambda v: (_SEVERITY_ORDER.get(v.severity, 3), v.target, v.run_id, v.test_id, v.seq))
    return violations


def attach_evidence(frames: DataFrame, violations: list[Violation]) -> None:
    """Give each shown finding its frame window: the channel's frames within EVIDENCE_RADIUS of its seq."""
    shown = [v for v in violations[:EVIDENCE_FINDINGS]]
    if not shown:
        return
    keys = frames.sparkSession.createDataFrame(
        sorted({(v.run_id, v.test_id, v.connection, v.channel, v.seq) for v in shown}),
        "run_id STRING, test_id STRING, connection INT, channel INT, finding_seq INT")
    fields = [c for c in _EVIDENCE_FIELDS if c in frames.columns]
    rows = (frames.join(F.broadcast(keys), ["run_id", "test_id", "connection", "channel"])
            .where(F.abs(F.col("seq") - F.col("finding_seq")) <= EVIDENCE_RADIUS)
            .select("run_id", "test_id", "connection", "channel", "finding_seq", "seq", "direction", "frame_type",
                    "method", *fields).collect())
    windows: dict[tuple[str, str, int, int, int], list[EvidenceFrame]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r.seq):
        values = r.asDict()
        if isinstance(values.get("delivery_tag"), int):
            values["delivery_tag"] = tag_from_column(values["delivery_tag"])
        text = " ".join(f"{k}={values[k]}" for k in fields if values[k] is not None)
        windows[r.run_id, r.test_id, r.connection, r.channel, r.finding_seq].append(
            EvidenceFrame(r.seq, r.direction, r.method or r.frame_type, text))
    for v in shown:
        v.window = windows.get((v.run_id, v.test_id, v.connection, v.channel, v.seq), [])
