"""What a rule test's final pytest report carries for tools that read reports, not records.

Responsibility: the plugin attaches one `TestEvidence` (the run kernel's,
`conformance.results.evidence`) to the teardown report of every rule test (`attach`); the
`amqp-conformance run` command and the pytest-xdist controller read it back (`from_report`) to
count verdicts, apply a baseline and write JUnit XML.

Rules:
- The evidence travels as one extra report attribute named `EVIDENCE` (pytest serialises a
  report's extra attributes, so pytest-xdist ships it from a worker to the controller) whose
  value holds only plain types (str, int, float, list, dict, None). It is not a user
  property, so `--junitxml` output stays as pytest writes it.
- A report without the attribute is not a rule test's final report (`from_report` → None).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from conformance.plugin.classify import hypothesis_evidence, reply_of
from conformance.results.evidence import (  # re-exported: the kernel's
    FRAME_LINES,
    FRAME_LINES_NOT_PASSED,
    TestEvidence,
    frame_log,
    from_plain,
    test_key,
    to_plain,
)
from conformance.results.observations import FrameRecord

__all__ = ["EVIDENCE", "FRAME_LINES", "FRAME_LINES_NOT_PASSED", "TestEvidence", "attach", "build", "from_report",
           "test_key"]
EVIDENCE = "amqpc_evidence"


def attach(report: pytest.TestReport, evidence: TestEvidence) -> None:
    setattr(report, EVIDENCE, to_plain(evidence))


def from_report(report: pytest.TestReport) -> TestEvidence | None:
    return from_plain(getattr(report, EVIDENCE, None))


def build(nodeid: str, verdict: str, area: str, rule_ids: Sequence[str], message: str | None,
          failure: BaseException | None, frames: Sequence[FrameRecord], duration: float,
          failures: dict[str, str] | None = None) -> TestEvidence:
    """The evidence of a finished test: its verdict, the broker's close and its frame log."""
    reply = reply_of(failure, frames)
    _, example = hypothesis_evidence(failure, None)  # a machine's shrunk steps and the frames of that run
    reply_text = (f"{reply.scope} {reply.code} ({reply.class_id}/{reply.method_id}) {reply.text}"
                  if reply is not None else None)
    limit = FRAME_LINES if verdict == "passed" else FRAME_LINES_NOT_PASSED
    return TestEvidence(nodeid, verdict, area, tuple(rule_ids), message, reply_text, frame_log(frames, limit),
                        duration, {"minimal_example": example} if example else {}, dict(failures or {}))
