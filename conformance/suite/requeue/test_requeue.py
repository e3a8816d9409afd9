"""Requeue position, the redelivered flag and delivery counts: RQ-01..07 and S001-04.

Rules:
- Positions are read with basic.get on the channel that returned the messages: a get queues
  behind that channel's earlier reject/nack in the queue (a passive queue.declare does not on
  RabbitMQ, whose classic queues answer it with priority), so the order seen is the queue's.
- Redeliveries after a channel or connection goes are awaited on an observer consumer of
  another connection: event-driven, bounded by the client timeout, never polled with sleeps.
- Delivery-limit loops are bounded by a fixed number of returns (RQ-06: a basic.nack loop never
  dead-letters on 4.3); the limits under test are small (0 or 1) except for the default (20).
- Version differences come from the profile: RQ-04/05/06 assert the variant that applies.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from codec import BasicAck, BasicNack, BasicQos, BasicQosOk, BasicRecover, BasicRecoverOk, BasicReject
from conformance.drivers.raw import ChannelClosed
from conformance.plugin.session import Names, Target
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.queues import (
    CLASSIC,
    QUORUM,
    RETURN_S,
    Connect,
    Delivery,
    Publisher,
    assert_quiet,
    assert_redelivered,
    await_ready,
    bodies,
    consume,
    declare,
    filled,
    get,
    get_all,
    messages,
    ready,
    require_kind,
    require_nack,
    settle,
    take_now,
    take_one_now,
    with_dead_letter_queue,
)
from conformance.suite.steps.timeouts import exact


# -- RQ-01, RQ-02: where a returned message goes ---------------------------------------------
@pytest.mark.rules("RQ-01")
@pytest.mark.clauses("RQ-01.a", "RQ-01.b")
@pytest.mark.parametrize("how", ["reject-reversed", "channel-close"])
def test_classic_requeue_restores_the_original_position(connect: Connect, names: Names, target: Target,
                                                        how: str) -> None:
    client, ch, queue = filled(connect, names, 3)
    assert bodies(get_all(client, ch, queue, limit=2)) == [b"m1", b"m2"]
    if how == "reject-reversed":  # returned in the opposite order, m2 first
        client.send(ch, BasicReject(delivery_tag=2, requeue=True))
        client.send(ch, BasicReject(delivery_tag=1, requeue=True))
        reader = ch
    else:
        client.close_channel(ch)
        reader = client.channel()
        await_ready(client, reader, queue, 3, target.timeout(RETURN_S))  # m1, m2 back with the channel (RQ-03)
    Publisher(client).publish(queue, [b"m4"])
    again = get_all(client, reader, queue)
    flags = {d.body: d.redelivered for d in again}
    assert flags == {b"m1": True, b"m2": True, b"m3": False, b"m4": False}, "the redelivered flag of each message"
    if target.profile.expect("RQ-01") == "required":
        assert bodies(again) == [b"m1", b"m2", b"m3", b"m4"]


def returns_go_first(target: Target, limit: int | None) -> bool:
    """RQ-02 as observed: 3.10.8 (rabbit_fifo handle_aux) turns a consumer's reject/nack
    requeue into a re-enqueue at the BACK of the queue when no delivery limit is set; with a
    limit (and on 4.x, whose default limit is 20) returns go to the returns FIFO, served first."""
    return limit is not None or target.profile.at_least("4.0")


def quorum_arguments(limit: int | None) -> dict[str, object]:
    return {} if limit is None else {"x-delivery-limit": limit}


@pytest.mark.rules("RQ-02")
@pytest.mark.clauses("RQ-02.a", "RQ-02.b", "RQ-02.f")
@pytest.mark.parametrize("limit", [None, 10], ids=["default-limit", "x-delivery-limit"])
def test_quorum_returns_come_first_in_return_order(connect: Connect, names: Names, target: Target,
                                                   limit: int | None) -> None:
    client, ch, queue = filled(connect, names, 4, QUORUM, quorum_arguments(limit))
    assert [d.tag for d in get_all(client, ch, queue, limit=3)] == [1, 2, 3]
    client.send(ch, BasicReject(delivery_tag=3, requeue=True))
    client.send(ch, BasicReject(delivery_tag=1, requeue=True))
    again = get_all(client, ch, queue)
    if returns_go_first(target, limit):
        assert bodies(again) == [b"m3", b"m1", b"m4"]  # returns FIFO first, then the main queue
    else:
        assert bodies(again) == [b"m4", b"m3", b"m1"]  # re-enqueued behind m4
    assert {d.body: d.redelivered for d in again} == {b"m1": True, b"m3": True, b"m4": False}


@pytest.mark.rules("RQ-02")
@pytest.mark.clauses("RQ-02.a", "RQ-02.f")
@pytest.mark.parametrize("limit", [None, 10], ids=["default-limit", "x-delivery-limit"])
def test_quorum_nack_multiple_returns_in_delivery_order(connect: Connect, names: Names, target: Target,
                                                        limit: int | None) -> None:
    client, ch, queue = filled(connect, names, 4, QUORUM, quorum_arguments(limit))
    client.rpc(ch, BasicQos(prefetch_count=4), BasicQosOk)
    consume(client, ch, queue)
    assert bodies(take_now(client, ch, 4)) == messages(4)
    Publisher(client).publish(queue, [b"m5"])  # ready, held back by the prefetch limit
    client.send(ch, BasicNack(delivery_tag=3, multiple=True, requeue=True))
    again = take_now(client, ch, 3)  # capacity 3 while m4 stays unacked
    client.send(ch, BasicAck(delivery_tag=4))
    again.append(take_one_now(client, ch))
    if returns_go_first(target, limit):
        assert bodies(again) == [b"m1", b"m2", b"m3", b"m5"]
    else:
        assert bodies(again) == [b"m5", b"m1", b"m2", b"m3"]
    assert {d.body: d.redelivered for d in again} == {b"m1": True, b"m2": True, b"m3": True, b"m5": False}


@pytest.mark.rules("RQ-02", "RQ-03")
@pytest.mark.clauses("RQ-02.b", "RQ-02.c", "RQ-03.a")
def test_quorum_channel_close_returns_come_first(connect: Connect, names: Names, target: Target) -> None:
    require_kind(target.profile, QUORUM)
    client, watcher, queue = filled(connect, names, 4, QUORUM)
    first, second = client.channel(), client.channel()
    assert get(client, first, queue) is not None  # m1
    assert get(client, second, queue) is not None  # m2
    assert get(client, first, queue) is not None  # m3
    client.close_channel(second)
    await_ready(client, watcher, queue, 2, target.timeout(RETURN_S))  # m2 returned, next to m4
    client.close_channel(first)
    await_ready(client, watcher, queue, 4, target.timeout(RETURN_S))  # m1 and m3 returned
    again = get_all(client, client.channel(), queue)
    assert bodies(again) == [b"m2", b"m1", b"m3", b"m4"]  # in return order, ahead of m4
    assert [d.redelivered for d in again] == [True, True, True, False]


# -- RQ-03: requeue when the channel or connection goes ---------------------------------------
@pytest.mark.rules("RQ-03")
@pytest.mark.clauses("RQ-03.a", "RQ-03.b", "RQ-03.c", "RQ-03.d", "RQ-03.e")
@pytest.mark.parametrize("kind", [CLASSIC, QUORUM])
@pytest.mark.parametrize("how", ["channel.close", "connection.close", "tcp-close", "channel-error"])
def test_unacked_deliveries_are_requeued_when_their_channel_goes(connect: Connect, names: Names,
                                                                 target: Target, kind: str,
                                                                 how: str) -> None:
    require_kind(target.profile, kind)
    victim, ch, queue = filled(connect, names, 2, kind)
    consume(victim, ch, queue)
    assert not any(d.redelivered for d in take_now(victim, ch, 2))
    observer = connect()
    och = observer.channel()
    consume(observer, och, queue)  # nothing ready yet: it waits for the requeued messages
    if how == "channel.close":
        victim.close_channel(ch)
    elif how == "connection.close":
        victim.close()
    elif how == "tcp-close":
        assert victim.sock is not None
        victim.sock.shutdown(socket.SHUT_RDWR)
        victim.sock.close()
        victim.sock = None
    else:
        victim.send(ch, BasicAck(delivery_tag=99))
        with pytest.raises(ChannelClosed):
            ready(victim, ch, queue)
    assert_redelivered(take_now(observer, och, 2), [b"m1", b"m2"], in_order=False)


@pytest.mark.rules("RQ-03")
@pytest.mark.clauses("RQ-03.f")
def test_no_ack_deliveries_are_lost_when_the_channel_goes(connect: Connect, names: Names,
                                                          target: Target) -> None:
    client, ch, queue = filled(connect, names, 2)
    consume(client, ch, queue, no_ack=True)
    take_now(client, ch, 2)
    client.close_channel(ch)
    och = client.channel()
    consume(client, och, queue)
    assert_quiet(client, och, target.timeout(0.3), "redelivery of a no-ack delivery")
    assert ready(client, och, queue) == 0


# -- RQ-04: the redelivered flag -------------------------------------------------------------
@pytest.mark.rules("RQ-04")
@pytest.mark.clauses("RQ-04.a", "RQ-04.b", "RQ-04.c")
@pytest.mark.parametrize("kind", [CLASSIC, QUORUM])
@pytest.mark.parametrize("how", ["reject", "nack", "channel.close"])
def test_redelivered_is_false_first_and_true_after_a_return(connect: Connect, names: Names, target: Target,
                                                            kind: str, how: str) -> None:
    require_kind(target.profile, kind)
    if how == "nack":
        require_nack(target.profile)
    client, ch, queue = filled(connect, names, 1, kind)
    consume(client, ch, queue)
    first = take_one_now(client, ch)
    assert not first.redelivered
    if how == "channel.close":
        client.close_channel(ch)
        ch = client.channel()
        consume(client, ch, queue)
    else:  # 4.3 quorum: a nack leaves delivery_count at 0, but acquired_count > 0 decides
        client.send(ch, settle(how, first.tag, requeue=True))
    assert_redelivered(take_one_now(client, ch), b"m1")


# -- RQ-05: x-delivery-count / x-acquired-count ------------------------------------------------
def header_counts(deliveries: list[Delivery]) -> tuple[list[object], list[object]]:
    return ([d.headers.get("x-delivery-count") for d in deliveries],
            [d.headers.get("x-acquired-count") for d in deliveries])


@pytest.mark.rules("RQ-05")
@pytest.mark.clauses("RQ-05.a", "RQ-05.b", "RQ-05.c", "RQ-05.d")
def test_quorum_delivery_count_headers_on_consumer_redeliveries(connect: Connect, names: Names,
                                                                target: Target) -> None:
    client, ch, queue = filled(connect, names, 1, QUORUM)
    consume(client, ch, queue)
    seen = [take_one_now(client, ch)]
    client.send(ch, settle("reject", seen[-1].tag, requeue=True))
    seen.append(take_one_now(client, ch))
    client.send(ch, settle("nack", seen[-1].tag, requeue=True))
    seen.append(take_one_now(client, ch))
    client.close_channel(ch)
    ch = client.channel()
    consume(client, ch, queue)
    seen.append(take_one_now(client, ch))
    counts, acquired = header_counts(seen)
    if target.profile.at_least("4.3"):  # failed attempts only: reject and channel close count
        assert counts == [None, 1, 1, 2]
        assert acquired[0] in (None, 0) and acquired[1:] == [1, 2, 3]
    else:  # every return counts (4.0: acquired count; 3.x: delivery count)
        assert counts == [None, 1, 2, 3]
        assert acquired == [None] * 4


@pytest.mark.rules("RQ-05")
@pytest.mark.clauses("RQ-05.a", "RQ-05.d", "RQ-05.e")
def test_quorum_delivery_count_header_on_basic_get(connect: Connect, names: Names, target: Target) -> None:
    client, ch, queue = filled(connect, names, 1, QUORUM)
    first = get(client, ch, queue)
    assert first is not None
    client.send(ch, settle("reject", first.tag, requeue=True))
    second = get(client, ch, queue)
    assert second is not None and second.body == b"m1"
    counts, acquired = header_counts([first, second])
    if target.profile.at_least("3.12"):
        assert counts == [None, 1]
    else:  # 3.10/3.11: basic.get adds x-delivery-count = 0 on the first fetch
        assert counts == [0, 1]
    if target.profile.at_least("4.3"):
        assert acquired[0] in (None, 0) and acquired[1] == 1
    else:
        assert acquired == [None, None]


# -- RQ-06: the quorum delivery limit ----------------------------------------------------------
class Bouncer:
    """A consumer on a quorum queue with a dead-letter queue watched on a second channel."""

    def __init__(self, connect: Connect, names: Names, target: Target, limit: int | None,
                 prepare: Callable[[str], None] | None = None) -> None:
        """`prepare(queue)` runs before the queue is declared (a policy for its name)."""
        require_kind(target.profile, QUORUM)
        self.client = client = connect()
        self.target = target
        self.ch, self.dch = client.channel(), client.channel()
        arguments, dlq = with_dead_letter_queue(client, self.ch, names)
        if limit is not None:
            arguments["x-delivery-limit"] = limit
        name = names.queue(QUORUM)
        if prepare is not None:
            prepare(name)
        self.queue = declare(client, self.ch, name, QUORUM, arguments)
        Publisher(client).publish(self.queue, [b"m1"])
        consume(client, self.dch, dlq)
        consume(client, self.ch, self.queue)
        self.current = take_one_now(client, self.ch)

    def bounce(self, how: str) -> None:
        """Return the current delivery and expect it back on the queue's consumer."""
        self.client.send(self.ch, settle(how, self.current.tag, requeue=True))
        self.current = take_one_now(self.client, self.ch)
        assert self.current.body == b"m1" and self.current.redelivered

    def bounce_out(self, how: str) -> None:
        """Return the current delivery and expect it dead-lettered for its delivery limit."""
        self.client.send(self.ch, settle(how, self.current.tag, requeue=True))
        self.assert_dead_lettered()

    def assert_dead_lettered(self) -> None:
        dead = take_one_now(self.client, self.dch)
        assert dead.body == b"m1"
        assert dead.headers["x-death"][0]["reason"] == "delivery_limit"
        assert_quiet(self.client, self.ch, self.target.timeout(0.2), "redelivery past the limit")


