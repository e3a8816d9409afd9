"""Which length-limit arguments a queue may be declared with (LEN-01), with RabbitMQ's exact texts
(the same on 3.10.8, 4.0.5 and 4.3.6, classic and quorum, live).

x-max-length and x-max-length-bytes are also drawn over every field type they can arrive as: any
of RabbitMQ's integer argument types (b B s u I i l: ?INTEGER_ARG_TYPES of rabbit_amqqueue, the same
list in v3.10.8, v4.0.5 and v4.3.5) over its whole range, taken from 0 up and refused
{value_negative,<n>} below, and a timestamp ('T'), refused "expected integer, got timestamp"
(check_non_neg_int_arg, no upper bound)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from codec import QueueDeclare, QueueDeclareOk, ReplyCode, Typed
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.field_values import INTEGER_RANGES, drawn, ranged
from conformance.suite.steps.limits import LIMIT_SETTINGS
from conformance.suite.steps.queues import CLASSIC, QUORUM, require_kind
from conformance.suite.steps.topology import Judge

Connect = Callable[..., RawClient]
KINDS = [CLASSIC, QUORUM]
LENGTHS = ["x-max-length", "x-max-length-bytes"]

REFUSED: dict[str, tuple[dict[str, Any], str]] = {  # case -> (arguments, what RabbitMQ says after the queue)
    "max-length text": ({"x-max-length": "5"}, "invalid arg 'x-max-length' for {q}: \"expected integer, got longstr\""),
    "max-length double": ({"x-max-length": 1.5}, "invalid arg 'x-max-length' for {q}: \"expected integer, got double\""),
    "max-length bool": ({"x-max-length": True}, "invalid arg 'x-max-length' for {q}: \"expected integer, got bool\""),
    "max-length-bytes text": ({"x-max-length-bytes": "10"},
                              "invalid arg 'x-max-length-bytes' for {q}: \"expected integer, got longstr\""),
    "overflow unknown": ({"x-overflow": "drop-tail"}, "invalid arg 'x-overflow' for {q}: invalid_overflow"),
    "overflow case": ({"x-overflow": "Drop-Head"}, "invalid arg 'x-overflow' for {q}: invalid_overflow"),
    "overflow byte": ({"x-overflow": 5}, "invalid arg 'x-overflow' for {q}: {{unacceptable_type,byte}}"),
    "overflow bool": ({"x-overflow": True}, "invalid arg 'x-overflow' for {q}: {{unacceptable_type,bool}}"),
    "overflow binary": ({"x-overflow": b"drop-head"}, "invalid arg 'x-overflow' for {q}: {{unacceptable_type,binary}}"),
}
OVERFLOWS = ["drop-head", "reject-publish", "reject-publish-dlx"]
TYPED_EXAMPLES = 30  # drawn (type, value) pairs per argument and queue type, the explicit ones besides
CODES = sorted(INTEGER_RANGES)  # b B I i l s T u: every integer type, and the timestamp RabbitMQ refuses


def typed_limit(code: bytes) -> st.SearchStrategy[Typed]:
    low, high = INTEGER_RANGES[code]
    return ranged(low, high).map(lambda value: Typed(code, value))


def queue_arguments(kind: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {**arguments, **({} if kind == CLASSIC else {"x-queue-type": kind})}


def refused(judge: Judge, names: Names, target: Target, kind: str, arguments: dict[str, Any], text: str) -> None:
    queue = names.queue(kind)
    judge.refused(f"declaring a {kind} queue with {arguments}",
                  QueueDeclare(queue=queue, durable=kind != CLASSIC, arguments=queue_arguments(kind, arguments)),
                  QueueDeclareOk, ReplyCode.PRECONDITION_FAILED,
                  "PRECONDITION_FAILED - " + text.format(q=f"queue '{queue}' in vhost '{target.vhost}'"))


@pytest.mark.rules("LEN-01")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(REFUSED))
def test_invalid_length_arguments_are_refused(connect: Connect, names: Names, target: Target, kind: str,
                                              case: str) -> None:
    require_kind(target.profile, kind)
    arguments, text = REFUSED[case]
    refused(Judge(connect(), target, "LEN-01"), names, target, kind, arguments, text)


@pytest.mark.rules("LEN-01")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arg", LENGTHS)
def test_a_negative_limit_is_refused(connect: Connect, names: Names, target: Target, kind: str, arg: str) -> None:
    """Negative values drawn from -1 down to a long's minimum, each a declaration refused with
    {value_negative,<n>}."""
    require_kind(target.profile, kind)
    judge = Judge(connect(), target, "LEN-01")

    @LIMIT_SETTINGS
    @given(value=st.integers(min_value=-(2**63), max_value=-1))
    def check(value: int) -> None:
        refused(judge, names, target, kind, {arg: value}, f"invalid arg '{arg}' for {{q}}: {{{{value_negative,{value}}}}}")

    check()


@pytest.mark.rules("LEN-01")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arg", LENGTHS)
def test_a_non_negative_limit_is_taken(connect: Connect, names: Names, target: Target, kind: str, arg: str) -> None:
    """0, and values drawn up to a long's maximum, each encoded as the smallest integer field type
    that holds it, and 100 as a signed 32-bit and a long."""
    require_kind(target.profile, kind)
    judge = Judge(connect(), target, "LEN-01")

    @LIMIT_SETTINGS
    @given(value=st.one_of(st.just(0), st.integers(min_value=0, max_value=2**63 - 1),
                           st.sampled_from([Typed(b"I", 100), Typed(b"l", 100)])))
    def check(value: Any) -> None:
        arguments = queue_arguments(kind, {arg: value})
        judge.ok(f"declaring a {kind} queue with {arg} {value!r}",
                 QueueDeclare(queue=names.queue(kind), durable=kind != CLASSIC, arguments=arguments), QueueDeclareOk)

    check()


@pytest.mark.rules("LEN-01")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("overflow", OVERFLOWS)
def test_each_overflow_mode_is_taken(connect: Connect, names: Names, target: Target, kind: str,
                                     overflow: str) -> None:
    """Quorum queues take reject-publish-dlx too (and act on it as drop-head: LEN-05)."""
    require_kind(target.profile, kind)
    judge = Judge(connect(), target, "LEN-01")
    arguments = queue_arguments(kind, {"x-overflow": overflow, "x-max-length": 1})
    judge.ok(f"declaring a {kind} queue with x-overflow {overflow!r}",
             QueueDeclare(queue=names.queue(kind), durable=kind != CLASSIC, arguments=arguments), QueueDeclareOk)


@pytest.mark.rules("LEN-01")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arg", LENGTHS)
def test_every_limit_type_and_value_is_taken_or_refused_as_rabbitmq_does(connect: Connect, names: Names,
                                                                         target: Target, kind: str, arg: str) -> None:
    """Each example declares a queue with one drawn (type, value): taken when the value is 0 or
    more, refused {value_negative,<n>} below, a timestamp refused as not an integer."""
    require_kind(target.profile, kind)
    judge = Judge(connect(), target, "LEN-01")

    @drawn(TYPED_EXAMPLES)
    @example(value=Typed(b"B", 2**8 - 1))
    @example(value=Typed(b"u", 2**16 - 1))
    @example(value=Typed(b"i", 2**32 - 1))
    @example(value=Typed(b"l", 2**63 - 1))
    @example(value=Typed(b"b", -(2**7)))
    @example(value=Typed(b"I", -(2**31)))
    @example(value=Typed(b"T", 0))
    @given(value=st.sampled_from(CODES).flatmap(typed_limit))
    def declared(value: Typed) -> None:
        shown = f"{value.kind.decode()}:{value.value}"
        if value.kind == b"T":
            refused(judge, names, target, kind, {arg: value},
                    f"invalid arg '{arg}' for {{q}}: \"expected integer, got timestamp\"")
        elif value.value < 0:
            refused(judge, names, target, kind, {arg: value},
                    f"invalid arg '{arg}' for {{q}}: {{{{value_negative,{value.value}}}}}")
        else:
            judge.ok(f"declaring a {kind} queue with {arg} {shown}",
                     QueueDeclare(queue=names.queue(kind), durable=kind != CLASSIC,
                                  arguments=queue_arguments(kind, {arg: value})), QueueDeclareOk)

    declared()
