"""AMQP 0-9-1 protocol constants: frame types, reply codes and their error class, class and method ids.

Rules: every protocol constant is declared here once (docs/design.md, conventions: one source of truth per
protocol fact). Reply codes are an IntEnum; whether a code is a soft (channel) or hard
(connection) error follows RabbitMQ's codegen JSON (RULES.md ERR-02), which adds 312
NO_ROUTE to the 0-9-1 spec XML's list.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"  # 0-9-1 §4.2.2
FRAME_END = 0xCE  # 0-9-1 §4.2.3
FRAME_END_BYTE = b"\xce"
FRAME_HEADER_SIZE = 7  # type(1) channel(2) size(4)
FRAME_HEADER = struct.Struct(">BHI")  # frame type, channel, payload size (0-9-1 §4.2.3)
FRAME_OVERHEAD = 8  # header + frame-end octet
FRAME_MIN_SIZE = 4096  # 0-9-1 constant frame-min-size; RabbitMQ 4.1+ uses 8192 (FRM-02)
RABBITMQ_FRAME_MIN_SIZE_4_1 = 8192


class FrameType(enum.IntEnum):
    """Frame type octet (0-9-1 §4.2.3)."""

    METHOD = 1
    HEADER = 2
    BODY = 3
    HEARTBEAT = 8


class ReplyCode(enum.IntEnum):
    """Reply codes of 0-9-1 §1.2 plus RabbitMQ's 312 NO_ROUTE."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541

    @property
    def is_hard_error(self) -> bool:
        """True when the code closes the connection, not only the channel (ERR-02)."""
        return self in HARD_ERRORS

    @property
    def is_soft_error(self) -> bool:
        """True when the code closes only the offending channel (ERR-02)."""
        return self in SOFT_ERRORS


SOFT_ERRORS = frozenset(
    {
        ReplyCode.CONTENT_TOO_LARGE,
        ReplyCode.NO_ROUTE,
        ReplyCode.NO_CONSUMERS,
        ReplyCode.ACCESS_REFUSED,
        ReplyCode.NOT_FOUND,
        ReplyCode.RESOURCE_LOCKED,
        ReplyCode.PRECONDITION_FAILED,
    }
)
HARD_ERRORS = frozenset(
    {
        ReplyCode.CONNECTION_FORCED,
        ReplyCode.INVALID_PATH,
        ReplyCode.FRAME_ERROR,
        ReplyCode.SYNTAX_ERROR,
        ReplyCode.COMMAND_INVALID,
        ReplyCode.CHANNEL_ERROR,
        ReplyCode.UNEXPECTED_FRAME,
        ReplyCode.RESOURCE_ERROR,
        ReplyCode.NOT_ALLOWED,
        ReplyCode.NOT_IMPLEMENTED,
        ReplyCode.INTERNAL_ERROR,
    }
)


class Dialect(enum.Enum):
    """Field-table dialect (docs/design.md decision 2)."""

    RABBITMQ = "rabbitmq"  # RabbitMQ's errata: I signed 32, u unsigned 16, l signed 64, x bytes
    AMQP_0_9_1 = "amqp-0-9-1"  # the spec's grammar: U signed 16, L signed 64, l unsigned 64, s shortstr


class ClassId(enum.IntEnum):
    """Class ids of 0-9-1 (RabbitMQ: plus confirm)."""

    CONNECTION = 10
    CHANNEL = 20
    EXCHANGE = 40
    QUEUE = 50
    BASIC = 60
    CONFIRM = 85
    TX = 90


class MethodId(NamedTuple):
    """A method's (class id, method id): what channel.close and connection.close name."""

    class_id: int
    method_id: int


