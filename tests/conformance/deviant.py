"""DeviantProxy: the relay (`conformance.interpose`) rewriting frames, so that any broker deviates in
one realistic way.

Responsibility: stand between the harness and a broker and apply one `Deviation` (see
`deviations.py`): a small rewrite of what the broker sends, or of what the client sends so that
the broker mis-hears it. The harness then meets a broker that breaks one rule, and the suite
must report that rule as failed, with nothing broken.

Rules:
- Both directions are cut into frames (`Framed`: a protocol header at any frame boundary is one)
  and handed, one by one and in order, to the link's own `Deviation` instance (a new one per
  connection, so a deviation may keep per-connection state). Method frames are decoded with
  the project's codec on demand; rewritten methods are encoded with it (`encode_method`).
- What a deviation does not touch is forwarded byte for byte.
- A deviation that drops a content-bearing method (basic.deliver, get-ok, return, publish)
  calls `drop_content`, and the header and body frames that follow it on that channel are
  dropped too. The broker side's content is collected per channel, so a deviation can re-send
  a message it saw (`Message`).
- `actions` counts what the deviation did (`Io.record`); `close()` ends everything within
  seconds. Every wait here is bounded. Either side ending ends the link.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import ClassVar

from codec import BasicDeliver, BasicGetOk, BasicReturn, FrameType, HeaderFrame, Method, encode_method
from codec.constants import FRAME_OVERHEAD
from conformance.interpose.frames import Frame
from conformance.interpose.relay import Framed, Interposer, Link, Plumbing, Relay, RelayThread

METHOD, HEADER, BODY = FrameType.METHOD, FrameType.HEADER, FrameType.BODY


def encode(channel: int, method: Method) -> bytes:
    return encode_method(channel, method)


def _content_size(frame: Frame) -> int:
    """Body octets announced by a header frame, or carried by a body frame."""
    if frame.type == BODY:
        return len(frame.raw) - FRAME_OVERHEAD
    decoded = frame.decoded
    return decoded.body_size if isinstance(decoded, HeaderFrame) else 0


@dataclass
class Message:
    """A content-bearing method from the broker with its header and body frames (raw)."""

    channel: int
    method: Method
    frames: list[bytes] = field(default_factory=list)
    remaining: int = -1  # body octets still to come; -1 until the header frame

    @property
    def complete(self) -> bool:
        return self.remaining == 0


class Io:
    """What a deviation can do on its link: write to either side, and record an action."""

    def __init__(self, proxy: DeviantProxy, link: Link) -> None:
        self.proxy, self.link = proxy, link

    def to_client(self, data: bytes) -> None:
        self.link.to_client(data)

    def to_broker(self, data: bytes) -> None:
        self.link.to_broker(data)

    def record(self, text: str) -> None:
        self.proxy.record(text)


class Deviation:
    """One deviation, one instance per connection. Subclasses override `client`/`broker`."""

    name: ClassVar[str] = ""
    area: ClassVar[str] = ""
    rules: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""

    def __init__(self) -> None:
        self._dropping: dict[tuple[str, int], int] = {}  # (side, channel) -> body octets left (-1: header next)
        self.messages: dict[int, Message] = {}  # broker side: the content method being assembled, per channel

    # -- hooks -----------------------------------------------------------------------------------
    def client(self, frame: Frame, io: Io) -> None:
        io.to_broker(frame.raw)

    def broker(self, frame: Frame, io: Io) -> None:
        io.to_client(frame.raw)

    def message(self, message: Message, io: Io) -> None:
        """A broker message (deliver, get-ok, return) is complete (its frames were forwarded)."""

    # -- helpers ---------------------------------------------------------------------------------
    def drop_content(self, side: str, channel: int) -> None:
        self._dropping[(side, channel)] = -1

    def handle(self, side: str, frame: Frame, io: Io) -> None:
        key = (side, frame.channel)
        if frame.type in (HEADER, BODY) and key in self._dropping:
            self._consume(key, frame)
            return
        if side == "broker":
            self._collect(frame)
        (self.client if side == "client" else self.broker)(frame, io)
        message = self.messages.get(frame.channel) if side == "broker" and frame.type != METHOD else None
        if message is not None and message.complete:
            del self.messages[frame.channel]
            self.message(message, io)

    def _consume(self, key: tuple[str, int], frame: Frame) -> None:
        left = _content_size(frame) if frame.type == HEADER else self._dropping[key] - _content_size(frame)
        if left <= 0:
            del self._dropping[key]
        else:
            self._dropping[key] = left

    def _collect(self, frame: Frame) -> None:
        if frame.type == METHOD and isinstance(frame.method, BasicDeliver | BasicGetOk | BasicReturn):
            self.messages[frame.channel] = Message(frame.channel, frame.method)
            return
        message = self.messages.get(frame.channel)
        if message is None or frame.type not in (HEADER, BODY):
            return
        message.frames.append(frame.raw)
        if frame.type == HEADER:
            message.remaining = _content_size(frame)
        else:
            message.remaining -= _content_size(frame)


class DeviantProxy(Interposer, RelayThread):
    """`with DeviantProxy(("127.0.0.1", port), SomeDeviation) as proxy: proxy.url`."""

    def __init__(self, upstream: tuple[str, int], deviation: type[Deviation] | None) -> None:
        self.deviation = deviation or Deviation
        self.actions: list[str] = []
        self._lock = threading.Condition()
        RelayThread.__init__(self, Relay(upstream, self, close_timeout=2), name="deviant-proxy")

    def plumb(self, link: Link) -> Plumbing:
        io, deviation = Io(self, link), self.deviation()
        return Plumbing(Framed(lambda frame: deviation.handle("client", frame, io)),
                        Framed(lambda frame: deviation.handle("broker", frame, io)))

    def record(self, text: str) -> None:
        with self._lock:
            self.actions.append(text)
            self._lock.notify_all()

    def wait_for(self, action: str, timeout: float = 5.0) -> bool:
        """Whether the deviation recorded `action` within `timeout` s (a test's step that must
        follow what the proxy did)."""
        with self._lock:
            return self._lock.wait_for(lambda: action in self.actions, timeout)
