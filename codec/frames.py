"""Frame events and the fast frame encoders.

Rules: frames are immutable tuples compared by type and value. Encoders produce complete
frames (`type channel size payload 0xCE`, 0-9-1 §4.2.3) with one join per call, the way
pika writes a publish in one socket write. Content bodies are split into frames whose
payload is at most `frame_max - 8` (java `FrameMax.frameSizes`). Values that do not fit
their wire type raise `EncodeError`; `encode_frame` sends any bytes for malformed-input tests.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from codec._generated import ENCODERS, BasicProperties, Method, encode_properties
from codec.constants import FRAME_END_BYTE, FRAME_OVERHEAD, Dialect, FrameType
from codec.constants import FRAME_HEADER as _FRAME_HEADER
from codec.errors import EncodeError
from codec.fast_tables import TABLE_CODECS
from codec.wire_properties import WireProperties

_METHOD_IDS = struct.Struct(">HH")
_CONTENT_HEADER = struct.Struct(">HHQH")
_CONTENT_HEADER_FIXED = struct.Struct(">HHQ")
_HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"
EMPTY_PROPERTIES = BasicProperties()
_RABBITMQ_TABLES = TABLE_CODECS[Dialect.RABBITMQ]
# class -> (class/method id octets, field encoder): one dict lookup per encode.
_ENCODING = {cls: (_METHOD_IDS.pack(cls.CLASS_ID, cls.METHOD_ID), enc) for cls, enc in ENCODERS.items()}


def _table_encoder(dialect: Dialect) -> Any:
    # `is` first: hashing an Enum member runs Python code, twice per publish otherwise.
    return _RABBITMQ_TABLES.encode_table if dialect is Dialect.RABBITMQ else TABLE_CODECS[dialect].encode_table


class _Event:
    """Type-aware equality for frame tuples (two frame kinds never compare equal)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and tuple.__eq__(self, other)  # type: ignore

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple.__hash__(self)))  # type: ignore[arg-type]


class _ProtocolHeaderFields(NamedTuple):
    raw: bytes


class ProtocolHeader(_Event, _ProtocolHeaderFields):
    """The 8-octet protocol header (sent by a client, or by a server refusing a version)."""

    __slots__ = ()


class _MethodFrameFields(NamedTuple):
    channel: int
    method: Method


class MethodFrame(_Event, _MethodFrameFields):
    __slots__ = ()


class _HeaderFrameFields(NamedTuple):
    channel: int
    class_id: int
    weight: int
    body_size: int
    properties: BasicProperties | None  # None when class_id is not basic (60)


class HeaderFrame(_Event, _HeaderFrameFields):
    __slots__ = ()


class _BodyFrameFields(NamedTuple):
    channel: int
    payload: bytes


class BodyFrame(_Event, _BodyFrameFields):
    __slots__ = ()


class _HeartbeatFrameFields(NamedTuple):
    channel: int


class HeartbeatFrame(_Event, _HeartbeatFrameFields):
    __slots__ = ()


Frame = ProtocolHeader | MethodFrame | HeaderFrame | BodyFrame | HeartbeatFrame


def encode_frame(frame_type: int, channel: int, payload: bytes, frame_end: bytes = FRAME_END_BYTE) -> bytes:
    """Any frame, including malformed ones (wrong type, wrong end octet)."""
    return _FRAME_HEADER.pack(frame_type, channel, len(payload)) + payload + frame_end


def encode_method_payload(method: Method, dialect: Dialect = Dialect.RABBITMQ) -> bytes:
    ids, encoder = _ENCODING[type(method)]
    try:
        return ids + encoder(method, _table_encoder(dialect))
    except struct.error as exc:
        raise EncodeError(f"{method.NAME}: a value does not fit its field: {exc}") from None


