"""Headers exchanges (ROUTE-06, ROUTE-07, ROUTE-08): x-match all and any, void values, `x-` keys.

Each binding gets its own queue; every message carries its label as body. The expected sets are
RabbitMQ's, measured live on 3.10.8, 4.0.5 and 4.3.6 (the same on the three).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from codec import QueueBind, QueueBindOk, ReplyCode, Typed
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.replies import refused
from conformance.suite.steps.routing import assert_reached, topology

Connect = Callable[..., RawClient]
VOID = Typed(b"V", None)

MESSAGES: dict[str, dict[str, Any] | None] = {
    "no headers": None, "a=1": {"a": 1}, "a=1 b=2": {"a": 1, "b": "2"}, "a=1 b=3": {"a": 1, "b": "3"},
    "a=void": {"a": VOID}, "a='1'": {"a": "1"}, "a=1 (int64)": {"a": Typed(b"l", 1)}, "b=2": {"b": "2"},
    "a=2": {"a": 2},
}


@pytest.mark.rules("ROUTE-06")
def test_headers_all_and_any(connect: Connect, names: Names, target: Target) -> None:
    rabbitmq = target.profile.expect("ROUTE-06") == "required"
    bindings: dict[str, dict[str, Any]] = {
        "all": {"x-match": "all", "a": 1, "b": "2"}, "any": {"x-match": "any", "a": 1, "b": "2"},
        "no x-match (all)": {"a": 1, "b": "2"}, "no arguments": {},
    }
    want = {"all": {"a=1 b=2"}, "any": {"a=1", "a=1 b=2", "a=1 b=3", "a=1 (int64)", "b=2"},
            "no x-match (all)": {"a=1 b=2"}, "no arguments": set(MESSAGES)}
    messages = dict(MESSAGES)
    if rabbitmq:
        bindings["a present (void)"] = {"a": VOID}
        want["a present (void)"] = {"a=1", "a=1 b=2", "a=1 b=3", "a=void", "a='1'", "a=1 (int64)", "a=2"}
    else:  # ROUTE-06's variant: void values, values of other types and a message without headers are not pinned
        for label in ("a=void", "a='1'", "a=1 (int64)", "no headers"):
            messages.pop(label)
        want = {binding: received & set(messages) for binding, received in want.items()}
    _judge(connect, names, target, bindings, messages, want, "ROUTE-06")


@pytest.mark.rules("ROUTE-07")
def test_headers_x_keys_and_with_x_modes(connect: Connect, names: Names, target: Target) -> None:
    bindings: dict[str, dict[str, Any]] = {
        "all, only x- keys": {"x-match": "all", "x-k": "v"}, "any, only x- keys": {"x-match": "any", "x-k": "v"},
        "all-with-x": {"x-match": "all-with-x", "x-k": "v", "a": 1},
        "any-with-x": {"x-match": "any-with-x", "x-k": "v", "a": 9},
    }
    messages: dict[str, dict[str, Any] | None] = {"no headers": None, "a=1": {"a": 1}, "x-k=v": {"x-k": "v"},
                                                   "x-k=v a=1": {"x-k": "v", "a": 1}}
    want = {"all, only x- keys": set(messages), "any, only x- keys": set(),
            "all-with-x": {"x-k=v a=1"}, "any-with-x": {"x-k=v", "x-k=v a=1"}}
    _judge(connect, names, target, bindings, messages, want, "ROUTE-07")


def _judge(connect: Connect, names: Names, target: Target, bindings: dict[str, dict[str, Any]],
           messages: dict[str, dict[str, Any] | None], want: dict[str, set[str]], rule: str) -> None:
    t = topology(connect, names, target)
    t.exchange("h", "headers")
    for label, arguments in bindings.items():
        t.queue(label)
        t.bind(label, "h", "", arguments)
    for label, headers in messages.items():
        t.publish("h", "", label, headers=headers)
    described = "; ".join(f"{label}: {args}" for label, args in bindings.items())
    assert_reached(t.reached(), {k: sorted(v) for k, v in want.items()}, rule,
                   "publishes to a headers exchange (queue = its binding, body = the message's headers)",
                   f"bindings: {described}")


@pytest.mark.rules("ROUTE-08")
@pytest.mark.parametrize(("x_match", "text"), [
    ("foo", 'PRECONDITION_FAILED - Invalid x-match field value <<"foo">>; expected all, any, all-with-x, '
            "or any-with-x"),
    (Typed(b"I", 1), "PRECONDITION_FAILED - Invalid x-match field type "),
], ids=["unknown value", "not a longstr"])
def test_headers_unknown_x_match_refused(connect: Connect, names: Names, target: Target, x_match: Any,
                                         text: str) -> None:
    t = topology(connect, names, target)
    exchange, queue = t.exchange("h", "headers"), t.queue("q")
    method = QueueBind(queue=queue, exchange=exchange, arguments={"x-match": x_match, "a": 1})
    closed = refused(t.client, t.client.channel(), method, QueueBindOk, target)
    have = (type(closed).__name__, closed.code, closed.class_id, closed.method_id)
    want = ("ChannelClosed", ReplyCode.PRECONDITION_FAILED, QueueBind.CLASS_ID, QueueBind.METHOD_ID)
    assert have == want and closed.text.startswith(text), (
        f"ROUTE-08: queue.bind to a headers exchange with x-match={x_match!r} must be refused with {want} "
        f"and a text starting {text!r}; the broker sent {have}: {closed.text!r}")
