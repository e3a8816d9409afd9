"""AMQP 0-9-1 protocol constants: frame types, reply codes and their error class.

Rules: every protocol constant is declared here once (STYLE: one source of truth per
protocol fact). Reply codes are an IntEnum; whether a code is a soft (channel) or hard
(connection) error follows RabbitMQ's codegen JSON (RULES.md ERR-02), which adds 312
NO_ROUTE to the 0-9-1 spec XML's list.
"""

from __future__ import annotations

import enum

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"  # 0-9-1 §4.2.2
FRAME_END = 0xCE  # 0-9-1 §4.2.3
FRAME_END_BYTE = b"\xce"
FRAME_HEADER_SIZE = 7  # type(1) channel(2) size(4)
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
    """Field-table dialect (DESIGN.md decision 2)."""

    RABBITMQ = "rabbitmq"  # RabbitMQ's errata: I signed 32, u unsigned 16, l signed 64, x bytes
    AMQP_0_9_1 = "amqp-0-9-1"  # the spec's grammar: U signed 16, L signed 64, l unsigned 64, s shortstr
