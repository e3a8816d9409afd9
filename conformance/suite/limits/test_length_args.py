"""Which length-limit arguments a queue may be declared with (LEN-01), with RabbitMQ's exact texts
(the same on 3.10.8, 4.0.5 and 4.3.6, classic and quorum, live)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec import QueueDeclare, QueueDeclareOk, ReplyCode, Typed
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
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
