"""What a run observes of a broker, in the run kernel's vocabulary: the outcomes a driver raises
(the broker closed a channel or the connection, no reply came, the connection was lost) and the
frames a test's connections carried.

Rules:
- The outcomes are AssertionErrors: a test that meets one reports a failed behaviour (a verdict of
  the test's rules), never a harness error; the plugin still turns a wedged broker into `broken`
  after its health probe.
- A close carries code, text and class/method id, as the broker sent them.
- A frame record is what crossed one connection, with a monotonic timestamp and direction, seen
  from the harness; the recorder collects a test's records in order (its evidence).
- Nothing here imports a driver, pytest or I/O: drivers, the relay and the results pipeline all
  speak these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class DriverError(AssertionError):
    """Base of the outcomes that are not the expected reply. An AssertionError, so a test that
    meets one reports a failed behaviour (allure: failed, not broken); the plugin still turns a
    wedged broker into `broken` after its health probe."""


class NoReply(DriverError):
    def __init__(self, seconds: float, waiting_for: str) -> None:
        super().__init__(f"no reply within {seconds:.1f} s (waiting for {waiting_for})")
        self.seconds = seconds


@dataclass(frozen=True)
class Closed(DriverError):
    """The broker closed a channel or the connection."""

    scope: str  # "channel" | "connection"
    code: int
    text: str
    class_id: int
    method_id: int

    def __str__(self) -> str:
        return f"{self.scope} closed {self.code} ({self.class_id}/{self.method_id}): {self.text}"


class ChannelClosed(Closed):
    pass


class ConnectionClosed(Closed):
    pass


class ConnectionLost(DriverError):
    """The socket ended without connection.close (reset or EOF), or the peer sent bytes that
    do not decode."""


class Unsupported(DriverError):
    """The client library cannot express this operation (a not-applicable verdict, with the
    reason), e.g. a publish that does not wait for its confirm in a blocking-only API."""


@dataclass(frozen=True, slots=True)
class FrameRecord:
    ts: float  # time.monotonic()
    connection: int
    direction: str  # "in" | "out", seen from the harness
    channel: int
    frame: Any  # a codec frame, a Command, or raw bytes


@dataclass
class Recorder:
    """Collects the frames of every connection given to it (the evidence of a test)."""

    frames: list[FrameRecord] = field(default_factory=list)

    def add(self, record: FrameRecord) -> None:
        self.frames.append(record)
