"""Effects: what the pure core asks the transport to do (rabbit_fifo's shape).

Rules: effects are plain frozen data from this small closed set; the core never performs
I/O, reads a clock or logs. The transport executes them in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codec import BasicProperties, Method


@dataclass(frozen=True, slots=True)
class Send:
    """Send a method (with content for deliver/get-ok/return) on a connection's channel."""

    conn: int
    channel: int
    method: Method
    properties: BasicProperties | None = None
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class CloseConnection:
    """A hard error (ERR-02): send connection.close with this reply, then wait for close-ok."""

    conn: int
    code: int
    text: str
    class_id: int = 0
    method_id: int = 0


@dataclass(frozen=True, slots=True)
class StartTimer:
    """Call `core.timer_fired(key)` at `at_ms` (monotonic ms), replacing a timer of the same key."""

    key: tuple[object, ...]
    at_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    key: tuple[object, ...]


@dataclass(frozen=True, slots=True)
class PauseReading:
    """Stop (or resume) reading from a connection's socket: RabbitMQ's publisher blocking."""

    conn: int
    paused: bool


@dataclass(frozen=True, slots=True)
class Persist:
    """Write these journal ops (core/durability.py) durably, in order, then call
    `core.stored(position)`."""

    ops: tuple[Any, ...]
    position: int


@dataclass(frozen=True, slots=True)
class Log:
    """An operator-readable event; the transport decides where it goes."""

    level: str
    text: str


Effect = Send | CloseConnection | StartTimer | CancelTimer | PauseReading | Persist | Log
