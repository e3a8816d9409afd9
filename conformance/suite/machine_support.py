"""Support pieces of the model-vs-broker machines: target, settings, client, frame log.

Responsibility: what the machines (machine_base and the test_machine_* files) need around
Hypothesis and the raw driver, kept apart so machine_base holds only the run loop.
Rules:
- `AMQPC_MACHINE_EXAMPLES` overrides every machine's example count (deeper runs); deadlines
  are off (a broker's latency is not the code under test).
- Every wait is scaled by the target's timeout scale (`MachineTarget.timeout`).
- The frames of a run are formatted only when Hypothesis reports the minimal failing example
  (`FrameLog` is passed to `note()` unformatted).
- Broker closes become model outcomes (`to_outcome`): scope, code, class and method id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings

from codec import Command
from codec.frames import BodyFrame, HeaderFrame, MethodFrame, describe
from conformance.drivers.raw import ChannelClosed as WireChannelClosed
from conformance.drivers.raw import ConnectionClosed as WireConnectionClosed
from conformance.drivers.raw import DriverError, RawClient, Recorder
from conformance.model import ChannelClosed, ConnectionClosed, Outcome

ENV_EXAMPLES = "AMQPC_MACHINE_EXAMPLES"
ENV_SHRINK = "AMQPC_MACHINE_SHRINK"


@dataclass(frozen=True)
class MachineTarget:
    """Where and how a machine runs: broker URL, profile name, timeout scale."""

    url: str
    profile: str
    timeout_scale: float = 1.0

    def timeout(self, seconds: float) -> float:
        return seconds * self.timeout_scale


def machine_settings(examples: int, steps: int) -> settings:
    count = int(os.environ.get(ENV_EXAMPLES, "0") or 0) or examples
    phases = tuple(Phase)
    if os.environ.get(ENV_SHRINK) == "0":  # mutation runs: a kill matters, not its minimal form
        phases = (Phase.explicit, Phase.reuse, Phase.generate)
    return settings(max_examples=count, stateful_step_count=steps, deadline=None,
                    suppress_health_check=list(HealthCheck), phases=phases)


def to_outcome(exc: DriverError) -> Outcome:
    if isinstance(exc, WireChannelClosed):
        return ChannelClosed(exc.code, exc.class_id, exc.method_id)
    if isinstance(exc, WireConnectionClosed):
        return ConnectionClosed(exc.code, exc.class_id, exc.method_id)
    raise exc


class FrameLog:
    """The frames of one run, formatted lazily (only Hypothesis's final report prints them)."""

    LIMIT = 400

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def __repr__(self) -> str:
        frames = self.recorder.frames
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


class MachineClient(RawClient):
    """RawClient plus one non-blocking read, for waiting on several connections at once."""

    def connect(self) -> MachineClient:
        super().connect()
        return self

    def read_available(self) -> None:
        """Read what the socket holds now (the caller saw it readable) into the inboxes."""
        self._read(0.001)
