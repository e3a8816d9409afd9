"""SASL PLAIN and AMQPLAIN authentication against the configured users.

Rules: an unparsable response is 502 SYNTAX_ERROR (ERR-04); an unknown mechanism 503; wrong
credentials 403 ACCESS_REFUSED with RabbitMQ's text, which says nothing about which part
was wrong. Password comparison is constant-time.
"""

from __future__ import annotations

import hmac
import struct

from codec import CodecError, ReplyCode
from codec.fast_tables import RABBITMQ_TABLES
from reference_broker.config import BrokerConfig


class AuthError(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


def parse_response(mechanism: str, response: bytes) -> tuple[str, str]:
    """(user, password) from a PLAIN or AMQPLAIN response."""
    if mechanism == "PLAIN":
        parts = response.split(b"\x00")
        if len(parts) != 3:
            raise AuthError(ReplyCode.SYNTAX_ERROR, "malformed PLAIN response")
        return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if mechanism == "AMQPLAIN":
        try:
            table, _end = RABBITMQ_TABLES.decode_table(struct.pack(">I", len(response)) + response, 0)
        except (CodecError, struct.error, IndexError, ValueError):
            raise AuthError(ReplyCode.SYNTAX_ERROR, "malformed AMQPLAIN response") from None
        login, password = table.get("LOGIN"), table.get("PASSWORD")
        if not isinstance(login, str) or not isinstance(password, str):
            raise AuthError(ReplyCode.SYNTAX_ERROR, "AMQPLAIN response lacks LOGIN/PASSWORD")
        return login, password
    raise AuthError(ReplyCode.COMMAND_INVALID, f"unknown authentication mechanism '{mechanism}'")


def authenticate(config: BrokerConfig, mechanism: str, response: bytes) -> str:
    user, password = parse_response(mechanism, response)
    expected = config.users.get(user)
    if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
        raise AuthError(ReplyCode.ACCESS_REFUSED,
                        f"Login was refused using authentication mechanism {mechanism}. "
                        "For details see the broker logfile.")
    return user
