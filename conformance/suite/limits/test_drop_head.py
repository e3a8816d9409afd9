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

from codec import BasicAck, BasicProperties
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.limits import (
    LIMIT_SETTINGS,
    Limits,
    bodies,
    held,
    opened,
    publish_one_by_one,
    sized,
    trial,
)
from conformance.suite.steps.queues import CLASSIC, QUORUM, declare, get, ready

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
