"""StreamTap's body-frame fast path gives the row the codec path gives (frame_fields of a BodyFrame)."""

from __future__ import annotations

import struct

from codec import BodyFrame, FrameReader
from conformance.interpose.tap import StreamTap
from conformance.results.records import frame_fields


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + b"\xce"


def test_body_rows_equal_the_codec_path() -> None:
    payloads = [b"", b"x" * 256, bytes(range(256)) * 40]
    stream = b"".join(frame(3, 1 + n, p) for n, p in enumerate(payloads))
    tap = StreamTap("in", client_side=False)
    rows = [row for k in range(0, len(stream), 97) for row in tap.feed(stream[k : k + 97])]  # split anywhere
    reader = FrameReader(frame_max=0)
    reader.receive_data(stream)
    frames = reader.frames()
    assert all(isinstance(f, BodyFrame) for f in frames)
    expected = [{**frame_fields(f), "channel": f.channel} for f in frames]
    assert rows == expected and len(rows) == len(payloads) and tap.frames == len(payloads)
