"""FrameReader: the sans-IO frame decoder (h11's shape: receive_data / next_frame).

Rules:
- Feed bytes in any chunking with `receive_data`; `next_frame()` returns one frame event
  or `NEED_DATA`. No I/O, no clock, no logging.
- A frame whose payload exceeds the negotiated `frame_max` is a 501, detected from the
  7-octet header before the payload is buffered. Payloads of exactly frame_max are
  accepted, as RabbitMQ does (FRM-03: the limit it reports is frame_max - 8). 0 = no limit.
- 501 for a bad frame-end octet, an unknown frame type or a heartbeat with a payload;
  502 for undecodable fields; 540 for an unknown class/method id.
- Any error is final: the reader refuses further input, as the connection is closing.
- Method frames, content headers and tables go through the generated fast path; when it
  rejects a payload, `codec.construct_path` re-parses it to name the failing field.
"""

from __future__ import annotations

import struct
from typing import Final

from codec._generated import DECODERS, decode_properties
from codec.constants import FRAME_HEADER as _HEADER
from codec.constants import FRAME_MIN_SIZE, PROTOCOL_HEADER, Dialect, FrameType
from codec.errors import CodecError, FrameError, FrameSyntaxError, ProtocolHeaderError
from codec.fast_tables import TABLE_CODECS
from codec.frames import BodyFrame, Frame, HeaderFrame, HeartbeatFrame, MethodFrame, ProtocolHeader
from codec.spec import BASIC_CLASS_ID, ILLEGAL_PROPERTY_FLAGS
from codec.wire_properties import WireProperties

_U32 = struct.Struct(">I")
_CONTENT_HEADER = struct.Struct(">HHQH")
_HEARTBEAT = FrameType.HEARTBEAT.value
_DECODE_ERRORS = (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError, CodecError)


class NeedData:
    """Sentinel type: more bytes are needed before the next frame."""

    _instance: NeedData | None = None

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()


class FrameReader:
    """Decode AMQP 0-9-1 frames from a byte stream."""

    def __init__(
        self,
        *,
        frame_max: int = FRAME_MIN_SIZE,
        dialect: Dialect = Dialect.RABBITMQ,
        expect_protocol_header: bool = False,
    ) -> None:
        self.frame_max = frame_max
        self.dialect = dialect
        self._tables = TABLE_CODECS[dialect]
        self._buf = b""
        self._pos = 0
        self._at_start = True
        self._expect_header = expect_protocol_header
        self._failed: CodecError | None = None

    def receive_data(self, data: bytes) -> None:
        if self._pos >= len(self._buf):
            self._buf = bytes(data)
        else:
            self._buf = self._buf[self._pos :] + data
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Octets received and not yet returned as frames."""
        return len(self._buf) - self._pos

    def next_frame(self) -> Frame | NeedData:
        if self._failed is not None:
            raise self._failed
        try:
            return self._next()
        except CodecError as exc:
            self._failed = exc
            raise

    def frames(self) -> list[Frame]:
        """Every complete frame buffered now."""
        out: list[Frame] = []
        while (frame := self.next_frame()) is not NEED_DATA:
            out.append(frame)  # type: ignore[arg-type]
        return out

    def _next(self) -> Frame | NeedData:
        buf, pos = self._buf, self._pos
        if self._at_start:
            header = self._protocol_header(buf, pos)
            if header is not None:
                return header
        if len(buf) - pos < 7:
            return NEED_DATA
        frame_type, channel, size = _HEADER.unpack_from(buf, pos)
        if self.frame_max and size > self.frame_max:
            raise FrameError(
                f"type {frame_type}, all octets = <<>>: {{frame_too_large,{size},{self.frame_max - 8}}}",
                data=buf[pos : pos + 7],
            )
        end = pos + 7 + size
        if len(buf) <= end:
            return NEED_DATA
        if buf[end] != 0xCE:
            raise FrameError(f"frame end octet {buf[end]:#04x}, expected 0xce", data=buf[pos : end + 1], offset=end - pos)
        payload = buf[pos + 7 : end]
        self._pos = end + 1
        return self._decode(frame_type, channel, payload)

    def _protocol_header(self, buf: bytes, pos: int) -> ProtocolHeader | NeedData | None:
        """At stream start: the client's header (server side) or a server's version refusal."""
        head = buf[pos : pos + 8]
        if not head:
            return NEED_DATA
        if not self._expect_header and not b"AMQP".startswith(head[:4]):
            self._at_start = False  # an ordinary frame: 'A' (65) is no frame type
            return None
        if len(head) < 8:
            return NEED_DATA
        self._at_start = False
        if self._expect_header and head != PROTOCOL_HEADER:
            raise ProtocolHeaderError(f"bad protocol header {head!r}", data=head)
        self._pos = pos + 8
        return ProtocolHeader(head)

    def _decode(self, frame_type: int, channel: int, payload: bytes) -> Frame:
        if frame_type == 1:
            try:
                if len(payload) < 4:
                    raise FrameSyntaxError("method frame shorter than its ids", data=payload)
                method, end = DECODERS[_U32.unpack_from(payload)[0]](payload, 4, self._tables.decode_table)
                if end == len(payload):
                    return MethodFrame(channel, method)
            except KeyError:
                pass  # unknown id: the construct path raises 540 with the ids
            except _DECODE_ERRORS:
                pass
            return self._diagnose(frame_type, channel, payload)
        if frame_type == 3:
            return BodyFrame(channel, payload)
        if frame_type == 2:
            try:
                class_id, weight, body_size, flags = _CONTENT_HEADER.unpack_from(payload)
                if class_id != BASIC_CLASS_ID:
                    return HeaderFrame(channel, class_id, weight, body_size, None)
                if not flags & ILLEGAL_PROPERTY_FLAGS:
                    props, end = decode_properties(payload, 14, flags, self._tables.decode_table)
                    if end == len(payload):  # keep the octets: properties pass through unchanged
                        wire = WireProperties.received(props, payload[12:])
                        return HeaderFrame(channel, class_id, weight, body_size, wire)
            except _DECODE_ERRORS:
                pass
            return self._diagnose(frame_type, channel, payload)
        if frame_type == _HEARTBEAT and not payload:
            return HeartbeatFrame(channel)
        return self._diagnose(frame_type, channel, payload)

    def _diagnose(self, frame_type: int, channel: int, payload: bytes) -> Frame:
        from codec.construct_path import frame_from_payload

        frame = frame_from_payload(frame_type, channel, payload, self.dialect)
        raise FrameSyntaxError(
            f"fast path rejected a frame the construct path accepts: {frame!r}", data=payload
        )
