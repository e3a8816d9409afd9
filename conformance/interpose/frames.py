"""FrameCutter and Frame: whole AMQP frames off a byte stream, for the interposer (sans-IO).

Responsibility: cut one direction's bytes into raw frames (and 8-octet protocol headers) by the
codec's frame layout (`codec.constants`: header struct, frame-end octet), without decoding them;
`Frame` decodes one on demand with the codec's `FrameReader`.

Rules:
- A protocol header is recognised at the start of the stream (`header_first`: the client's side)
  or, with `headers_anywhere`, at any frame boundary (a broker refusing the version answers with one).
- Framing is lost when a frame's end octet is not 0xCE or its size is over `max_frame`: `lost`
  says why, no more frames are cut, and every byte from the lost frame on is kept in order for
  `unframed()` (a transform forwards it unchanged; a tap drops it). Memory is bounded by
  `max_frame` plus one read while framed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from codec import CodecError, FrameReader, Method, MethodFrame
from codec.constants import FRAME_END, FRAME_HEADER, FRAME_HEADER_SIZE, PROTOCOL_HEADER

PROTOCOL_PREFIX = PROTOCOL_HEADER[:4]
PROTOCOL_HEADER_SIZE = len(PROTOCOL_HEADER)
MAX_FRAME = 16 * 1024 * 1024  # larger than any frame_max a broker negotiates in practice


class FrameCutter:
    """Raw frames of one direction; `feed(data)` returns the frames completed by `data`."""

    def __init__(self, *, header_first: bool = False, headers_anywhere: bool = False,
                 max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self.lost = ""  # why framing was lost ("" while framed)
        self._buf = bytearray()
        self._anywhere = headers_anywhere
        self._header_next = header_first or headers_anywhere

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        frames: list[bytes] = []
        while not self.lost and (frame := self._cut()) is not None:
            frames.append(frame)
        return frames

    def unframed(self) -> bytes:
        """The bytes held since framing was lost (all of them: nothing is framed any more)."""
        data = bytes(self._buf)
        self._buf.clear()
        return data

    def _cut(self) -> bytes | None:
        buf = self._buf
        if self._header_next:
            head = bytes(buf[:4])
            if len(buf) < PROTOCOL_HEADER_SIZE and (not self._anywhere or PROTOCOL_PREFIX.startswith(head)):
                return None
            self._header_next = self._anywhere
            if head == PROTOCOL_PREFIX:
                return self._take(PROTOCOL_HEADER_SIZE)
        if len(buf) < FRAME_HEADER_SIZE:
            return None
        size = FRAME_HEADER.unpack_from(buf)[2]
        if size > self.max_frame:
            self.lost = f"frame of {size} octets is over {self.max_frame}: framing lost"
            return None
        end = FRAME_HEADER_SIZE + size
        if len(buf) <= end:
            return None
        if buf[end] != FRAME_END:
            self.lost = f"frame-end octet {buf[end]:#04x}, expected 0xce: framing lost"
            return None
        return self._take(end + 1)

    def _take(self, size: int) -> bytes:
        frame = bytes(self._buf[:size])
        del self._buf[:size]
        return frame


def decode(raw: bytes) -> object:
    """The codec's frame for one raw frame, or None where the codec rejects it."""
    reader = FrameReader(frame_max=0)
    reader.receive_data(raw)
    try:
        return reader.next_frame()
    except CodecError:
        return None


@dataclass(frozen=True)
class Frame:
    """One raw frame; `type` 0 for a protocol header (or bytes past lost framing)."""

    raw: bytes

    @property
    def type(self) -> int:
        return self.raw[0] if len(self.raw) > FRAME_HEADER_SIZE and not self.raw.startswith(PROTOCOL_PREFIX) else 0

    @property
    def channel(self) -> int:
        return int(FRAME_HEADER.unpack_from(self.raw)[1]) if self.type else 0

    @cached_property
    def decoded(self) -> object:
        return decode(self.raw) if self.type else None

    @property
    def method(self) -> Method | None:
        return self.decoded.method if isinstance(self.decoded, MethodFrame) else None

    def describe(self) -> str:
        if self.method is not None:
            return f"{self.method.NAME} on channel {self.channel}"
        return f"a frame of type {self.raw[0]}" if self.raw else "nothing"
