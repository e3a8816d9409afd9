"""What a machine example reports: its program (the steps as run) and its frames.

Responsibility: the two lazily formatted notes of every machine example (`Program`, `FrameLog`),
and one frame as a line of text (`format_frame`).
Rules:
- The frames of a run are formatted only when Hypothesis reports the minimal failing example
  (`FrameLog` is passed to `note()` unformatted).
- A program lists the steps with their picks resolved; `as_failing_case` writes them in
  Hypothesis's own report format, which the mutation report counts.
"""

from __future__ import annotations

from typing import Any

from codec import Command
from codec.frames import BodyFrame, HeaderFrame, MethodFrame, describe
from conformance.drivers.raw import Recorder


class Program:
    """The steps of one example as they ran, values resolved: what a failure is reported as
    (formatted lazily, like `FrameLog`). Steps of the final check are marked `# at teardown`."""

    def __init__(self, machine: str) -> None:
        self.machine = machine
        self.steps: list[str] = []
        self.rules = 0  # steps that were rules (not the final check)

    def add(self, rule: str, arguments: dict[str, Any], *, teardown: bool = False) -> None:
        text = f"{rule}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
        self.steps.append(text + ("  # at teardown" if teardown else ""))
        self.rules += not teardown

    def __repr__(self) -> str:
        lines = [f"the steps as run ({self.rules}), picks resolved:", f"  m = {self.machine}()"]
        lines += [f"  m.{text}" for text in self.steps]
        return "\n".join(lines)

    def as_failing_case(self) -> str:
        """The steps in Hypothesis's own report format (`state.` lines, counted by the mutation report)."""
        lines = ["Failing test case: <state machine>", f"state = {self.machine}()"]
        lines += [f"state.{text}" for text in self.steps if not text.endswith("# at teardown")]
        return "\n".join([*lines, "state.teardown()"])


class FrameLog:
    """The frames of one run, formatted lazily (only Hypothesis's final report prints them): the
    recorder's from index `since` on (a relay's recorder holds every example of a test)."""

    LIMIT = 400

    def __init__(self, recorder: Recorder, since: int = 0) -> None:
        self.recorder, self.since = recorder, since

    def __repr__(self) -> str:
        frames = self.recorder.frames[self.since:]
        lines = [f"frames of this run ({len(frames)}, oldest first):"]
        skipped = max(0, len(frames) - self.LIMIT)
        if skipped:
            lines.append(f"  ... {skipped} earlier frames")
        start = frames[0].ts if frames else 0.0
        for record in frames[skipped:]:
            arrow = "<" if record.direction == "in" else ">"
            lines.append(f"  {record.ts - start:8.4f} c{record.connection} {arrow} {format_frame(record.frame)}")
        return "\n".join(lines)


def format_frame(frame: Any) -> str:
    if isinstance(frame, BodyFrame):
        return f"ch{frame.channel} body {bytes(frame.payload)[:40]!r}"
    if isinstance(frame, (MethodFrame, HeaderFrame)):
        return describe(frame)
    if isinstance(frame, Command):
        method = frame.method
        text = f"ch{frame.channel} {method.NAME} {method.fields()}"
        return text + (f" body {frame.body[:40]!r}" if method.HAS_CONTENT else "")
    if isinstance(frame, bytes):
        return f"raw {frame[:40]!r}"
    return describe(frame)
