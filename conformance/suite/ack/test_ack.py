"""Acknowledgements over the wire, the delivery tags: ACK-01..06 and ACK-08 (the tags, unknown
and double acks, multiple and tag 0, settling in a transaction). ACK-07, ACK-09, ACK-10 and the
seed sentences S001-01..03: test_ack_settle.py.

Rules:
- Errors are compared by scope, reply code and class/method id; the reply text is asserted
  only where the rule is about it (ACK-03's "PRECONDITION_FAILED - unknown delivery tag <N>",
  on the RabbitMQ profiles; a plain AMQP 0-9-1 broker's text is not checked).
- Whether a delivery was settled is observed through the queue: a delivery still unacked when
  its channel closes is requeued (RQ-03), so the ready count after the close tells settled
  (gone) from outstanding (back). basic.ack/nack/reject have no reply, so a round trip after
  them (a passive queue.declare) surfaces the channel.close they provoke.
- basic.nack is a RabbitMQ extension: on the amqp-0-9-1 profile those cases are `not-applicable`.
"""

from __future__ import annotations

from typing import Any

import pytest

from codec import (
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicGet,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicReject,
    ConfirmSelect,
    ConfirmSelectOk,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    TxSelect,
    TxSelectOk,
)
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.queues import (
    RETURN_S,
    Connect,
    Publisher,
    assert_ready_elsewhere,
    assert_redelivered,
    bodies,
    consume,
    declare,
    filled,
    get,
    get_all,
    messages,
    prompt,
    ready,
    require,
    require_nack,
    settle,
    tag_of,
    take,
    take_one,
)
from conformance.suite.steps.replies import assert_unknown_tag

REPLY_TO = "amq.rabbitmq.reply-to"


def closed_on(client: RawClient, ch: int, queue: str) -> ChannelClosed:
    """The channel.close that earlier methods on `ch` provoked, surfaced by a round trip. The
    channel raises an unknown tag while it handles the settle (RabbitMQ: `rabbit_channel`'s
    precondition_failed, no queue involved), so the close is owed at once (`prompt`)."""
    with pytest.raises(ChannelClosed) as info:
        ready(client, ch, queue, timeout=prompt(client))
    return info.value


# -- ACK-01, ACK-02: the tags ------------------------------------------------------------------
@pytest.mark.rules("ACK-01")
@pytest.mark.clauses("ACK-01.a", "ACK-01.b", "ACK-01.c", "ACK-01.d")
def test_tags_count_per_channel_from_1_across_get_and_consumers(connect: Connect, names: Names,
                                                                 target: Target) -> None:
    client = connect()
    ch, other = client.channel(), client.channel()
    q1, q2, q3 = (declare(client, ch, names.queue(label)) for label in ("a", "b", "c"))
    publisher = Publisher(client)
    publisher.publish(q1, messages(3))
    publisher.publish(q2, messages(3))
    publisher.publish(q3, messages(1))
    other_tags = [tag_of(get(client, other, q2))]
    tags = [tag_of(get(client, ch, q1)), tag_of(get(client, ch, q1, no_ack=True))]
    consume(client, ch, q1)  # manual ack, one message left
    tags += [d.tag for d in take(client, ch, 1)]
    consume(client, ch, q2, no_ack=True)  # a second consumer, no-ack: two messages left
    tags += [d.tag for d in take(client, ch, 2)]
    other_tags.append(tag_of(get(client, other, q3)))
    if target.profile.expect("ACK-01") == "required":
        assert tags == [1, 2, 3, 4, 5]
        assert other_tags == [1, 2]
    else:
        for seq in (tags, other_tags):
            assert all(t > 0 for t in seq) and seq == sorted(set(seq)), seq


