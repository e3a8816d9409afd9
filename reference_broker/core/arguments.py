"""Queue argument checks as rabbit_amqqueue makes them (check_int_arg, check_non_neg_int_arg,
check_max_priority_arg, check_message_ttl_arg): 406 PRECONDITION_FAILED "invalid arg '<arg>' for
<queue>: <reason>", the reason printed as RabbitMQ prints its Erlang term; and the per-message
`expiration` property as rabbit_basic:parse_expiration reads it (TTL-01).
"""

from __future__ import annotations

import datetime
from typing import Any, TypeGuard

from codec import ReplyCode
from codec.fields import Timestamp
from reference_broker.core.errors import soft

MAX_SUPPORTED_PRIORITY = 255  # rabbit_priority_queue ?MAX_SUPPORTED_PRIORITY

_FIELD_TYPES = ((bool, "bool"), (Timestamp, "timestamp"), (datetime.datetime, "timestamp"), (str, "longstr"),
                (float, "double"), (dict, "table"), (list, "array"), (bytes, "binary"), (type(None), "void"))


MAX_EXPIRY_MS = 315_360_000_000  # rabbit_misc:check_expiry: ten years


def is_int(value: Any) -> TypeGuard[int]:
    """One of RabbitMQ's integer argument types (?INTEGER_ARG_TYPES: b B s u I i l); not a bool,
    not a timestamp ('T' decodes to a datetime, or to `Timestamp` outside datetime's range)."""
    return isinstance(value, int) and not isinstance(value, bool | Timestamp)


def field_type(value: Any) -> str:
    """RabbitMQ's name for the field-table type a decoded value arrived as."""
    return next((name for kind, name in _FIELD_TYPES if isinstance(value, kind)), type(value).__name__)


def check_expires(arg: str, what: str, value: Any, maximum: int = MAX_EXPIRY_MS) -> None:
    """x-expires (QUEUE-07): a positive integer of at most ten years in ms (check_expires_arg)."""
    if not is_int(value):
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{arg}' for {what}: "
                   f'"expected integer, got {field_type(value)}"')
    reason = ("value_zero" if value == 0 else "value_negative" if value < 0
              else "value_too_large" if value > maximum else None)
    if reason:
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{arg}' for {what}: {{{reason},{value}}}")


def check_non_negative_int(arg: str, what: str, value: Any, maximum: int | None = None) -> None:
    """An integer, not negative, at most `maximum` (x-max-priority: 255); else 406."""
    if not is_int(value):  # printed with ~tp: a quoted string
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{arg}' for {what}: "
                   f'"expected integer, got {field_type(value)}"')
    if value < 0:
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{arg}' for {what}: {{value_negative,{value}}}")
    if maximum is not None and value > maximum:
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{arg}' for {what}: {{max_value_exceeded,{value}}}")


def check_message_ttl(arg: str, what: str, value: Any) -> None:
    """x-message-ttl (TTL-02): an integer from 0 to ten years in ms (check_message_ttl_arg:
    check_int_arg, then rabbit_misc:check_expiry)."""
    if not is_int(value):
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{arg}' for {what}: "
                   f'"expected integer, got {field_type(value)}"')
    reason = "value_negative" if value < 0 else "value_too_large" if value > MAX_EXPIRY_MS else None
    if reason:
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{arg}' for {what}: {{{reason},{value}}}")


def parse_expiration(text: str) -> int:
    """A message's `expiration` in ms, as rabbit_basic:parse_expiration reads it (TTL-01):
    string:to_integer (an optional sign, then decimal digits, nothing before them), all of the
    string, then check_expiry; else 406 "invalid expiration '<text>': <reason>"."""
    sign = 1 if len(text) > 0 and text[0] in "+-" else 0
    digits = len(text[sign:]) - len(text[sign:].lstrip("0123456789"))
    if digits == 0:
        reason = "no_integer"
    elif sign + digits < len(text):
        reason = f"{{leftover_string,{erlang_string(text[sign + digits:])}}}"
    else:
        value = int(text)
        if 0 <= value <= MAX_EXPIRY_MS:
            return value
        reason = f"{{{'value_negative' if value < 0 else 'value_too_large'},{value}}}"
    raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}': {reason}")


def erlang_string(text: str) -> str:
    """How ~p prints a list of character codes: a quoted string when every code is printable
    (io_lib:printable_list; here printable ASCII, with \\ and \" escaped), else the list."""
    if all(32 <= ord(c) < 127 for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "[" + ",".join(str(b) for b in text.encode()) + "]"


DLX, DLRK = "x-dead-letter-exchange", "x-dead-letter-routing-key"


def check_dead_letter_args(arguments: dict[str, Any], what: str) -> None:
    """DLX-03 (rabbit_amqqueue check_dlxname_arg, check_dlxrk_arg): the exchange a longstr, the
    routing key a longstr and only beside an exchange; the exchange need not exist."""
    dlx, dlrk = arguments.get(DLX), arguments.get(DLRK)
    if dlx is not None and not isinstance(dlx, str):
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid type '{field_type(dlx)}' for arg '{DLX}' in {what}")
    if dlrk is None:
        return
    if not isinstance(dlrk, str):
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{DLRK}' for {what}: {{unacceptable_type,{field_type(dlrk)}}}")
    if dlx is None:
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{DLRK}' for {what}: routing_key_but_no_dlx_defined")