def encode_method(channel: int, method: Method, dialect: Dialect = Dialect.RABBITMQ) -> bytes:
    payload = encode_method_payload(method, dialect)
    return _FRAME_HEADER.pack(1, channel, len(payload)) + payload + FRAME_END_BYTE


def encode_header_payload(
    body_size: int,
    properties: BasicProperties = EMPTY_PROPERTIES,
    class_id: int = 60,
    dialect: Dialect = Dialect.RABBITMQ,
) -> bytes:
    if isinstance(properties, WireProperties) and properties.raw is not None:  # as received
        return _CONTENT_HEADER_FIXED.pack(class_id, 0, body_size) + properties.raw
    try:
        flags, props = encode_properties(properties, _table_encoder(dialect))
        return _CONTENT_HEADER.pack(class_id, 0, body_size, flags) + props
    except struct.error as exc:
        raise EncodeError(f"content header: a value does not fit its field: {exc}") from None


def encode_header(
    channel: int,
    body_size: int,
    properties: BasicProperties = EMPTY_PROPERTIES,
    dialect: Dialect = Dialect.RABBITMQ,
) -> bytes:
    payload = encode_header_payload(body_size, properties, 60, dialect)
    return _FRAME_HEADER.pack(2, channel, len(payload)) + payload + FRAME_END_BYTE


def encode_body(channel: int, body: bytes, frame_max: int = 0) -> bytes:
    """Body frames; each payload is at most frame_max - 8 octets (0 = unlimited)."""
    limit = frame_max - FRAME_OVERHEAD if frame_max else len(body) or 1
    if limit <= 0:
        raise EncodeError(f"frame_max {frame_max} leaves no room for a body")
    if len(body) <= limit:
        return _FRAME_HEADER.pack(3, channel, len(body)) + body + FRAME_END_BYTE
    pieces = []
    for start in range(0, len(body), limit):
        chunk = body[start : start + limit]
        pieces.append(_FRAME_HEADER.pack(3, channel, len(chunk)) + chunk + FRAME_END_BYTE)
    return b"".join(pieces)


def encode_content(
    channel: int,
    method: Method,
    properties: BasicProperties = EMPTY_PROPERTIES,
    body: bytes = b"",
    frame_max: int = 0,
    dialect: Dialect = Dialect.RABBITMQ,
) -> bytes:
    """A content method (publish, deliver, get-ok, return), its header and body frames,
    as one bytes object for one socket write."""
    method_payload = encode_method_payload(method, dialect)
    header_payload = encode_header_payload(len(body), properties, 60, dialect)
    parts = [
        _FRAME_HEADER.pack(1, channel, len(method_payload)),
        method_payload,
        FRAME_END_BYTE,
        _FRAME_HEADER.pack(2, channel, len(header_payload)),
        header_payload,
        FRAME_END_BYTE,
    ]
    if body:
        if frame_max and len(body) > frame_max - FRAME_OVERHEAD:
            parts.append(encode_body(channel, body, frame_max))
        else:
            parts += (_FRAME_HEADER.pack(3, channel, len(body)), body, FRAME_END_BYTE)
    return b"".join(parts)


def encode_heartbeat() -> bytes:
    return _HEARTBEAT


def frame_type_name(frame_type: int) -> str:
    try:
        return FrameType(frame_type).name.lower()
    except ValueError:
        return f"unknown({frame_type})"


def describe(frame: Any) -> str:
    """One-line human summary of a frame, for logs and evidence."""
    if isinstance(frame, MethodFrame):
        return f"ch{frame.channel} {frame.method.NAME} {frame.method.fields()}"
    if isinstance(frame, HeaderFrame):
        return f"ch{frame.channel} header class={frame.class_id} size={frame.body_size}"
    if isinstance(frame, BodyFrame):
        return f"ch{frame.channel} body {len(frame.payload)} B"
    if isinstance(frame, HeartbeatFrame):
        return f"ch{frame.channel} heartbeat"
    return f"protocol header {bytes(frame.raw)!r}"
