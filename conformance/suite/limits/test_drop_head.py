"""drop-head, the default overflow: a full queue drops its oldest ready messages (LEN-02) and
dead-letters them with reason maxlen (LEN-03).

Rules:
- Limits and messages are drawn (Hypothesis, `LIMIT_SETTINGS`); each example is a new queue,
  filled one publish at a time under confirms, then read with basic.get (`trial`); what it must
  confirm, hold and dead-letter is `predict`'s (RabbitMQ's rule as the catalogue says it).
- The bytes a message counts for are `counted_size`'s: its body's; on a quorum queue from 4.3
  its body's and its encoded properties' (LEN-02). Half the examples' messages carry a header,
  which a classic queue must not count.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec import BasicAck, BasicNack, BasicProperties
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.limits import (
    LIMIT_SETTINGS,
    Limits,
    bodies,
    dead_lettered,
    held,
    opened,
    publish_one_by_one,
    sized,
    trial,
)
from conformance.suite.steps.queues import CLASSIC, QUORUM, declare, get, ready, tag_of

Connect = Callable[..., RawClient]
KINDS = [CLASSIC, QUORUM]
HEADERS = BasicProperties(headers={"pad": "a header a classic queue does not count"})


@pytest.mark.rules("LEN-02")
@pytest.mark.parametrize("kind", KINDS)
def test_a_full_queue_drops_its_oldest_by_count(connect: Connect, names: Names, target: Target, kind: str) -> None:
    client, ch = opened(connect, target, kind)

    @LIMIT_SETTINGS
    @given(max_length=st.integers(min_value=0, max_value=4), count=st.integers(min_value=1, max_value=7))
    def check(max_length: int, count: int) -> None:
        run = trial(client, ch, names, target, kind, Limits(max_length=max_length), bodies(count))
        assert run.kept_as_predicted(), f"LEN-02: drop-head keeps the newest messages that fit: {run.told()}"

    check()


@pytest.mark.rules("LEN-02")
@pytest.mark.parametrize("kind", KINDS)
def test_a_full_queue_drops_its_oldest_by_bytes(connect: Connect, names: Names, target: Target, kind: str) -> None:
    client, ch = opened(connect, target, kind)

    @LIMIT_SETTINGS
    @given(max_bytes=st.integers(min_value=0, max_value=60), sizes=st.lists(st.integers(0, 20), min_size=1, max_size=6),
           headers=st.booleans())
    def check(max_bytes: int, sizes: list[int], headers: bool) -> None:
        run = trial(client, ch, names, target, kind, Limits(max_bytes=max_bytes), sized(sizes),
                    HEADERS if headers else None)
        assert run.kept_as_predicted(), (
            f"LEN-02: drop-head keeps the newest messages that fit, counting body bytes (a quorum queue from 4.3: "
            f"and its properties'; {target.profile.name}){' (with a header)' if headers else ''}: {run.told()}")

    check()


@pytest.mark.rules("LEN-02")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("max_length", [1, 3])
def test_unacknowledged_messages_do_not_count(connect: Connect, names: Names, target: Target, kind: str,
                                              max_length: int) -> None:
    """`max_length` messages taken by basic.get and not acked, then `max_length` more published:
    all the new ones are ready, and the old ones are still the channel's to ack."""
    client, ch = opened(connect, target, kind)
    queue = declare(client, ch, names.queue(kind), kind, {"x-max-length": max_length})
    old = bodies(max_length)
    publish_one_by_one(client, queue, old)
    taken = [get(client, ch, queue) for _ in old]
    new = [b"n" + b for b in old]
    publish_one_by_one(client, queue, new)
    count = ready(client, ch, queue)
    assert count == max_length, (
        f"LEN-02: only ready messages count toward x-max-length {max_length}: with {max_length} delivered and "
        f"unacknowledged, {max_length} new ones all stay ready; the {kind} queue counts {count}")
    for delivery in taken:
        assert delivery is not None, f"the {kind} queue did not deliver a message it held"
        client.send(ch, BasicAck(delivery_tag=delivery.tag))
    assert held(client, ch, queue) == new, f"LEN-02: the new messages are the ones kept, {new}"


@pytest.mark.rules("LEN-03")
@pytest.mark.parametrize("kind", KINDS)
def test_dropped_messages_are_dead_lettered_as_maxlen(connect: Connect, names: Names, target: Target,
                                                      kind: str) -> None:
    client, ch = opened(connect, target, kind)

    @LIMIT_SETTINGS
    @given(max_length=st.integers(min_value=0, max_value=3), count=st.integers(min_value=1, max_value=6))
    def check(max_length: int, count: int) -> None:
        run = trial(client, ch, names, target, kind, Limits(max_length=max_length), bodies(count), dead_letter=True)
        assert run.dead == run.want_dead, (
            f"LEN-03: what drop-head drops is dead-lettered, in order, with x-death reason and x-first-death-reason "
            f"maxlen: {run.told()}")

    check()


@pytest.mark.rules("LEN-02", "LEN-03")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("max_length", [1, 2, 3])
@pytest.mark.parametrize("multiple", [False, True], ids=["one-by-one", "multiple"])
def test_a_requeue_over_the_limit_drops_from_the_head(connect: Connect, names: Names, target: Target, kind: str,
                                                       max_length: int, multiple: bool) -> None:
    """`max_length` messages taken by basic.get and not acked, `max_length` more published, then
    the first ones nacked with requeue: the queue is back at its limit, what it dropped dead-lettered
    with reason maxlen, nothing lost or doubled. Which ones go is the head's: where a returned
    message goes is RQ-01's and RQ-02's, pinned here only for classic queues (back at their
    original places, the head: the requeued ones go)."""
    client, ch = opened(connect, target, kind)
    dlq = declare(client, ch, names.queue("dlq"))
    queue = declare(client, ch, names.queue(kind), kind,
                    {"x-max-length": max_length, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    old, new = bodies(max_length), [b"n" + b for b in bodies(max_length)]
    publish_one_by_one(client, queue, old)
    tags = [tag_of(get(client, ch, queue)) for _ in old]
    publish_one_by_one(client, queue, new)
    for tag in tags[-1:] if multiple else tags:
        client.send(ch, BasicNack(delivery_tag=tag, multiple=multiple, requeue=True))
    dead = dead_lettered(client, ch, dlq, max_length)
    kept = held(client, ch, queue)
    reasons = {reason for _, reason, _ in dead}
    dropped = [body for body, _, _ in dead]
    told = f"the {kind} queue held {kept}, its dead-letter queue got (body, reason, first reason) {dead}"
    assert len(kept) == max_length and sorted(kept + dropped) == sorted(old + new) and reasons <= {"maxlen"}, (
        f"LEN-02, LEN-03: with x-max-length {max_length}, {old} unacked and {new} ready, a nack with requeue of "
        f"{old} takes the queue over its limit: it drops from its head back to {max_length} messages and "
        f"dead-letters what it dropped with reason maxlen; {told}")
    if kind == CLASSIC:
        assert (kept, dropped) == (new, old), (
            f"LEN-02: a classic queue puts the requeued {old} back at their places, its head, and drops "
            f"them from there; {told}")
