"""The codec's one exception family.

Rules: every decoding or framing failure raises a `CodecError` subclass carrying the AMQP
reply code a broker must answer with (501 FRAME_ERROR, 502 SYNTAX_ERROR, 505
UNEXPECTED_FRAME, 540 NOT_IMPLEMENTED), the construct path of the failing field when known,
and a hex window of the offending bytes. `AmqpError` is the base shared with the broker core
and the harness (docs/design.md (conventions) "Errors").
"""

from __future__ import annotations

from codec.constants import ReplyCode

HEX_WINDOW = 16  # bytes shown either side of the failing offset


def hex_window(data: bytes, offset: int, width: int = HEX_WINDOW) -> str:
    """Hex dump of `data` around `offset`, the failing byte bracketed: `00 01 [02] 03`."""
    if not data:
        return "<no bytes>"
    offset = max(0, min(offset, len(data)))
    start = max(0, offset - width)
    end = min(len(data), offset + width)
    parts = [
        f"[{data[i]:02x}]" if i == offset else f"{data[i]:02x}" for i in range(start, end)
    ]
    if offset >= len(data):
        parts.append("[<end>]")
    prefix = "… " if start > 0 else ""
    suffix = " …" if end < len(data) else ""
    return f"{prefix}{' '.join(parts)}{suffix} (offset {offset} of {len(data)})"


class AmqpError(Exception):
    """A protocol error with the reply the peer must get.

    `scope` is "channel" for soft errors and "connection" for hard ones (ERR-02) unless given.
    """

    def __init__(
        self,
        code: int,
        text: str,
        class_id: int = 0,
        method_id: int = 0,
        scope: str | None = None,
    ) -> None:
        self.code = ReplyCode(code)
        self.text = text
        self.class_id = class_id
        self.method_id = method_id
        self.scope = scope or ("connection" if self.code.is_hard_error else "channel")
        super().__init__(f"{self.code.value} {self.code.name}: {text}")

    @property
    def reply_text(self) -> str:
        """The text as RabbitMQ builds it: `<CONSTANT> - <explanation>` (ERR-01), ≤ 255 bytes."""
        full = f"{self.code.name} - {self.text}"
        raw = full.encode("utf-8", "surrogateescape")
        if len(raw) > 255:
            full = raw[:252].decode("utf-8", "ignore") + "..."
        return full


class CodecError(AmqpError):
    """Undecodable or illegal bytes. Always a connection-scope (hard) error."""

    default_code = ReplyCode.SYNTAX_ERROR

    def __init__(
        self,
        text: str,
        *,
        data: bytes = b"",
        offset: int = 0,
        path: str | None = None,
        code: int | None = None,
        class_id: int = 0,
        method_id: int = 0,
    ) -> None:
        self.path = path
        self.offset = offset
        self.data = bytes(data)  # the octets that failed (a broker quotes a method's arguments from them)
        self.window = hex_window(self.data, offset) if data else ""
        detail = text
        if path:
            detail += f" (at {path})"
        if self.window:
            detail += f"; bytes: {self.window}"
        super().__init__(
            code if code is not None else self.default_code,
            detail,
            class_id,
            method_id,
            scope="connection",
        )
        self.reason = text


class FrameError(CodecError):
    """501: bad frame-end octet, unknown frame type, oversized frame, body past its size."""

    default_code = ReplyCode.FRAME_ERROR


class FrameSyntaxError(CodecError):
    """502: a field that cannot be decoded (truncated, trailing bytes, bad type code)."""

    default_code = ReplyCode.SYNTAX_ERROR


class UnexpectedFrameError(CodecError):
    """505: a frame out of sequence (header without method, method inside content, …)."""

    default_code = ReplyCode.UNEXPECTED_FRAME


class UnknownMethodError(CodecError):
    """540: a class/method id pair the protocol does not define."""

    default_code = ReplyCode.NOT_IMPLEMENTED


class ProtocolHeaderError(CodecError):
    """The first 8 bytes are not `AMQP 0 0 9 1`; the broker answers with its own header."""

    default_code = ReplyCode.FRAME_ERROR


class EncodeError(CodecError):
    """A value that cannot be put on the wire (string over 255 bytes, integer out of range)."""

    default_code = ReplyCode.SYNTAX_ERROR
