"""A test's evidence, in the run kernel's vocabulary: its verdict, what its failure said about
each rule it saw broken, the broker's close and its frame log.

Responsibility: `TestEvidence` (one test as the gate, the baseline judge, JUnit and the console see
it), `test_key` (how a baseline and a report name a test), `frame_log` (a test's frames as text,
one line each) and the plain form a test's evidence travels in between processes (`to_plain`,
`from_plain`). The pytest plugin attaches it to a report (`conformance.plugin.evidence`); the
client judge builds it from a scenario's result. No pytest, no driver here.

Rules:
- The plain form holds only plain types (str, int, float, list, dict, None), so pytest-xdist and
  any other transport can carry it.
- The frame log is bounded (`FRAME_LINES` lines for a passing test, more for the others); the
  full frames are in the Parquet records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from codec import Command, MethodFrame
from codec.frames import describe
from conformance.results.observations import FrameRecord

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


def frame_log(frames: Sequence[FrameRecord], limit: int = 2000) -> str:
    """The frames of a test, one line each: time since the first, connection, direction, frame."""
    if not frames:
        return "(no frames recorded)"
    origin = frames[0].ts
    lines = [f"+{r.ts - origin:8.3f}s c{r.connection} {r.direction:>3} {_describe(r.frame)}" for r in frames[:limit]]
    if len(frames) > limit:
        lines.append(f"... {len(frames) - limit} more frames")
    return "\n".join(lines)


def _describe(frame: Any) -> str:
    if isinstance(frame, Command):
        text = describe(MethodFrame(frame.channel, frame.method))
        return f"{text} + content {len(frame.body)} B" if frame.method.HAS_CONTENT else text
    if isinstance(frame, bytes | bytearray):
        return f"raw {len(frame)} B {bytes(frame[:32]).hex()}{'...' if len(frame) > 32 else ''}"
    return describe(frame)


def to_plain(evidence: TestEvidence) -> dict[str, Any]:
    value = asdict(evidence)
    value["rule_ids"] = list(evidence.rule_ids)
    return value


def from_plain(value: object) -> TestEvidence | None:
    """The evidence a plain value holds (None: not a test's evidence)."""
    if not isinstance(value, dict):
        return None
    data = dict(value)
    data["rule_ids"] = tuple(data.get("rule_ids") or ())
    data["extra"] = dict(data.get("extra") or {})
    data["failures"] = dict(data.get("failures") or {})
    return TestEvidence(**data)