@pytest.mark.rules("RQ-06")
@pytest.mark.clauses("RQ-06.a", "RQ-06.d", "RQ-06.g")
def test_quorum_default_delivery_limit(connect: Connect, names: Names, target: Target) -> None:
    bouncer = Bouncer(connect, names, target, None)
    for _ in range(20):  # 20 failed returns stay within the limit on every version
        bouncer.bounce("reject")
    if target.profile.at_least("4.0"):  # default 20: the 21st return exceeds it
        bouncer.bounce_out("reject")
    else:  # 3.x: no default limit
        bouncer.bounce("reject")
        assert_quiet(bouncer.client, bouncer.dch, target.timeout(0.2), "dead-lettering without a limit")


@pytest.mark.rules("RQ-06", "ACK-07")
@pytest.mark.clauses("ACK-07.g", "RQ-06.b", "RQ-06.d", "RQ-06.g")
def test_quorum_reject_requeue_counts_toward_the_limit(connect: Connect, names: Names,
                                                       target: Target) -> None:
    bouncer = Bouncer(connect, names, target, 1)
    bouncer.bounce("reject")  # delivery count 1: not over the limit
    bouncer.bounce_out("reject")  # 2 > 1


@pytest.mark.rules("RQ-06", "ACK-07")
@pytest.mark.clauses("ACK-07.g", "RQ-06.f")
def test_quorum_nack_requeue_counts_only_before_4_3(connect: Connect, names: Names, target: Target) -> None:
    bouncer = Bouncer(connect, names, target, 1)
    if target.profile.at_least("4.3"):  # nack requeue leaves delivery_count unchanged
        for _ in range(3):
            bouncer.bounce("nack")
        bouncer.bounce("reject")
        bouncer.bounce_out("reject")
    else:  # every return counts
        bouncer.bounce("nack")
        bouncer.bounce_out("nack")


