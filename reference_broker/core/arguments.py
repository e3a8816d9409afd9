"""Queue argument checks as rabbit_amqqueue makes them (check_int_arg, check_non_neg_int_arg,
check_max_priority_arg): 406 PRECONDITION_FAILED "invalid arg '<arg>' for <queue>: <reason>",
the reason printed as RabbitMQ prints its Erlang term.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from codec import ReplyCode
from reference_broker.core.errors import soft

MAX_SUPPORTED_PRIORITY = 255  # rabbit_priority_queue ?MAX_SUPPORTED_PRIORITY

_FIELD_TYPES = ((bool, "bool"), (str, "longstr"), (float, "double"), (dict, "table"), (list, "array"),
                (bytes, "binary"), (type(None), "void"))


MAX_EXPIRY_MS = 315_360_000_000  # rabbit_misc:check_expiry: ten years


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def field_type(value: Any) -> str:
    """RabbitMQ's name for the field-table type a decoded value arrived as."""
    return next((name for kind, name in _FIELD_TYPES if isinstance(value, kind)), type(value).__name__)


def check_expires(arg: str, what: str, value: Any) -> None:
    """x-expires (QUEUE-07): a positive integer of at most ten years in ms (check_expires_arg)."""
    if not is_int(value):
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{arg}' for {what}: "
                   f'"expected integer, got {field_type(value)}"')
    reason = ("value_zero" if value == 0 else "value_negative" if value < 0
              else "value_too_large" if value > MAX_EXPIRY_MS else None)
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