# Every method's ids, by its spec name; codec/spec.py declares the fields of these methods.
METHOD_IDS: dict[str, MethodId] = {
    "connection.start": MethodId(ClassId.CONNECTION, 10),
    "connection.start-ok": MethodId(ClassId.CONNECTION, 11),
    "connection.secure": MethodId(ClassId.CONNECTION, 20),
    "connection.secure-ok": MethodId(ClassId.CONNECTION, 21),
    "connection.tune": MethodId(ClassId.CONNECTION, 30),
    "connection.tune-ok": MethodId(ClassId.CONNECTION, 31),
    "connection.open": MethodId(ClassId.CONNECTION, 40),
    "connection.open-ok": MethodId(ClassId.CONNECTION, 41),
    "connection.close": MethodId(ClassId.CONNECTION, 50),
    "connection.close-ok": MethodId(ClassId.CONNECTION, 51),
    "connection.blocked": MethodId(ClassId.CONNECTION, 60),
    "connection.unblocked": MethodId(ClassId.CONNECTION, 61),
    "connection.update-secret": MethodId(ClassId.CONNECTION, 70),
    "connection.update-secret-ok": MethodId(ClassId.CONNECTION, 71),
    "channel.open": MethodId(ClassId.CHANNEL, 10),
    "channel.open-ok": MethodId(ClassId.CHANNEL, 11),
    "channel.flow": MethodId(ClassId.CHANNEL, 20),
    "channel.flow-ok": MethodId(ClassId.CHANNEL, 21),
    "channel.close": MethodId(ClassId.CHANNEL, 40),
    "channel.close-ok": MethodId(ClassId.CHANNEL, 41),
    "exchange.declare": MethodId(ClassId.EXCHANGE, 10),
    "exchange.declare-ok": MethodId(ClassId.EXCHANGE, 11),
    "exchange.delete": MethodId(ClassId.EXCHANGE, 20),
    "exchange.delete-ok": MethodId(ClassId.EXCHANGE, 21),
    "exchange.bind": MethodId(ClassId.EXCHANGE, 30),
    "exchange.bind-ok": MethodId(ClassId.EXCHANGE, 31),
    "exchange.unbind": MethodId(ClassId.EXCHANGE, 40),
    "exchange.unbind-ok": MethodId(ClassId.EXCHANGE, 51),
    "queue.declare": MethodId(ClassId.QUEUE, 10),
    "queue.declare-ok": MethodId(ClassId.QUEUE, 11),
    "queue.bind": MethodId(ClassId.QUEUE, 20),
    "queue.bind-ok": MethodId(ClassId.QUEUE, 21),
    "queue.purge": MethodId(ClassId.QUEUE, 30),
    "queue.purge-ok": MethodId(ClassId.QUEUE, 31),
    "queue.delete": MethodId(ClassId.QUEUE, 40),
    "queue.delete-ok": MethodId(ClassId.QUEUE, 41),
    "queue.unbind": MethodId(ClassId.QUEUE, 50),
    "queue.unbind-ok": MethodId(ClassId.QUEUE, 51),
    "basic.qos": MethodId(ClassId.BASIC, 10),
    "basic.qos-ok": MethodId(ClassId.BASIC, 11),
    "basic.consume": MethodId(ClassId.BASIC, 20),
    "basic.consume-ok": MethodId(ClassId.BASIC, 21),
    "basic.cancel": MethodId(ClassId.BASIC, 30),
    "basic.cancel-ok": MethodId(ClassId.BASIC, 31),
    "basic.publish": MethodId(ClassId.BASIC, 40),
    "basic.return": MethodId(ClassId.BASIC, 50),
    "basic.deliver": MethodId(ClassId.BASIC, 60),
    "basic.get": MethodId(ClassId.BASIC, 70),
    "basic.get-ok": MethodId(ClassId.BASIC, 71),
    "basic.get-empty": MethodId(ClassId.BASIC, 72),
    "basic.ack": MethodId(ClassId.BASIC, 80),
    "basic.reject": MethodId(ClassId.BASIC, 90),
    "basic.recover-async": MethodId(ClassId.BASIC, 100),
    "basic.recover": MethodId(ClassId.BASIC, 110),
    "basic.recover-ok": MethodId(ClassId.BASIC, 111),
    "basic.nack": MethodId(ClassId.BASIC, 120),
    "confirm.select": MethodId(ClassId.CONFIRM, 10),
    "confirm.select-ok": MethodId(ClassId.CONFIRM, 11),
    "tx.select": MethodId(ClassId.TX, 10),
    "tx.select-ok": MethodId(ClassId.TX, 11),
    "tx.commit": MethodId(ClassId.TX, 20),
    "tx.commit-ok": MethodId(ClassId.TX, 21),
    "tx.rollback": MethodId(ClassId.TX, 30),
    "tx.rollback-ok": MethodId(ClassId.TX, 31),
}
