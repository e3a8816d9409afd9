"""The reference codec path: parse and build with the construct declarations only.

Rules: this path is slow and exact. It decodes every method payload, content header and
frame with the constructs of `codec.spec`/`codec.fields`, requires every payload to be
consumed (`Terminated`), and turns construct failures into `CodecError`s carrying the
construct path and a hex window. The fast path (`codec.reader`, `codec.frames`) must agree
with it on every input; when the fast path rejects bytes, it asks this module for the
precise diagnosis.
"""

from __future__ import annotations

import io
import struct
from functools import cache
from typing import Any

from construct import (
    ConstructError,
    GreedyBytes,
    If,
    Int8ub,
    Int16ub,
    Int32ub,
    Int64ub,
    Prefixed,
    Struct,
    Terminated,
    this,
)

from codec._generated import METHOD_CLASSES, BasicProperties, Method
from codec.constants import FRAME_END, Dialect, FrameType
from codec.errors import CodecError, EncodeError, FrameError, FrameSyntaxError, UnknownMethodError
from codec.fields import FIELD_TABLE
from codec.frames import BodyFrame, Frame, HeaderFrame, HeartbeatFrame, MethodFrame
from codec.spec import (
    BASIC_CLASS_ID,
    ILLEGAL_PROPERTY_FLAGS,
    METHODS_BY_INDEX,
    PROPERTIES,
    PROPERTY_FLAG,
    BitGroup,
    MethodDecl,
    Table,
)

FRAME = Struct(
    "type" / Int8ub,
    "channel" / Int16ub,
    "payload" / Prefixed(Int32ub, GreedyBytes),
    "frame_end" / Int8ub,
)
METHOD_IDS = Struct("class_id" / Int16ub, "method_id" / Int16ub)


@cache
def method_struct(index: int, dialect: Dialect) -> Struct:
    decl = METHODS_BY_INDEX[index]
    return Struct("class_id" / Int16ub, "method_id" / Int16ub, "arguments" / decl.struct(dialect), Terminated)


@cache
def header_struct(dialect: Dialect) -> Struct:
    props = [
        name / If(this.property_flags & PROPERTY_FLAG[name], FIELD_TABLE[dialect] if dom is Table else dom)
        for name, dom in PROPERTIES
    ]
    return Struct(
        "class_id" / Int16ub,
        "weight" / Int16ub,
        "body_size" / Int64ub,
        "property_flags" / Int16ub,
        *props,
        Terminated,
    )


def _parse(construct: Any, data: bytes, what: str, ids: tuple[int, int] = (0, 0)) -> Any:
    """Parse or raise 502 naming the construct path. RabbitMQ 3.10.8 answers undecodable
    method fields with 501 "cannot decode <<…>>" and the method's ids (checked live);
    the spec's code is 502, which the codec reports; a broker edge may map it."""
    stream = io.BytesIO(data)
    try:
        return construct.parse_stream(stream)
    except ConstructError as exc:
        reason = str(exc).splitlines()[-1] if str(exc) else type(exc).__name__
        raise FrameSyntaxError(f"cannot decode {what}: {reason}", data=data, offset=stream.tell(),
                               path=getattr(exc, "path", None), class_id=ids[0], method_id=ids[1]) from None
    except (UnicodeDecodeError, ValueError, OverflowError) as exc:
        raise FrameSyntaxError(f"cannot decode {what}: {exc}", data=data, offset=stream.tell(),
                               class_id=ids[0], method_id=ids[1]) from None


