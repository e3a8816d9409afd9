"""What a rule test's final pytest report carries for tools that read reports, not records.

Responsibility: the plugin attaches one `TestEvidence` to the teardown report of every rule
test (`attach`); the `amqp-conformance run` command and the pytest-xdist controller read it
back (`from_report`) to count verdicts, apply a baseline and write JUnit XML.

Rules:
- The evidence travels as one extra report attribute named `EVIDENCE` (pytest serialises a
  report's extra attributes, so pytest-xdist ships it from a worker to the controller) whose
  value holds only plain types (str, int, float, list, dict, None). It is not a user
  property, so `--junitxml` output stays as pytest writes it.
- The frame log is bounded (`FRAME_LINES` lines for a passing test, more for the others);
  the full frames are in the Parquet records.
- A report without the attribute is not a rule test's final report (`from_report` → None).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest

from conformance.drivers.raw import FrameRecord
from conformance.plugin.classify import frame_log, hypothesis_evidence, reply_of

EVIDENCE = "amqpc_evidence"
FRAME_LINES = 200
FRAME_LINES_NOT_PASSED = 2000


@dataclass(frozen=True)
class TestEvidence:
    """One rule test as the run command sees it."""

    __test__ = False  # not a pytest test class

    nodeid: str
    verdict: str  # conformance.plugin.verdicts.Verdict value
    area: str
    rule_ids: tuple[str, ...]
    message: str | None = None
    reply: str | None = None  # "channel 406 (60/80) PRECONDITION_FAILED - ...", the broker's close
    frames: str = ""  # outcomes.frame_log
    duration: float = 0.0  # seconds in setup + call + teardown
    extra: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # a failed verdict: broken rule -> its failure text

    @property
    def failed_rules(self) -> tuple[str, ...]:
        """The rules a failure saw broken (its own rules when it did not say: older evidence)."""
        return tuple(self.failures) or (self.rule_ids if self.verdict == "failed" else ())

    def headline(self) -> tuple[str, str]:
        """(the rules to name first, the first line of what happened) for one console line: a failure
        names the rules it saw broken and its first text line, any other verdict its rules and message."""
        if self.verdict == "failed" and self.failures:
            text = next(iter(self.failures.values()), "")
            return ", ".join(self.failed_rules), (text.strip().splitlines() or [""])[0]
        return ", ".join(self.rule_ids), ((self.message or "").strip().splitlines() or [""])[0]

    def failure_text(self, rule_id: str) -> str:
        """What the failure said about `rule_id` (the whole message when it did not say)."""
        return self.failures.get(rule_id) or self.message or ""

    @property
    def test_key(self) -> str:
        """The node id without its directories: "test_cancel.py::test_name[param]"."""
        return test_key(self.nodeid)


def test_key(nodeid: str) -> str:
    path, sep, rest = nodeid.partition("::")
    return path.rsplit("/", 1)[-1] + sep + rest


def attach(report: pytest.TestReport, evidence: TestEvidence) -> None:
    value = asdict(evidence)
    value["rule_ids"] = list(evidence.rule_ids)
    setattr(report, EVIDENCE, value)


def from_report(report: pytest.TestReport) -> TestEvidence | None:
    value = getattr(report, EVIDENCE, None)
    if not isinstance(value, dict):
        return None
    data = dict(value)
    data["rule_ids"] = tuple(data.get("rule_ids") or ())
    data["extra"] = dict(data.get("extra") or {})
    data["failures"] = dict(data.get("failures") or {})
    return TestEvidence(**data)


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