@pytest.mark.rules("ACK-01")
@pytest.mark.clauses("ACK-01.e")
def test_a_direct_reply_to_delivery_takes_the_current_tag_without_counting(connect: Connect, names: Names,
                                                                          target: Target) -> None:
    require(target.profile, "direct_reply_to", "direct reply-to")
    client, ch, queue = filled(connect, names, 2)
    client.rpc(ch, BasicConsume(queue=REPLY_TO, consumer_tag="replies", no_ack=True), BasicConsumeOk)
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)  # the request is queued before the responder's get
    requests = declare(client, ch, names.queue("requests"))
    client.send(ch, BasicPublish(exchange="", routing_key=requests), BasicProperties(reply_to=REPLY_TO), b"request")
    client.expect(ch, BasicAck, timeout=target.timeout(RETURN_S))
    assert tag_of(get(client, ch, queue)) == 1
    responder = connect()
    rch = responder.channel()
    request: Any = responder.rpc(rch, BasicGet(queue=requests, no_ack=True), BasicGetOk, timeout=target.timeout(5))
    responder.send(rch, BasicPublish(exchange="", routing_key=request.properties.reply_to or ""),
                   BasicProperties(), b"reply")
    reply = take_one(client, ch, target.timeout(RETURN_S))
    after = tag_of(get(client, ch, queue))
    if _reply_to_counts(target):
        assert (reply.tag, after) == (2, 3), (
            f"ACK-01: from RabbitMQ 4.2 a direct reply-to delivery takes the channel's next tag like any delivery: "
            f"after basic.get-ok with tag 1, the reply should carry tag 2 and the next basic.get-ok tag 3; the "
            f"broker sent the reply with tag {reply.tag} and the next basic.get-ok with tag {after}")
    else:
        assert (reply.tag, after) == (2, 2), (
            f"ACK-01: up to RabbitMQ 4.1 a direct reply-to delivery is stamped with the channel's current counter "
            f"without incrementing it: after basic.get-ok with tag 1, the reply should carry tag 2 and the next "
            f"basic.get-ok tag 2 again; the broker sent the reply with tag {reply.tag} and the next basic.get-ok "
            f"with tag {after}")


def _reply_to_counts(target: Target) -> bool:
    """Whether direct reply-to deliveries use up a tag: RabbitMQ 4.2+ (replies go through a volatile
    queue, rabbit_volatile_queue), judged by the reported version, else by the profile."""
    version = target.profile.version or ""
    numbers = [int(part) for part in version.split(".")[:2] if part.isdigit()]
    return tuple(numbers) >= (4, 2) if len(numbers) == 2 else target.profile.at_least("4.3")


@pytest.mark.rules("ACK-02")
@pytest.mark.clauses("ACK-02.a")
@pytest.mark.parametrize("tag", [2**32 + 1, 2**63 - 1], ids=["2^32+1", "2^63-1"])
def test_tags_are_64_bit_without_wrap_or_truncation(connect: Connect, names: Names, target: Target,
                                                    tag: int) -> None:
    client, ch, queue = filled(connect, names, 1)
    assert tag_of(get(client, ch, queue)) == 1
    client.send(ch, BasicAck(delivery_tag=tag))  # a 32-bit truncation of 2^32+1 would ack tag 1
    assert_unknown_tag(closed_on(client, ch, queue), tag, "ack", target, "ACK-02")
    assert_ready_elsewhere(connect, {queue: 1}, target.timeout(RETURN_S))  # tag 1 was not acked: requeued


# -- ACK-03, ACK-04: unknown and double acks -------------------------------------------------
@pytest.mark.rules("ACK-03")
@pytest.mark.clauses("ACK-03.a", "ACK-03.b", "ACK-03.c", "ACK-03.d", "ACK-03.e")
@pytest.mark.parametrize("kind", ["ack", "reject", "nack"])
@pytest.mark.parametrize("case", ["never-issued", "already-settled", "other-channel"])
def test_unknown_tag_closes_the_channel_406(connect: Connect, names: Names, target: Target, kind: str,
                                            case: str) -> None:
    if kind == "nack":
        require_nack(target.profile)
    client, ch, queue = filled(connect, names, 1)
    bad = 5
    if case == "already-settled":
        bad = tag_of(get(client, ch, queue))
        client.send(ch, BasicAck(delivery_tag=bad))
    elif case == "other-channel":
        owner = client.channel()
        bad = tag_of(get(client, owner, queue))
    client.send(ch, settle(kind, bad))
    assert_unknown_tag(closed_on(client, ch, queue), bad, kind, target, "ACK-03")
    if case == "other-channel":  # the owning channel is untouched and still holds the delivery
        client.send(owner, BasicAck(delivery_tag=bad))
        assert ready(client, owner, queue) == 0


@pytest.mark.rules("ACK-03", "RQ-03")
@pytest.mark.clauses("ACK-03.a", "ACK-03.f", "RQ-03.d", "RQ-03.e")
def test_unknown_tag_requeues_the_channels_deliveries(connect: Connect, names: Names, target: Target) -> None:
    client, ch, queue = filled(connect, names, 2)
    assert [d.tag for d in get_all(client, ch, queue)] == [1, 2]
    client.send(ch, BasicAck(delivery_tag=9))
    assert_unknown_tag(closed_on(client, ch, queue), 9, "ack", target, "ACK-03")
    assert_ready_elsewhere(connect, {queue: 2}, target.timeout(RETURN_S))  # back once the channel is gone
    assert_redelivered(get_all(client, client.channel(), queue), [b"m1", b"m2"])