def _flatten(decl: MethodDecl, container: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in container.items():
        if key.startswith("bits:"):
            values.update(value)
        elif key != "_io":
            values[key] = value
    return {name: values[name] for name, _dom in decl.fields}


def decode_method_payload(payload: bytes, dialect: Dialect = Dialect.RABBITMQ) -> Method:
    if len(payload) < 4:
        raise FrameSyntaxError("method frame shorter than its class and method ids", data=payload)
    class_id, method_id = struct.unpack_from(">HH", payload)
    index = class_id << 16 | method_id
    if index not in METHODS_BY_INDEX:
        raise UnknownMethodError(f"unknown method {class_id}/{method_id}", data=payload,
                                 class_id=class_id, method_id=method_id)
    decl = METHODS_BY_INDEX[index]
    parsed = _parse(method_struct(index, dialect), payload, decl.name, (class_id, method_id))
    cls = METHOD_CLASSES[index]
    return cls(**_flatten(decl, parsed.arguments))


def encode_method_payload(method: Method, dialect: Dialect = Dialect.RABBITMQ) -> bytes:
    decl = METHODS_BY_INDEX[method.INDEX]
    args: dict[str, Any] = {}
    values = method.fields()
    for sub in decl.struct(dialect).subcons:
        if isinstance(sub.subcon, BitGroup):
            args[sub.name] = {name: values[name] for name in sub.subcon.names}
        else:
            args[sub.name] = values[sub.name]
    try:
        return bytes(method_struct(method.INDEX, dialect).build(
            {"class_id": method.CLASS_ID, "method_id": method.METHOD_ID, "arguments": args}))
    except (ConstructError, struct.error, OverflowError) as exc:
        raise EncodeError(f"{method.NAME}: {exc}") from None


def decode_header_payload(payload: bytes, dialect: Dialect = Dialect.RABBITMQ) -> tuple[int, int, int, BasicProperties | None]:
    """(class_id, weight, body_size, properties); properties None for a non-basic class."""
    if len(payload) >= 2 and struct.unpack_from(">H", payload)[0] != BASIC_CLASS_ID:
        fixed = _parse(Struct("class_id" / Int16ub, "weight" / Int16ub, "body_size" / Int64ub,
                              "property_flags" / Int16ub, GreedyBytes), payload, "content header")
        return fixed.class_id, fixed.weight, fixed.body_size, None
    if len(payload) >= 14 and struct.unpack_from(">H", payload, 12)[0] & ILLEGAL_PROPERTY_FLAGS:
        raise FrameSyntaxError("property flags name a property basic does not have", data=payload, offset=12)
    parsed = _parse(header_struct(dialect), payload, "content header")
    props = BasicProperties(**{name: parsed[name] for name, _dom in PROPERTIES})
    return parsed.class_id, parsed.weight, parsed.body_size, props


def encode_header_payload(body_size: int, properties: BasicProperties, dialect: Dialect = Dialect.RABBITMQ) -> bytes:
    values = properties.fields()
    flags = sum(PROPERTY_FLAG[name] for name, value in values.items() if value is not None)
    try:
        return bytes(header_struct(dialect).build(
            {"class_id": BASIC_CLASS_ID, "weight": 0, "body_size": body_size, "property_flags": flags, **values}))
    except (ConstructError, struct.error, OverflowError) as exc:
        raise EncodeError(f"content header: {exc}") from None


def parse_frame(data: bytes, dialect: Dialect = Dialect.RABBITMQ) -> tuple[Frame, int]:
    """One complete frame from the start of `data`: (frame, octets consumed)."""
    stream = io.BytesIO(data)
    try:
        raw = FRAME.parse_stream(stream)
    except ConstructError as exc:
        raise FrameSyntaxError(f"incomplete frame: {exc}", data=data, offset=stream.tell()) from None
    used = stream.tell()
    if raw.frame_end != FRAME_END:
        raise FrameError(f"frame end octet {raw.frame_end:#04x}, expected 0xce", data=data, offset=used - 1)
    return frame_from_payload(raw.type, raw.channel, bytes(raw.payload), dialect), used


def frame_from_payload(frame_type: int, channel: int, payload: bytes, dialect: Dialect) -> Frame:
    if frame_type == FrameType.METHOD:
        return MethodFrame(channel, decode_method_payload(payload, dialect))
    if frame_type == FrameType.HEADER:
        class_id, weight, body_size, props = decode_header_payload(payload, dialect)
        return HeaderFrame(channel, class_id, weight, body_size, props)
    if frame_type == FrameType.BODY:
        return BodyFrame(channel, payload)
    if frame_type == FrameType.HEARTBEAT:
        if payload:
            raise FrameError("heartbeat frame with a payload", data=payload)
        return HeartbeatFrame(channel)
    raise FrameError(f"unknown frame type {frame_type}", data=payload)


__all__ = ["CodecError", "decode_method_payload", "encode_method_payload", "decode_header_payload",
           "encode_header_payload", "parse_frame", "frame_from_payload"]