@pytest.mark.rules("RQ-06")
@pytest.mark.clauses("RQ-06.h", "RQ-06.g")
def test_quorum_delivery_limit_from_a_policy(connect: Connect, names: Names, target: Target,
                                            admin: RestoringAdmin) -> None:
    def limit_policy(queue: str) -> None:
        admin.put_policy(target.vhost, f"{queue}.limit", exact(queue), {"delivery-limit": 1}, "queues", 100)

    bouncer = Bouncer(connect, names, target, None, limit_policy)
    bouncer.bounce("reject")  # delivery count 1: within the policy's limit of 1
    try:
        bouncer.bounce_out("reject")  # 2 > 1
    except AssertionError as exc:
        raise AssertionError(f"RQ-06: a policy's delivery-limit (1) limits a quorum queue like x-delivery-limit: "
                             f"the second basic.reject requeue=true must dead-letter the message with reason "
                             f"delivery_limit; {exc}") from None


@pytest.mark.rules("RQ-02")
@pytest.mark.clauses("RQ-02.b", "RQ-02.d")
def test_quorum_recover_returns_go_to_the_returns_fifo(connect: Connect, names: Names, target: Target) -> None:
    """m2 returned by a reject, then m1 and m3 by basic.recover: the returns come back in the order
    they were returned (m2, m1, m3) ahead of m4, not at their original positions. A delivery limit
    is set, so 3.10.8 (back of the queue without one, RQ-02) keeps its returns FIFO too."""
    require_kind(target.profile, QUORUM)
    client, ch, queue = filled(connect, names, 4, QUORUM, quorum_arguments(10))
    assert [d.tag for d in get_all(client, ch, queue, limit=3)] == [1, 2, 3]
    client.send(ch, BasicReject(delivery_tag=2, requeue=True))
    client.rpc(ch, BasicRecover(requeue=True), BasicRecoverOk)
    again = get_all(client, ch, queue)
    assert bodies(again) == [b"m2", b"m1", b"m3", b"m4"], (
        f"RQ-02: on a quorum queue messages returned by basic.reject and then basic.recover go to the returns "
        f"FIFO, served first in return order: want m2, m1, m3, then m4; the queue gave "
        f"{[b.decode() for b in bodies(again)]}")
    assert [d.redelivered for d in again] == [True, True, True, False]