@pytest.mark.rules("ACK-04")
@pytest.mark.clauses("ACK-04.a", "ACK-04.b")
@pytest.mark.parametrize("tx", [False, True], ids=["plain", "tx"])
def test_double_ack_is_an_unknown_tag(connect: Connect, names: Names, target: Target, tx: bool) -> None:
    client, ch, queue = filled(connect, names, 1)
    if tx:
        client.rpc(ch, TxSelect(), TxSelectOk)
    tag = tag_of(get(client, ch, queue))
    client.send(ch, BasicAck(delivery_tag=tag))
    client.send(ch, BasicAck(delivery_tag=tag))
    assert_unknown_tag(closed_on(client, ch, queue), tag, "ack", target, "ACK-04")


# -- ACK-05, ACK-06: multiple and tag 0 ------------------------------------------------------
@pytest.mark.rules("ACK-05")
@pytest.mark.clauses("ACK-05.a")
def test_multiple_settles_every_tag_up_to_n_from_get_and_all_consumers(connect: Connect, names: Names,
                                                                        target: Target) -> None:
    client = connect()
    ch = client.channel()
    q1, q2 = declare(client, ch, names.queue("a")), declare(client, ch, names.queue("b"))
    publisher = Publisher(client)
    publisher.publish(q1, messages(3))
    publisher.publish(q2, messages(2))
    assert tag_of(get(client, ch, q1)) == 1
    consume(client, ch, q1)
    assert [d.tag for d in take(client, ch, 2)] == [2, 3]
    consume(client, ch, q2)
    assert [d.tag for d in take(client, ch, 2)] == [4, 5]
    client.send(ch, BasicAck(delivery_tag=4, multiple=True))
    assert ready(client, ch, q2) == 0  # round trip: the ack was handled without error
    client.close_channel(ch)
    assert_ready_elsewhere(connect, {q1: 0, q2: 1}, target.timeout(RETURN_S))


@pytest.mark.rules("ACK-05")
@pytest.mark.clauses("ACK-05.b", "ACK-05.c", "ACK-05.d")
@pytest.mark.parametrize("case", ["already-settled", "above-highest"])
def test_multiple_needs_n_outstanding_and_settles_nothing_otherwise(connect: Connect, names: Names,
                                                                   target: Target, case: str) -> None:
    client, ch, queue = filled(connect, names, 3)
    assert [d.tag for d in get_all(client, ch, queue)] == [1, 2, 3]
    if case == "already-settled":
        client.send(ch, BasicAck(delivery_tag=2))
        bad, left = 2, 2
    else:
        bad, left = 7, 3
    client.send(ch, BasicAck(delivery_tag=bad, multiple=True))
    assert_unknown_tag(closed_on(client, ch, queue), bad, "ack", target, "ACK-05")
    assert_ready_elsewhere(connect, {queue: left}, target.timeout(RETURN_S))  # tags below N were not settled


@pytest.mark.rules("ACK-05", "ACK-07")
@pytest.mark.clauses("ACK-05.a", "ACK-07.b", "ACK-07.e")
def test_nack_multiple_settles_up_to_n(connect: Connect, names: Names, target: Target) -> None:
    require_nack(target.profile)
    client, ch, queue = filled(connect, names, 3)
    assert len(get_all(client, ch, queue)) == 3
    client.send(ch, BasicNack(delivery_tag=2, multiple=True, requeue=False))
    assert ready(client, ch, queue) == 0, "ACK-07: basic.nack requeue=false discards, it does not requeue"
    client.close_channel(ch)
    try:  # only m3 was outstanding: back with the channel (RQ-03)
        assert_ready_elsewhere(connect, {queue: 1}, target.timeout(RETURN_S))
    except AssertionError as exc:
        raise AssertionError(f"ACK-05: basic.nack multiple=true delivery-tag=2 settles tags 1 and 2, so only m3 "
                             f"comes back with the channel: {exc}") from None
    assert bodies(get_all(client, client.channel(), queue)) == [b"m3"]


