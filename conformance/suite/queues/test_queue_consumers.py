"""How a queue shares its messages among consumers (QUEUE-13, QUEUE-14): in turn, and by
consumer priority.

Each consumer is on a channel of its own; every message is published (and confirmed) first, then
the deliveries are read until all of them arrived (`_received`, within the scaled wait): no
shortened look decides what a consumer got.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from codec import (
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicQos,
    BasicQosOk,
    QueueDeclare,
    QueueDeclareOk,
    ReplyCode,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.topology import Judge
from conformance.suite.steps.wire import pump

Connect = Callable[..., RawClient]


def _received(client: RawClient, channels: list[int], count: int, target: Target) -> dict[int, list[tuple[str, int]]]:
    """(body, delivery tag) of the deliveries on each channel, once `count` arrived in all (read
    until then, within the scaled wait), then taken from the channels' inboxes."""
    deadline = time.monotonic() + target.timeout(5)
    while sum(_waiting(client, ch) for ch in channels) < count and time.monotonic() < deadline:
        pump(client, 0.05)
    got: dict[int, list[tuple[str, int]]] = {}
    for ch in channels:
        got[ch] = []
        for _ in range(_waiting(client, ch)):
            delivery: Any = client.expect(ch, BasicDeliver, timeout=0)
            got[ch].append((delivery.body.decode(), delivery.method.delivery_tag))
    return got


def _waiting(client: RawClient, ch: int) -> int:
    return sum(isinstance(c.method, BasicDeliver) for c in client.pending(ch))


@pytest.mark.rules("QUEUE-13")
def test_consumers_get_messages_in_turn(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-13")
    q = names.queue("q")
    judge.ok("declaring a queue", QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    channels = []
    for tag in ("first", "second", "third"):
        ch = judge.channel()
        judge.ok(f"consuming ({tag}, no-ack)", BasicConsume(queue=q, consumer_tag=tag, no_ack=True), BasicConsumeOk,
                 ch=ch)
        channels.append((tag, ch))
    judge.publish_confirmed(q, *(str(n) for n in range(9)))
    seen = _received(judge.client, [ch for _, ch in channels], 9, target)
    got = {tag: [body for body, _ in seen[ch]] for tag, ch in channels}
    if judge.pinned:
        want = {"first": ["0", "3", "6"], "second": ["1", "4", "7"], "third": ["2", "5", "8"]}
        assert got == want, (f"QUEUE-13: nine messages to three no-ack consumers must go to them in turn, in the "
                             f"order they subscribed, {want}; they went {got}")
    else:
        assert sorted(b for bodies in got.values() for b in bodies) == [str(n) for n in range(9)] and all(
            got.values()), f"QUEUE-13: nine messages must be shared among the three consumers; they went {got}"


@pytest.mark.rules("QUEUE-13")
def test_ready_messages_go_to_the_first_consumer(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-13")
    q = names.queue("q")
    judge.ok("declaring a queue", QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    judge.publish_confirmed(q, *(str(n) for n in range(4)))
    first = judge.channel()
    judge.ok("consuming (no-ack)", BasicConsume(queue=q, consumer_tag="first", no_ack=True), BasicConsumeOk, ch=first)
    got = [body for body, _ in _received(judge.client, [first], 4, target)[first]]
    assert got == ["0", "1", "2", "3"], (f"QUEUE-13: the four messages ready before the first consumer subscribed "
                                         f"must go to it, in order; it received {got}")


@pytest.mark.rules("QUEUE-14")
def test_a_higher_priority_consumer_comes_first(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-14")
    q = names.queue("q")
    judge.ok("declaring a queue", QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    high, low = judge.channel(), judge.channel()
    judge.ok("prefetch 2 on the high-priority consumer's channel", BasicQos(prefetch_count=2), BasicQosOk, ch=high)
    judge.ok("prefetch 10 on the low one's", BasicQos(prefetch_count=10), BasicQosOk, ch=low)
    judge.ok("consuming with x-priority 10", BasicConsume(queue=q, consumer_tag="high", arguments={"x-priority": 10}),
             BasicConsumeOk, ch=high)
    judge.ok("consuming with x-priority -1", BasicConsume(queue=q, consumer_tag="low", arguments={"x-priority": -1}),
             BasicConsumeOk, ch=low)
    judge.publish_confirmed(q, *(str(n) for n in range(5)))
    seen = _received(judge.client, [high, low], 5, target)
    h = seen[high]
    first = ([b for b, _ in h], [b for b, _ in seen[low]])
    assert first == (["0", "1"], ["2", "3", "4"]), (
        f"QUEUE-14: five messages to a consumer of priority 10 with prefetch 2 and one of priority -1 must go 0, 1 to "
        f"the high one (until it is full), 2, 3, 4 to the low one; they went high {first[0]}, low {first[1]}")
    judge.client.send(high, BasicAck(delivery_tag=h[0][1]))
    judge.publish_confirmed(q, "5", "6")
    seen = _received(judge.client, [high, low], 2, target)
    then = ([b for b, _ in seen[high]], [b for b, _ in seen[low]])
    assert then == (["5"], ["6"]), (
        f"QUEUE-14: after the high-priority consumer acked one message, of the next two it must take 5 (its room) "
        f"and the low one 6; they went high {then[0]}, low {then[1]}")


@pytest.mark.rules("QUEUE-14")
@pytest.mark.parametrize("value", ["high", 1.5])
def test_a_non_integer_x_priority_is_refused(connect: Connect, names: Names, target: Target, value: Any) -> None:
    judge = Judge(connect(), target, "QUEUE-14")
    q = names.queue("q")
    judge.ok("declaring a queue", QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    kind = "longstr" if isinstance(value, str) else "double"
    judge.refused(f"consuming with x-priority {value!r}", BasicConsume(queue=q, arguments={"x-priority": value}),
                  BasicConsumeOk, ReplyCode.PRECONDITION_FAILED,
                  f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{q}' in vhost '{target.vhost}': "
                  f'"expected integer, got {kind}"')
