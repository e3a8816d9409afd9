"""x-expires (QUEUE-07, QUEUE-08): which values a queue may be declared with, and the lease.

The lease is observed without using the queue: a declare, a basic.get or a consumer would renew
it, a publish does not (QUEUE-08). So each look is a mandatory publish to the queue through the
default exchange, followed by a round trip on the same channel: a basic.return 312 says the queue
is gone. The bounds come from the client's own clock, on the side a slow machine cannot spoil:
- the queue may not be gone before x-expires has passed since the declaration (or renewal) was
  sent, since the broker's timer starts after it received that request;
- it must be gone within x-expires plus the scaled wait after the last use was answered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from codec import (
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicGet,
    BasicGetEmpty,
    QueueDeclare,
    QueueDeclareOk,
    ReplyCode,
    Typed,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.results.verdicts import HarnessError
from conformance.suite.steps.topology import Judge
from conformance.suite.steps.wire import pump

Connect = Callable[..., RawClient]
LEASE_MS = 500  # short: every test below waits on it at least once
LOOK_EVERY_S = 0.02  # between two looks; a look itself is a round trip

INVALID: dict[str, tuple[Any, str]] = {  # x-expires -> what RabbitMQ says of it
    "zero": (0, "{value_zero,0}"),
    "negative": (-1, "{value_negative,-1}"),
    "text": ("1000", '"expected integer, got longstr"'),
    "double": (1.5, '"expected integer, got double"'),
    "bool": (True, '"expected integer, got bool"'),
    "over ten years": (315_360_000_001, "{value_too_large,315360000001}"),
}


@pytest.mark.rules("QUEUE-07")
@pytest.mark.clauses("QUEUE-07.a", "QUEUE-07.b", "QUEUE-07.c", "QUEUE-07.d")
@pytest.mark.parametrize("value", list(INVALID))
def test_an_invalid_x_expires_is_refused(connect: Connect, names: Names, target: Target, value: str) -> None:
    judge = Judge(connect(), target, "QUEUE-07")
    q = names.queue("q")
    expires, why = INVALID[value]
    judge.refused(f"declaring a queue with x-expires {expires!r}", QueueDeclare(queue=q, exclusive=True,
                  arguments={"x-expires": expires}), QueueDeclareOk, ReplyCode.PRECONDITION_FAILED,
                  f"PRECONDITION_FAILED - invalid arg 'x-expires' for queue '{q}' in vhost '{target.vhost}': {why}")
    assert not judge.queue_exists(q), f"QUEUE-07: the refused declaration created queue {q}"


@pytest.mark.rules("QUEUE-07")
@pytest.mark.clauses("QUEUE-07.e")
def test_any_positive_integer_x_expires_is_accepted(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-07")
    for expires in (1_000_000, Typed(b"I", 1_000_000), Typed(b"l", 2**32 + 5), Typed(b"B", 200),
                    315_360_000_000):
        judge.ok(f"declaring a queue with x-expires {expires}", QueueDeclare(
            queue=names.queue("q"), exclusive=True, arguments={"x-expires": expires}), QueueDeclareOk)


class _Watch:
    """Looks at a queue without using it: a mandatory publish and a round trip."""

    def __init__(self, judge: Judge, queue: str) -> None:
        self.judge, self.queue = judge, queue
        self.ch = judge.channel()
        self.looks = 0

    def gone(self) -> bool:
        self.looks += 1
        self.judge.publish("", self.queue, f"look {self.looks}", mandatory=True, ch=self.ch)
        return any(r.reply_code == ReplyCode.NO_ROUTE for r in self.judge.returned(self.ch))

    def gone_at(self, until: float) -> float | None:
        """When the queue was first seen gone (monotonic), looking until `until`."""
        while True:
            if self.gone():
                return time.monotonic()
            if time.monotonic() >= until:
                return None
            pump(self.judge.client, LOOK_EVERY_S)  # the next look a little later (reading what arrives)


def _declare(judge: Judge, q: str) -> tuple[float, float]:
    """Declare (or redeclare) the queue with the lease; (sent, answered) on the monotonic clock."""
    sent = time.monotonic()
    judge.ok(f"declaring a queue with x-expires {LEASE_MS}", QueueDeclare(queue=q, exclusive=True,
             arguments={"x-expires": LEASE_MS}), QueueDeclareOk)
    return sent, time.monotonic()


@pytest.mark.long_wait(1)  # the lease, on the broker's clock
@pytest.mark.rules("QUEUE-08")
def test_an_unused_queue_expires(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-08")
    q = names.queue("leased")
    sent, answered = _declare(judge, q)
    watch = _Watch(judge, q)
    seen = watch.gone_at(answered + LEASE_MS / 1000 + target.timeout(10))
    assert seen is not None, (f"QUEUE-08: a queue declared with x-expires {LEASE_MS} and not used (only published "
                              f"to) still existed {target.timeout(10):.0f} s after its lease ended")
    lived = seen - sent
    assert lived >= LEASE_MS / 1000, (f"QUEUE-08: a queue declared with x-expires {LEASE_MS} was gone "
                                      f"{lived * 1000:.0f} ms after its declaration was sent, before its lease ended")


@pytest.mark.long_wait(1)  # the lease, on the broker's clock
@pytest.mark.rules("QUEUE-08")
@pytest.mark.parametrize("use", ["redeclare", "basic.get"])
def test_use_renews_the_lease(connect: Connect, names: Names, target: Target, use: str) -> None:
    judge = Judge(connect(), target, "QUEUE-08")
    for _attempt in range(3):  # a renewal answered after the first lease could end proves nothing: again
        q = names.queue("leased")
        first_sent, _ = _declare(judge, q)
        renewed = time.monotonic()
        if use == "redeclare":
            _declare(judge, q)
        else:
            judge.ok("a basic.get", BasicGet(queue=q, no_ack=True), BasicGetEmpty)
        renewed_answer = time.monotonic()
        if renewed_answer - first_sent < LEASE_MS / 1000:
            break
    else:
        raise HarnessError(f"three times, the {use} was answered only after the first lease of {LEASE_MS} ms "
                           "could have ended: this machine is too slow to tell a renewal from a new queue")
    watch = _Watch(judge, q)
    seen = watch.gone_at(renewed_answer + LEASE_MS / 1000 + target.timeout(10))
    assert seen is not None, (f"QUEUE-08: a queue leased for {LEASE_MS} ms still existed {target.timeout(10):.0f} s "
                              f"after the lease renewed by {use} ended")
    assert seen - renewed >= LEASE_MS / 1000, (
        f"QUEUE-08: {use} {(renewed - first_sent) * 1000:.0f} ms after the declaration must renew the lease of "
        f"{LEASE_MS} ms; the queue was gone {(seen - renewed) * 1000:.0f} ms after the {use}, "
        f"{(seen - first_sent) * 1000:.0f} ms after the declaration")


@pytest.mark.long_wait(2)  # the lease, on the broker's clock
@pytest.mark.rules("QUEUE-08")
def test_a_consumer_holds_the_lease(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-08")
    q = names.queue("leased")
    _declare(judge, q)
    consumer = judge.channel()
    judge.ok("consuming from it", BasicConsume(queue=q, consumer_tag="holder", no_ack=True), BasicConsumeOk,
             ch=consumer)
    held = time.monotonic()
    watch = _Watch(judge, q)
    gone = watch.gone_at(held + 2 * LEASE_MS / 1000)  # looks until twice the lease has passed
    assert gone is None, (f"QUEUE-08: a queue with a consumer must not expire; it was gone "
                          f"{(gone - held) * 1000:.0f} ms after the consumer subscribed (x-expires {LEASE_MS})")
    # the lease cannot start again before the broker has the cancel: the time it was sent bounds that
    # from below (the cancel-ok comes later by a round trip, which a loaded machine makes long)
    released = time.monotonic()
    judge.ok("cancelling the consumer", BasicCancel(consumer_tag="holder"), BasicCancelOk, ch=consumer)
    seen = watch.gone_at(time.monotonic() + LEASE_MS / 1000 + target.timeout(10))
    assert seen is not None, (f"QUEUE-08: the queue must expire once its last consumer went; it still existed "
                              f"{target.timeout(10):.0f} s after its lease of {LEASE_MS} ms ended")
    assert seen - released >= LEASE_MS / 1000, (
        f"QUEUE-08: the lease starts again when the last consumer goes; the queue was gone "
        f"{(seen - released) * 1000:.0f} ms after the cancel (x-expires {LEASE_MS})")
