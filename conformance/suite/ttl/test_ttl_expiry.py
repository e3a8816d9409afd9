"""When a message that outlived its TTL is gone (TTL-03, TTL-04, TTL-05), on the broker's own clock.

Rules:
- The TTL counts from the enqueue, which comes after the client sent the publish and before the
  broker confirmed it (a transient message to a classic queue is confirmed while it is enqueued;
  a quorum queue's once a majority wrote it). So the client's clock bounds the broker's both ways:
  the message may not be gone while less than TTL has passed since the publish was sent (asked
  only when the reply to that question came back within that time, else nothing is concluded),
  and it must be gone by TTL plus `TOLERANCE` after the confirm.
- `TOLERANCE` (0.5 s, scaled by --timeout-scale) covers what RabbitMQ's source allows past the
  TTL: the classic queue's timer is set for the head's expiry rounded up to the millisecond
  (rabbit_amqqueue_process ensure_ttl_timer), the quorum queue's after each applied batch
  (rabbit_fifo timer_effect); the rest is a loaded machine's scheduling. A message still there
  after it fails the rule, and the message says how late it was.
- "Nothing delivered" is watched for `QUIET` (0.5 s, scaled): a broker that would hand over an
  expired message does it at once, to an idle queue's new consumer or as the message comes back;
  a shorter watch could only miss a deviation, never fail a conforming broker.
- Expiry is judged three ways, each its own test: the count (queue.declare-ok, the timer at the
  head), basic.get and a consumer. The TTL comes from the message, the queue or both (the
  lower one must win).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from codec import (
    BasicAck,
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    BasicReject,
    TxCommit,
    TxCommitOk,
    TxSelect,
    TxSelectOk,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.deadletter import TTL_TOLERANCE
from conformance.suite.steps.queues import (
    CLASSIC,
    QUORUM,
    Publisher,
    assert_quiet,
    consume,
    declare,
    get,
    ready,
    require_kind,
    take_one_now,
)

Connect = Callable[..., RawClient]
TTL_MS = 300
LONG_MS = 600_000  # never passes within a test
TOLERANCE = TTL_TOLERANCE  # s past the TTL (scaled): see the module's rules
QUIET = 0.5  # s (scaled) a consumer must get nothing: see the module's rules
PAST_TTL = pytest.mark.long_wait(TTL_MS / 1000 + TOLERANCE)  # schedule: the TTL passes on the broker's clock
PAST_TTL_THEN_QUIET = pytest.mark.long_wait(TTL_MS / 1000 + TOLERANCE + QUIET)  # then nothing may arrive


@dataclass(frozen=True)
class Source:
    queue: int | None  # x-message-ttl
    message: str | None  # expiration

    def arguments(self) -> dict[str, int]:
        return {} if self.queue is None else {"x-message-ttl": self.queue}

    def properties(self) -> BasicProperties:
        return BasicProperties(expiration=self.message)


SOURCES = {
    "message": Source(None, str(TTL_MS)),
    "queue": Source(TTL_MS, None),
    "queue-lower": Source(TTL_MS, str(LONG_MS)),
    "message-lower": Source(LONG_MS, str(TTL_MS)),
}
KINDS = [CLASSIC, QUORUM]


def published(connect: Connect, names: Names, target: Target, kind: str, source: Source) -> tuple[RawClient, int, str, float]:
    """A queue holding one message whose TTL is TTL_MS: (client, channel, queue, when it was confirmed).
    Checks on the way that it is still there while its TTL cannot have passed."""
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    queue = declare(client, ch, names.queue(kind), kind, source.arguments())
    sent = time.monotonic()
    Publisher(client).publish(queue, [b"m"], source.properties())
    confirmed = time.monotonic()
    count = ready(client, ch, queue)
    if time.monotonic() - sent < TTL_MS / 1000:  # the broker counted before the TTL could pass
        assert count == 1, (f"TTL-03: a message with a TTL of {TTL_MS} ms ({describe(source)}) must still be in "
                            f"the {kind} queue less than {TTL_MS} ms after it was sent; queue.declare-ok counted {count}")
    return client, ch, queue, confirmed


def describe(source: Source) -> str:
    parts = [f"x-message-ttl {source.queue}" if source.queue is not None else "",
             f"expiration {source.message!r}" if source.message is not None else ""]
    return ", ".join(p for p in parts if p)


def past_ttl(confirmed: float, target: Target) -> float:
    """Wait until the TTL plus the tolerance has passed since the confirm: part of the scenario
    (the broker's clock must pass), not a wait for a reply. Returns that moment."""
    due = confirmed + TTL_MS / 1000 + target.timeout(TOLERANCE)
    time.sleep(max(due - time.monotonic(), 0))
    return due


@PAST_TTL
@pytest.mark.rules("TTL-03")
@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("kind", KINDS)
def test_an_expired_message_stops_being_counted(connect: Connect, names: Names, target: Target, kind: str,
                                                source: str) -> None:
    client, ch, queue, confirmed = published(connect, names, target, kind, SOURCES[source])
    deadline = confirmed + TTL_MS / 1000 + target.timeout(TOLERANCE)
    while (count := ready(client, ch, queue)) and time.monotonic() < deadline:
        time.sleep(0.02)
    late = time.monotonic() - confirmed - TTL_MS / 1000
    assert count == 0, (f"TTL-03: a message whose TTL ({describe(SOURCES[source])}: {TTL_MS} ms) has passed is "
                        f"removed from the head of the {kind} queue; it was still counted {late * 1000:.0f} ms past "
                        f"its TTL (tolerance {target.timeout(TOLERANCE) * 1000:.0f} ms)")


@PAST_TTL
@pytest.mark.rules("TTL-03")
@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("kind", KINDS)
def test_basic_get_never_returns_an_expired_message(connect: Connect, names: Names, target: Target, kind: str,
                                                    source: str) -> None:
    client, ch, queue, confirmed = published(connect, names, target, kind, SOURCES[source])
    past_ttl(confirmed, target)
    got = get(client, ch, queue, no_ack=True)
    assert got is None, (f"TTL-03: basic.get returned a message {target.timeout(TOLERANCE) * 1000:.0f} ms past its "
                         f"TTL ({describe(SOURCES[source])}: {TTL_MS} ms) on a {kind} queue: {got}")


@PAST_TTL_THEN_QUIET
@pytest.mark.rules("TTL-03")
@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("kind", KINDS)
def test_a_consumer_never_gets_an_expired_message(connect: Connect, names: Names, target: Target, kind: str,
                                                  source: str) -> None:
    client, ch, queue, confirmed = published(connect, names, target, kind, SOURCES[source])
    past_ttl(confirmed, target)
    consume(client, ch, queue, no_ack=True)
    assert_quiet(client, ch, target.timeout(QUIET), f"delivery of a message {target.timeout(TOLERANCE) * 1000:.0f} ms past "
                 f"its TTL ({describe(SOURCES[source])}: {TTL_MS} ms) on a {kind} queue (TTL-03)")


@PAST_TTL_THEN_QUIET
@pytest.mark.rules("TTL-03")
@pytest.mark.parametrize("kind", KINDS)
def test_an_expired_message_behind_a_live_one_is_not_delivered(connect: Connect, names: Names, target: Target,
                                                               kind: str) -> None:
    """m1 (TTL LONG_MS) then m2 (TTL_MS): once m2's TTL passed, a consumer gets m1 only; m2, at the head
    after m1 left, goes as expired."""
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    queue = declare(client, ch, names.queue(kind), kind)
    publisher = Publisher(client)
    publisher.publish(queue, [b"m1"], BasicProperties(expiration=str(LONG_MS)))
    publisher.publish(queue, [b"m2"], BasicProperties(expiration=str(TTL_MS)))
    past_ttl(time.monotonic(), target)
    consume(client, ch, queue, no_ack=True)
    assert take_one_now(client, ch).body == b"m1"
    assert_quiet(client, ch, target.timeout(QUIET), f"delivery of m2, {TTL_MS} ms TTL passed while it waited behind m1 "
                 f"in a {kind} queue (TTL-03)")


@pytest.mark.long_wait(1.5)  # held past the TTL before the commit
@pytest.mark.rules("TTL-03")
@pytest.mark.parametrize("kind", KINDS)
def test_the_ttl_of_a_transactional_publish_counts_from_its_commit(connect: Connect, names: Names, target: Target,
                                                                   kind: str) -> None:
    """Published in a transaction, the message is enqueued at tx.commit: held longer than its TTL
    before the commit, it is still there right after it (counted, and fetched)."""
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    queue = declare(client, ch, names.queue(kind), kind, {"x-message-ttl": 1000})
    tx = client.channel()
    client.rpc(tx, TxSelect(), TxSelectOk)
    client.send(tx, BasicPublish(exchange="", routing_key=queue), BasicProperties(), b"m")
    time.sleep(1.2)  # longer than the TTL, before the commit: part of the scenario
    committed = time.monotonic()
    client.rpc(tx, TxCommit(), TxCommitOk)
    got = get(client, ch, queue, no_ack=True)
    if time.monotonic() - committed < 1.0:  # fetched before the TTL could pass since the commit
        assert got is not None and got.body == b"m", (
            f"TTL-03: a message's TTL counts from its enqueue, at tx.commit for a transactional publish; the "
            f"{kind} queue had nothing for basic.get right after the commit (the publish was sent 1.2 s before "
            "it, with x-message-ttl 1000)")


@PAST_TTL_THEN_QUIET
@pytest.mark.rules("TTL-04")
@pytest.mark.parametrize("kind", KINDS)
def test_an_unacked_message_does_not_expire_and_goes_when_returned_past_its_ttl(
        connect: Connect, names: Names, target: Target, kind: str) -> None:
    """Delivered and unacked past its TTL, the message is still acknowledgeable: only ready messages
    expire. Rejected with requeue after that, it keeps the deadline of its enqueue and is gone."""
    client, ch, queue, confirmed = published(connect, names, target, kind, SOURCES["message"])
    consume(client, ch, queue)
    first = take_one_now(client, ch)
    past_ttl(confirmed, target)
    client.send(ch, BasicReject(delivery_tag=first.tag, requeue=True))
    again = client.poll(ch, BasicDeliver, duration=target.timeout(QUIET))
    assert again is None, (f"TTL-04: a message returned to the {kind} queue after its TTL ({TTL_MS} ms) had passed is "
                           f"dropped at once, not delivered again: {again}")
    assert ready(client, ch, queue) == 0, f"TTL-04: the returned, expired message is still counted in the {kind} queue"


@PAST_TTL
@pytest.mark.rules("TTL-04")
@pytest.mark.parametrize("kind", KINDS)
def test_an_unacked_message_past_its_ttl_can_still_be_acked(connect: Connect, names: Names, target: Target,
                                                           kind: str) -> None:
    client, ch, queue, confirmed = published(connect, names, target, kind, SOURCES["queue"])
    consume(client, ch, queue)
    first = take_one_now(client, ch)
    past_ttl(confirmed, target)
    client.send(ch, BasicAck(delivery_tag=first.tag))
    assert ready(client, ch, queue) == 0  # a round trip: the ack was taken, the channel is open


@pytest.mark.rules("TTL-05")
@pytest.mark.parametrize("where", ["message", "queue"])
def test_ttl_zero_is_gone_at_once_without_a_consumer(connect: Connect, names: Names, target: Target,
                                                     where: str) -> None:
    """A classic queue (quorum queues stamp TTL 0 as enqueue + 1 ms: not pinned)."""
    client = connect()
    ch = client.channel()
    source = Source(0, None) if where == "queue" else Source(None, "0")
    queue = declare(client, ch, names.queue("q"), CLASSIC, source.arguments())
    Publisher(client).publish(queue, [b"m"], source.properties())
    count = ready(client, ch, queue)
    assert count == 0, (f"TTL-05: a message with TTL 0 ({describe(source)}) that no consumer took as it arrived is "
                        f"gone at once; queue.declare-ok after its confirm counted {count}")
    assert get(client, ch, queue, no_ack=True) is None, "TTL-05: basic.get returned the TTL-0 message"


@pytest.mark.rules("TTL-05")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["message", "queue"])
def test_ttl_zero_reaches_a_consumer_ready_for_it(connect: Connect, names: Names, target: Target, kind: str,
                                                  where: str) -> None:
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    source = Source(0, None) if where == "queue" else Source(None, "0")
    queue = declare(client, ch, names.queue(kind), kind, source.arguments())
    consume(client, ch, queue, no_ack=True)
    client.send(ch, BasicPublish(exchange="", routing_key=queue), source.properties(), b"m")
    got = take_one_now(client, ch)
    assert got.body == b"m", f"TTL-05: a consumer ready as the TTL-0 message ({describe(source)}) arrives gets it"