@pytest.mark.rules("RQ-06")
@pytest.mark.clauses("RQ-06.c")
def test_quorum_delivery_limit_minus_1(connect: Connect, names: Names, target: Target) -> None:
    bouncer = Bouncer(connect, names, target, -1)
    if target.profile.at_least("4.0"):  # -1 disables the limit
        for _ in range(21):
            bouncer.bounce("reject")
        assert_quiet(bouncer.client, bouncer.dch, target.timeout(0.2), "dead-lettering with the limit off")
    else:  # 3.10.8, observed: -1 is not special; the first return (count 1 > -1) exceeds it
        bouncer.bounce_out("reject")


@pytest.mark.rules("RQ-06")
@pytest.mark.clauses("RQ-06.e", "RQ-06.g")
def test_quorum_channel_close_counts_toward_the_limit(connect: Connect, names: Names,
                                                      target: Target) -> None:
    bouncer = Bouncer(connect, names, target, 0)
    bouncer.client.close_channel(bouncer.ch)  # a failed attempt: 1 > 0
    dead = take_one_now(bouncer.client, bouncer.dch)
    assert dead.body == b"m1" and dead.headers["x-death"][0]["reason"] == "delivery_limit"
    ch = bouncer.client.channel()
    assert get(bouncer.client, ch, bouncer.queue) is None


