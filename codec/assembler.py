"""ContentAssembler: method + content header + body frames -> one `Command`.

Rules (RabbitMQ's `rabbit_command_assembler`, RULES.md ERR-04, java `UnexpectedFrames`):
- per channel, a content-carrying method must be followed by a content header of the same
  class, then body frames until `body_size` octets arrived; a body of size 0 has no frames;
- anything else in between is 505 UNEXPECTED_FRAME with RabbitMQ's texts; a body frame
  longer than what remains is 501 FRAME_ERROR; a heartbeat on a channel other than 0 is 505;
- channels interleave freely; the assembler is sans-IO and pure apart from its buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from codec._generated import BasicProperties, Method
from codec.errors import FrameError, UnexpectedFrameError
from codec.frames import BodyFrame, Frame, HeaderFrame, HeartbeatFrame, MethodFrame, ProtocolHeader


class Command(NamedTuple):
    """A complete command: a method, and for content methods its properties and body."""

    channel: int
    method: Method
    properties: BasicProperties | None = None
    body: bytes = b""


@dataclass(slots=True)
class _Pending:
    method: Method
    properties: BasicProperties | None = None
    remaining: int = 0
    parts: list[bytes] = field(default_factory=list)


class ContentAssembler:
    """Turn frames into commands, enforcing the frame sequence of 0-9-1 §4.2.6."""

    def __init__(self) -> None:
        self._pending: dict[int, _Pending] = {}

    def pending_channels(self) -> frozenset[int]:
        return frozenset(self._pending)

    def forget(self, channel: int) -> None:
        """Drop a partial command (the channel closed)."""
        self._pending.pop(channel, None)

    def feed(self, frame: Frame) -> Command | HeartbeatFrame | None:
        """Feed one frame; returns a finished Command, a channel-0 heartbeat, or None."""
        if isinstance(frame, BodyFrame):
            return self._body(frame)
        if isinstance(frame, MethodFrame):
            return self._method(frame)
        if isinstance(frame, HeaderFrame):
            return self._header(frame)
        if isinstance(frame, HeartbeatFrame):
            if frame.channel != 0:
                raise UnexpectedFrameError("type 8, all octets = <<>>")  # RabbitMQ's text (ERR-04)
            return frame
        if isinstance(frame, ProtocolHeader):
            raise UnexpectedFrameError("protocol header after the connection started")
        raise TypeError(f"not a frame: {frame!r}")

    def _unexpected(self, pending: _Pending, got: str) -> UnexpectedFrameError:
        m = pending.method
        if pending.properties is None:
            text = f"expected content header for class {m.CLASS_ID}, got {got} instead"
        else:
            text = "expected content body, got non content body frame instead"
        return UnexpectedFrameError(text, class_id=m.CLASS_ID, method_id=m.METHOD_ID)

    def _method(self, frame: MethodFrame) -> Command | None:
        pending = self._pending.get(frame.channel)
        if pending is not None:
            raise self._unexpected(pending, "non content header frame")
        if frame.method.HAS_CONTENT:
            self._pending[frame.channel] = _Pending(frame.method)
            return None
        return Command(frame.channel, frame.method)

    def _header(self, frame: HeaderFrame) -> Command | None:
        pending = self._pending.get(frame.channel)
        if pending is None:
            raise UnexpectedFrameError("expected method frame, got non method frame instead")
        if pending.properties is not None:
            raise self._unexpected(pending, "non content header frame")
        m = pending.method
        if frame.class_id != m.CLASS_ID:
            raise self._unexpected(pending, f"one for class {frame.class_id}")
        if frame.weight != 0 or frame.properties is None:
            raise self._unexpected(pending, "non content header frame")
        if frame.body_size == 0:
            del self._pending[frame.channel]
            return Command(frame.channel, m, frame.properties, b"")
        pending.properties = frame.properties
        pending.remaining = frame.body_size
        return None

    def _body(self, frame: BodyFrame) -> Command | None:
        pending = self._pending.get(frame.channel)
        if pending is None:
            raise UnexpectedFrameError("expected method frame, got non method frame instead")
        if pending.properties is None:
            raise self._unexpected(pending, "non content header frame")
        pending.remaining -= len(frame.payload)
        if pending.remaining < 0:
            m = pending.method
            raise FrameError(
                f"content body larger than the declared size by {-pending.remaining} octets",
                class_id=m.CLASS_ID,
                method_id=m.METHOD_ID,
            )
        pending.parts.append(frame.payload)
        if pending.remaining:
            return None
        del self._pending[frame.channel]
        body = pending.parts[0] if len(pending.parts) == 1 else b"".join(pending.parts)
        return Command(frame.channel, pending.method, pending.properties, body)
