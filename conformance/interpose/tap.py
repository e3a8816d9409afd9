"""StreamTap: one direction of a recorded AMQP connection, bytes in, frame records out (sans-IO).

Responsibility: cut a byte stream into frames (`FrameCutter`) and decode each with the project's
codec (`codec.FrameReader`), turning it into the key fields of a frame record
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

from typing import Any

from codec import FrameReader, FrameType
from codec.constants import FRAME_HEADER, FRAME_HEADER_SIZE
from codec.errors import CodecError
from conformance.interpose.frames import MAX_FRAME, PROTOCOL_HEADER_SIZE, PROTOCOL_PREFIX, FrameCutter
from conformance.results.records import body_digest, frame_fields

BODY_FRAME = FrameType.BODY.value


class StreamTap:
    """Frames of one direction ("out": client to broker, "in": broker to client)."""

    def __init__(self, direction: str, *, client_side: bool, mid_stream: bool = False,
                 max_frame: int = MAX_FRAME) -> None:
        self.direction = direction
        self._cutter = FrameCutter(header_first=client_side and not mid_stream, max_frame=max_frame)
        self._reader = FrameReader(frame_max=0)
        self.lost = False  # framing lost: nothing more is decoded
        self.frames = 0
        self.gaps = 0

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The frame records (key fields plus `channel`) of the complete frames in `data` so far."""
        if self.lost:
            return []
        rows = [self._row(frame) for frame in self._cutter.feed(data)]
        if self._cutter.lost:
            rows.append(self.lose(self._cutter.lost))
        return rows

    def _row(self, frame: bytes) -> dict[str, Any]:
        if len(frame) == PROTOCOL_HEADER_SIZE and frame.startswith(PROTOCOL_PREFIX):
            return {"channel": -1, "frame_type": "protocol-header"}
        frame_type, channel, _ = FRAME_HEADER.unpack_from(frame)
        self.frames += 1
        if frame_type == BODY_FRAME:  # the codec hands a body back as it is: no need to run it
            payload = frame[FRAME_HEADER_SIZE:-1]
            return {"frame_type": "body", "body_size": len(payload), "body_digest": body_digest(payload),
                    "channel": channel}
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
        self._cutter.unframed()  # dropped: memory stays bounded
        return {"channel": -1, "frame_type": "gap", "reply_text": why}
