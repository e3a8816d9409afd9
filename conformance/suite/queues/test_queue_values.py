"""QUEUE-07 over the whole range of every field type x-expires can arrive as (drawn by Hypothesis).

RabbitMQ takes x-expires of any of its integer argument types (b B s u I i l: check_int_arg's
?INTEGER_ARG_TYPES) with a value from 1 to ten years in ms, and refuses 0, negative numbers, values
above ten years and every other type, a timestamp ('T') among them (rabbit_amqqueue
check_expires_arg, rabbit_misc:check_expiry: v3.10.8, v4.0.5, v4.3.5). Each example declares an
exclusive queue with one drawn (type, value), the value over that type's whole range with its ends,
zero, 2^32 and the ten-year bound first-class; the declaration is taken or refused 406 with
RabbitMQ's text, and a refused one creates no queue. A broker whose expiry timer holds 32 bits
refuses what lies above 2^32 - 1 ms (about 49.7 days). The examples are derandomized; a failure
shrinks to the smallest value that shows it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from codec import QueueDeclare, QueueDeclareOk, ReplyCode, Typed
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.field_values import INTEGER_RANGES, TEN_YEARS_MS, drawn, ranged
from conformance.suite.steps.topology import Judge

Connect = Callable[..., RawClient]
EXPIRES_EXAMPLES = 30
CODES = sorted(INTEGER_RANGES)  # b B I i l s T u: every integer type, and the timestamp RabbitMQ refuses


def typed_expires(code: bytes) -> st.SearchStrategy[Typed]:
    low, high = INTEGER_RANGES[code]
    return ranged(low, high).map(lambda value: Typed(code, value))


def refusal(value: Typed) -> str | None:
    """Why RabbitMQ refuses this x-expires (its term as printed), or None when it takes it."""
    if value.kind == b"T":
        return '"expected integer, got timestamp"'
    n = value.value
    return ("{value_zero,0}" if n == 0 else f"{{value_negative,{n}}}" if n < 0
            else f"{{value_too_large,{n}}}" if n > TEN_YEARS_MS else None)


@pytest.mark.rules("QUEUE-07")
@pytest.mark.clauses("QUEUE-07.a", "QUEUE-07.b", "QUEUE-07.c", "QUEUE-07.d", "QUEUE-07.e")
def test_every_x_expires_type_and_value_is_taken_or_refused_as_rabbitmq_does(connect: Connect, names: Names,
                                                                            target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-07")

    @drawn(EXPIRES_EXAMPLES)
    @example(expires=Typed(b"l", 2**32))
    @example(expires=Typed(b"l", TEN_YEARS_MS))
    @example(expires=Typed(b"l", TEN_YEARS_MS + 1))
    @example(expires=Typed(b"i", 2**32 - 1))
    @example(expires=Typed(b"b", -(2**7)))
    @example(expires=Typed(b"B", 0))
    @example(expires=Typed(b"T", 1))
    @given(expires=st.sampled_from(CODES).flatmap(typed_expires))
    def declared(expires: Typed) -> None:
        queue = names.queue("expires")
        method = QueueDeclare(queue=queue, exclusive=True, arguments={"x-expires": expires})
        what = f"declaring a queue with x-expires {expires.kind.decode()}:{expires.value}"
        why = refusal(expires)
        if why is None:
            judge.ok(what, method, QueueDeclareOk)
            return
        judge.refused(what, method, QueueDeclareOk, ReplyCode.PRECONDITION_FAILED,
                      f"PRECONDITION_FAILED - invalid arg 'x-expires' for queue '{queue}' in vhost "
                      f"'{target.vhost}': {why}")
        assert not judge.queue_exists(queue), f"QUEUE-07: the refused declaration ({what}) created queue {queue}"

    declared()
