"""StreamTap: one direction of a recorded AMQP connection, bytes in, frame records out (sans-IO).

Responsibility: cut a byte stream into frames and decode each with the project's codec
(`codec.FrameReader`), turning it into the key fields of a frame record
(`conformance.results.records.frame_fields`). It never changes, holds back or reorders bytes: the
relay forwards first and shows the tap a copy.

Rules:
- At the start of the client's stream the 8-octet protocol header is a `protocol-header` row.
- A frame the codec rejects (an unknown class or method, a malformed payload) becomes a `gap`
  row on its channel, with the codec's reply code and text; the tap goes on with the next
  frame (its boundaries are known from the 7-octet header). The audit judges nothing after a
  gap on that channel and counts it.
- Bytes that cannot be framed (a capture that starts mid-stream, a frame-end octet that is
  not 0xCE, a frame larger than `max_frame`) become one `gap` row on channel -1 (the
  connection) and the tap stops decoding that direction: the audit reports the connection as
  not judged. Memory stays bounded by `max_frame` plus one read.
"""

from __future__ import annotations

import struct
from typing import Any

from codec import FrameReader
from codec.errors import CodecError
from conformance.results.records import body_digest, frame_fields

_HEADER = struct.Struct(">BHI")
PROTOCOL_PREFIX = b"AMQP"
MAX_FRAME = 16 * 1024 * 1024  # larger than any frame_max a broker negotiates in practice
FRAME_END = 0xCE
BODY_FRAME = 3


class StreamTap:
    """Frames of one direction ("out": client to broker, "in": broker to client)."""

    def __init__(self, direction: str, *, client_side: bool, mid_stream: bool = False,
                 max_frame: int = MAX_FRAME) -> None:
        self.direction = direction
        self.max_frame = max_frame
        self._buf = bytearray()
        self._expect_header = client_side and not mid_stream
        self._reader = FrameReader(frame_max=0)
        self.lost = False  # framing lost: nothing more is decoded
        self.frames = 0
        self.gaps = 0

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The frame records (key fields plus `channel`) of the complete frames in `data` so far."""
        if self.lost:
            return []
        self._buf += data
        rows: list[dict[str, Any]] = []
        while not self.lost:
            row = self._next()
            if row is None:
                break
            rows.append(row)
        return rows

    def _next(self) -> dict[str, Any] | None:
        buf = self._buf
        if self._expect_header:
            if len(buf) < 8:
                return None
            self._expect_header = False
            if bytes(buf[:4]) == PROTOCOL_PREFIX:
                del buf[:8]
                return {"channel": -1, "frame_type": "protocol-header"}
        if len(buf) < 7:
            return None
        frame_type, channel, size = _HEADER.unpack_from(buf)
        if size > self.max_frame:
            return self.lose(f"frame of {size} octets is over {self.max_frame}: framing lost")
        end = 7 + size
        if len(buf) <= end:
            return None
        if buf[end] != FRAME_END:
            return self.lose(f"frame-end octet {buf[end]:#04x}, expected 0xce: framing lost")
        self.frames += 1
        if frame_type == BODY_FRAME:  # the codec hands a body back as it is: no need to run it
            payload = bytes(buf[7:end])
            del buf[: end + 1]
            return {"frame_type": "body", "body_size": len(payload), "body_digest": body_digest(payload),
                    "channel": channel}
        frame = bytes(buf[: end + 1])
        del buf[: end + 1]
        self._reader.receive_data(frame)
        try:
            decoded = self._reader.next_frame()
        except CodecError as exc:
            self._reader = FrameReader(frame_max=0)  # a failed reader refuses more input
            self.gaps += 1
            return {"channel": channel, "frame_type": "gap", "reply_code": int(exc.code), "reply_text": str(exc)[:500]}
        row = frame_fields(decoded)
        row["channel"] = channel
        return row

    def lose(self, why: str) -> dict[str, Any]:
        """Stop decoding this direction; the `gap` row that says why."""
        self.lost = True
        self.gaps += 1
        self._buf.clear()
        return {"channel": -1, "frame_type": "gap", "reply_text": why}
