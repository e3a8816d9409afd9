"""AMQP 0-9-1 codec (RabbitMQ-extended), declared with construct.

Public API: the typed method classes and `BasicProperties` (generated from `codec.spec`),
`FrameReader`/`NEED_DATA` (sans-IO decoding), `ContentAssembler`/`Command` (method + header
+ body -> one message), the `encode_*` functions, `ReplyCode` and the `CodecError` family.
"""

from codec import _generated
from codec._generated import *  # noqa: F403
from codec._generated import METHOD_CLASSES, BasicProperties, Method
from codec.assembler import Command, ContentAssembler
from codec.constants import FRAME_MIN_SIZE, PROTOCOL_HEADER, Dialect, FrameType, ReplyCode
from codec.errors import (
    AmqpError,
    CodecError,
    EncodeError,
    FrameError,
    FrameSyntaxError,
    ProtocolHeaderError,
    UnexpectedFrameError,
    UnknownMethodError,
)
from codec.fields import Timestamp, Typed
from codec.frames import (
    BodyFrame,
    Frame,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    ProtocolHeader,
    encode_body,
    encode_content,
    encode_frame,
    encode_header,
    encode_heartbeat,
    encode_method,
)
from codec.reader import NEED_DATA, FrameReader, NeedData

__all__ = [
    "AmqpError", "BasicProperties", "BodyFrame", "CodecError", "Command", "ContentAssembler",
    "Dialect", "EncodeError", "FRAME_MIN_SIZE", "Frame", "FrameError", "FrameReader",
    "FrameSyntaxError", "FrameType", "HeaderFrame", "HeartbeatFrame", "METHOD_CLASSES", "Method",
    "MethodFrame", "NEED_DATA", "NeedData", "PROTOCOL_HEADER", "ProtocolHeader",
    "ProtocolHeaderError", "ReplyCode", "Timestamp", "Typed", "UnexpectedFrameError",
    "UnknownMethodError", "encode_body", "encode_content", "encode_frame", "encode_header",
    "encode_heartbeat", "encode_method",
]  # fmt: skip
__all__ += [n for n in getattr(_generated, "__all__", ()) if n not in __all__]