# -- RQ-07: classic queues have no delivery limit ----------------------------------------------
@pytest.mark.rules("RQ-07")
@pytest.mark.clauses("RQ-07.a", "RQ-07.b")
def test_classic_queue_has_no_delivery_limit(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch, dch = client.channel(), client.channel()
    arguments, dlq = with_dead_letter_queue(client, ch, names)
    queue = declare(client, ch, names.queue(), CLASSIC, arguments)
    Publisher(client).publish(queue, [b"m1"])
    consume(client, dch, dlq)
    consume(client, ch, queue)
    seen = [take_one_now(client, ch)]
    for _ in range(22):  # beyond the quorum default of 20
        client.send(ch, BasicReject(delivery_tag=seen[-1].tag, requeue=True))
        seen.append(take_one_now(client, ch))
    assert all(d.body == b"m1" for d in seen) and all(d.redelivered for d in seen[1:])
    assert_quiet(client, dch, target.timeout(0.2), "dead-lettering of a classic-queue message")
    if not target.profile.at_least("3.12"):  # 3.10.8: classic queues add no x-delivery-count
        assert all("x-delivery-count" not in d.headers for d in seen)


# -- S001-04: a requeued message is ready at once --------------------------------------------------
@pytest.mark.rules("S001-04")
@pytest.mark.clauses("S001-04.a")
@pytest.mark.parametrize("kind", [CLASSIC, QUORUM])
def test_requeued_message_is_redelivered_at_once(connect: Connect, names: Names, target: Target,
                                                 kind: str) -> None:
    require_kind(target.profile, kind)
    client, ch, queue = filled(connect, names, 1, kind)
    client.rpc(ch, BasicQos(prefetch_count=1), BasicQosOk)
    consume(client, ch, queue)
    first = take_one_now(client, ch)
    client.send(ch, BasicReject(delivery_tag=first.tag, requeue=True))
    # no other action: the requeue itself makes m1 ready and frees the consumer's slot
    again = take_one_now(client, ch)
    assert (again.body, again.redelivered) == (b"m1", True), "the requeued message's body and redelivered flag"