@pytest.mark.rules("ACK-06")
@pytest.mark.clauses("ACK-06.a", "ACK-06.b")
def test_tag_0_multiple_acks_everything_outstanding_and_never_fails(connect: Connect, names: Names, target: Target) -> None:
    client, ch, queue = filled(connect, names, 2)
    client.send(ch, BasicAck(delivery_tag=0, multiple=True))  # nothing outstanding yet
    assert ready(client, ch, queue) == 2  # answered: the channel is still open
    q2 = declare(client, ch, names.queue("b"))
    Publisher(client).publish(q2, messages(1))
    consume(client, ch, q2)
    take(client, ch, 1)
    assert len(get_all(client, ch, queue)) == 2
    client.send(ch, BasicAck(delivery_tag=0, multiple=True))
    assert ready(client, ch, queue) == 0
    client.close_channel(ch)
    assert_ready_elsewhere(connect, {queue: 0, q2: 0}, target.timeout(RETURN_S))


@pytest.mark.rules("ACK-06")
@pytest.mark.clauses("ACK-06.c")
def test_tag_0_without_multiple_is_an_unknown_tag(connect: Connect, names: Names, target: Target) -> None:
    if target.profile.expect("ACK-06") != "required":
        not_applicable("delivery-tag 0 with multiple=false is not specified by AMQP 0-9-1")
    client, ch, queue = filled(connect, names, 1)
    assert tag_of(get(client, ch, queue)) == 1  # something is outstanding, still an error
    client.send(ch, BasicAck(delivery_tag=0))
    assert_unknown_tag(closed_on(client, ch, queue), 0, "ack", target, "ACK-06")


# -- ACK-08: transactions --------------------------------------------------------------------
@pytest.mark.rules("ACK-08")
@pytest.mark.clauses("ACK-08.a")
@pytest.mark.parametrize("kind", ["ack", "reject", "nack"])
def test_unknown_tag_in_tx_fails_at_ack_time_not_at_commit(connect: Connect, names: Names,
                                                            target: Target, kind: str) -> None:
    if kind == "nack":
        require_nack(target.profile)
    client, ch, _queue = filled(connect, names, 1)
    client.rpc(ch, TxSelect(), TxSelectOk)
    client.send(ch, settle(kind, 7))
    with pytest.raises(ChannelClosed) as closed:  # owed at once, as in closed_on
        client.rpc(ch, TxCommit(), TxCommitOk, timeout=prompt(client))
    # the failing method is the ack itself (60/80..120), not tx.commit (90/20)
    assert_unknown_tag(closed.value, 7, kind, target, "ACK-08")


@pytest.mark.rules("ACK-08")
@pytest.mark.clauses("ACK-08.b", "ACK-08.c")
@pytest.mark.parametrize("steps, left", [
    (("ack",), 1),  # never committed: still outstanding when the channel closes
    (("ack", "commit"), 0),
    (("ack", "rollback"), 1),  # rollback makes the delivery unacked again
    (("ack", "rollback", "ack", "commit"), 0),  # ... so it can be acked again
], ids=["uncommitted", "commit", "rollback", "rollback-reack"])
def test_tx_ack_is_settled_at_commit_and_restored_by_rollback(connect: Connect, names: Names, target: Target,
                                                               steps: tuple[str, ...], left: int) -> None:
    client, ch, queue = filled(connect, names, 1)
    client.rpc(ch, TxSelect(), TxSelectOk)
    tag = tag_of(get(client, ch, queue))
    for step in steps:
        if step == "ack":
            client.send(ch, BasicAck(delivery_tag=tag))
        elif step == "commit":
            client.rpc(ch, TxCommit(), TxCommitOk)
        else:
            client.rpc(ch, TxRollback(), TxRollbackOk)
    assert ready(client, ch, queue) == 0
    client.close_channel(ch)
    assert_ready_elsewhere(connect, {queue: left}, target.timeout(RETURN_S))


@pytest.mark.rules("ACK-08")
@pytest.mark.clauses("ACK-08.b")
def test_tx_reject_requeues_only_at_commit(connect: Connect, names: Names) -> None:
    client, ch, queue = filled(connect, names, 1)
    client.rpc(ch, TxSelect(), TxSelectOk)
    tag = tag_of(get(client, ch, queue))
    client.send(ch, BasicReject(delivery_tag=tag, requeue=True))
    assert get(client, ch, queue) is None  # deferred: not back in the queue yet
    client.rpc(ch, TxCommit(), TxCommitOk)
    assert_redelivered(get(client, ch, queue), b"m1")
