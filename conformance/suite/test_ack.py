"""Acknowledgements over the wire: ACK-01..10 and the seed sentences S001-01..03.

Rules:
- Errors are compared by scope, reply code and class/method id; the reply text is asserted
  only where the rule is about it (ACK-03's "PRECONDITION_FAILED - unknown delivery tag <N>",
  on the RabbitMQ profiles; a plain AMQP 0-9-1 broker's text is not checked).
- Whether a delivery was settled is observed through the queue: a delivery still unacked when
  its channel closes is requeued (RQ-03), so the ready count after the close tells settled
  (gone) from outstanding (back). basic.ack/nack/reject have no reply, so a round trip after
  them (a passive queue.declare) surfaces the channel.close they provoke.
- basic.nack and dead-lettering are RabbitMQ extensions: on the amqp-0-9-1 profile those
  cases are `not-applicable`.
"""

from __future__ import annotations

import pytest

from codec import (
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicNack,
    BasicRecover,
    BasicRecoverAsync,
    BasicRecoverOk,
    BasicReject,
    Method,
    QueueDeclare,
    QueueDeclareOk,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    TxSelect,
    TxSelectOk,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import ChannelClosed, ConnectionClosed, RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.queue_steps import (
    RETURN_S,
    Connect,
    Publisher,
    assert_quiet,
    assert_ready_elsewhere,
    assert_redelivered,
    bodies,
    consume,
    declare,
    filled,
    get,
    get_all,
    messages,
    ready,
    require,
    require_nack,
    settle,
    tag_of,
    take,
    take_one,
    with_dead_letter_queue,
)

UNKNOWN_TAG = "PRECONDITION_FAILED - unknown delivery tag {}"
SETTLE_METHOD_IDS = {kind: METHOD_IDS[f"basic.{kind}"] for kind in ("ack", "reject", "nack")}


def closed_on(client: RawClient, ch: int, queue: str) -> ChannelClosed:
    """The channel.close that earlier methods on `ch` provoked, surfaced by a round trip."""
    with pytest.raises(ChannelClosed) as info:
        ready(client, ch, queue)
    return info.value


def assert_unknown_tag(closed: ChannelClosed, tag: int, kind: str, target: Target, rule_id: str) -> None:
    """ACK-03: channel.close 406, class 60, the settling method's id; the text on RabbitMQ."""
    assert (closed.scope, closed.code, closed.class_id, closed.method_id) == (
        "channel", ReplyCode.PRECONDITION_FAILED, *SETTLE_METHOD_IDS[kind]), closed
    if target.profile.expect(rule_id) == "required":
        assert closed.text == UNKNOWN_TAG.format(tag)


# -- ACK-01, ACK-02: the tags ------------------------------------------------------------------
@pytest.mark.rules("ACK-01")
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


@pytest.mark.rules("ACK-02")
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
def test_unknown_tag_requeues_the_channels_deliveries(connect: Connect, names: Names, target: Target) -> None:
    client, ch, queue = filled(connect, names, 2)
    assert [d.tag for d in get_all(client, ch, queue)] == [1, 2]
    client.send(ch, BasicAck(delivery_tag=9))
    assert_unknown_tag(closed_on(client, ch, queue), 9, "ack", target, "ACK-03")
    assert_ready_elsewhere(connect, {queue: 2}, target.timeout(RETURN_S))  # back once the channel is gone
    assert_redelivered(get_all(client, client.channel(), queue), [b"m1", b"m2"])


@pytest.mark.rules("ACK-04")
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
def test_nack_multiple_settles_up_to_n(connect: Connect, names: Names, target: Target) -> None:
    require_nack(target.profile)
    client, ch, queue = filled(connect, names, 3)
    assert len(get_all(client, ch, queue)) == 3
    client.send(ch, BasicNack(delivery_tag=2, multiple=True, requeue=False))
    assert ready(client, ch, queue) == 0  # discarded, not requeued
    client.close_channel(ch)
    assert_ready_elsewhere(connect, {queue: 1}, target.timeout(RETURN_S))  # m3 back with the channel (RQ-03)
    assert bodies(get_all(client, client.channel(), queue)) == [b"m3"]


@pytest.mark.rules("ACK-06")
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
def test_tag_0_without_multiple_is_an_unknown_tag(connect: Connect, names: Names, target: Target) -> None:
    if target.profile.expect("ACK-06") != "required":
        not_applicable("delivery-tag 0 with multiple=false is not specified by AMQP 0-9-1")
    client, ch, queue = filled(connect, names, 1)
    assert tag_of(get(client, ch, queue)) == 1  # something is outstanding, still an error
    client.send(ch, BasicAck(delivery_tag=0))
    assert_unknown_tag(closed_on(client, ch, queue), 0, "ack", target, "ACK-06")


# -- ACK-07: reject and nack -----------------------------------------------------------------
@pytest.mark.rules("ACK-07")
@pytest.mark.parametrize("kind", ["reject", "nack"])
@pytest.mark.parametrize("requeue", [True, False], ids=["requeue", "discard"])
def test_reject_and_nack_requeue_or_discard_without_reply(connect: Connect, names: Names, target: Target,
                                                          kind: str, requeue: bool) -> None:
    if kind == "nack":
        require_nack(target.profile)
    client, ch, queue = filled(connect, names, 1)
    tag = tag_of(get(client, ch, queue))
    client.send(ch, settle(kind, tag, requeue=requeue))
    reply = client.rpc(ch, QueueDeclare(queue=queue, passive=True))  # the next frame of any kind
    assert isinstance(reply.method, QueueDeclareOk), f"{kind} got a reply: {reply.method!r}"
    again = get(client, ch, queue)  # basic.get, unlike a passive declare, queues behind the requeue
    if requeue:
        assert_redelivered(again, b"m1")
    else:
        assert again is None
        client.close_channel(ch)
        assert_ready_elsewhere(connect, {queue: 0}, target.timeout(RETURN_S))  # discarded, not left outstanding


@pytest.mark.rules("ACK-07", "ACK-06")
@pytest.mark.parametrize("tag", [3, 0], ids=["up-to-3", "tag-0"])
def test_nack_multiple_requeue_puts_every_message_back(connect: Connect, names: Names, target: Target,
                                                       tag: int) -> None:
    require_nack(target.profile)
    client, ch, queue = filled(connect, names, 3)
    assert [d.tag for d in get_all(client, ch, queue)] == [1, 2, 3]
    client.send(ch, BasicNack(delivery_tag=tag, multiple=True, requeue=True))
    assert_redelivered(get_all(client, ch, queue), [b"m1", b"m2", b"m3"])


@pytest.mark.rules("ACK-07")
@pytest.mark.parametrize("kind", ["reject", "nack"])
def test_discarded_message_is_dead_lettered_when_a_dlx_is_set(connect: Connect, names: Names,
                                                              target: Target, kind: str) -> None:
    require(target.profile, "dead_lettering", "dead-lettering")
    client = connect()
    ch = client.channel()
    arguments, dlq = with_dead_letter_queue(client, ch, names)
    queue = declare(client, ch, names.queue(), arguments=arguments)
    Publisher(client).publish(queue, [b"m1"])
    consume(client, ch, dlq)
    client.send(ch, settle(kind, tag_of(get(client, ch, queue)), requeue=False))
    dead = take_one(client, ch)
    assert dead.body == b"m1"
    death = dead.headers["x-death"][0]
    assert (death["reason"], death["queue"]) == ("rejected", queue)


# -- ACK-08: transactions --------------------------------------------------------------------
@pytest.mark.rules("ACK-08")
@pytest.mark.parametrize("kind", ["ack", "reject", "nack"])
def test_unknown_tag_in_tx_fails_at_ack_time_not_at_commit(connect: Connect, names: Names,
                                                            target: Target, kind: str) -> None:
    if kind == "nack":
        require_nack(target.profile)
    client, ch, _queue = filled(connect, names, 1)
    client.rpc(ch, TxSelect(), TxSelectOk)
    client.send(ch, settle(kind, 7))
    with pytest.raises(ChannelClosed) as closed:
        client.rpc(ch, TxCommit(), TxCommitOk)
    # the failing method is the ack itself (60/80..120), not tx.commit (90/20)
    assert_unknown_tag(closed.value, 7, kind, target, "ACK-08")


@pytest.mark.rules("ACK-08")
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
def test_tx_reject_requeues_only_at_commit(connect: Connect, names: Names) -> None:
    client, ch, queue = filled(connect, names, 1)
    client.rpc(ch, TxSelect(), TxSelectOk)
    tag = tag_of(get(client, ch, queue))
    client.send(ch, BasicReject(delivery_tag=tag, requeue=True))
    assert get(client, ch, queue) is None  # deferred: not back in the queue yet
    client.rpc(ch, TxCommit(), TxCommitOk)
    assert_redelivered(get(client, ch, queue), b"m1")


# -- ACK-09: basic.recover -------------------------------------------------------------------
@pytest.mark.rules("ACK-09")
@pytest.mark.parametrize("asynchronous", [False, True], ids=["recover", "recover-async"])
def test_recover_requeue_redelivers_unacked_with_redelivered(connect: Connect, names: Names,
                                                             asynchronous: bool) -> None:
    client, ch, queue = filled(connect, names, 2)
    consume(client, ch, queue)
    first = take(client, ch, 2)
    assert not any(d.redelivered for d in first)
    if asynchronous:
        client.send(ch, BasicRecoverAsync(requeue=True))
        ready(client, ch, queue)  # round trip; recover-async has no reply
        assert client.poll(ch, BasicRecoverOk) is None, "basic.recover-async was answered"
    else:
        client.rpc(ch, BasicRecover(requeue=True), BasicRecoverOk)
    again = take(client, ch, 2)
    assert_redelivered(again, [b"m1", b"m2"], in_order=False)
    assert sorted(d.tag for d in again) == [3, 4]


@pytest.mark.rules("ACK-09")
@pytest.mark.parametrize("asynchronous", [False, True], ids=["recover", "recover-async"])
def test_recover_without_requeue_is_a_connection_error_540(connect: Connect, names: Names, target: Target,
                                                           asynchronous: bool) -> None:
    client, ch, queue = filled(connect, names, 1)
    consume(client, ch, queue)
    take(client, ch, 1)
    if target.profile.expect("ACK-09") != "required":  # spec: redeliver to the same recipient
        if asynchronous:
            not_applicable("basic.recover-async is deprecated in AMQP 0-9-1")
        client.rpc(ch, BasicRecover(requeue=False), BasicRecoverOk)
        assert take_one(client, ch).body == b"m1"
        return
    method: Method = BasicRecoverAsync(requeue=False) if asynchronous else BasicRecover(requeue=False)
    client.send(ch, method)
    with pytest.raises(ConnectionClosed) as closed:
        ready(client, ch, queue)
    c = closed.value
    assert (c.scope, c.code, c.class_id, c.method_id) == ("connection", ReplyCode.NOT_IMPLEMENTED,
                                                                   *METHOD_IDS["basic.recover-async" if asynchronous else "basic.recover"])


# -- ACK-10: cancel --------------------------------------------------------------------------
@pytest.mark.rules("ACK-10")
def test_cancel_leaves_deliveries_unacked_on_the_channel(connect: Connect, names: Names,
                                                         target: Target) -> None:
    client, ch, queue = filled(connect, names, 3)
    tag = consume(client, ch, queue)
    assert [d.tag for d in take(client, ch, 3)] == [1, 2, 3]
    client.rpc(ch, BasicCancel(consumer_tag=tag), BasicCancelOk)
    assert_quiet(client, ch, target.timeout(0.2))
    assert ready(client, ch, queue) == 0  # neither requeued nor discarded by the cancel
    client.send(ch, BasicAck(delivery_tag=1))
    client.send(ch, BasicReject(delivery_tag=2, requeue=True))
    assert_redelivered(get(client, ch, queue), b"m2")  # still settleable on the channel: the reject requeued m2
    client.close_channel(ch)
    assert_ready_elsewhere(connect, {queue: 2}, target.timeout(RETURN_S))  # m2 again, and m3 back only with the channel


# -- S001-01..03: ack modes and positive acks ------------------------------------------------
@pytest.mark.rules("S001-01")
def test_ack_mode_is_chosen_per_consume_and_per_get(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch = client.channel()
    auto, manual = declare(client, ch, names.queue("auto")), declare(client, ch, names.queue("manual"))
    publisher = Publisher(client)
    publisher.publish(auto, messages(2))
    publisher.publish(manual, messages(2))
    assert get(client, ch, auto, no_ack=True) is not None
    assert get(client, ch, manual) is not None
    consume(client, ch, auto, no_ack=True)
    consume(client, ch, manual)
    take(client, ch, 2)
    client.close_channel(ch)
    # the manual-mode deliveries were outstanding and come back; the automatic ones are done
    assert_ready_elsewhere(connect, {auto: 0, manual: 2}, target.timeout(RETURN_S))


@pytest.mark.rules("S001-02", "RQ-03")
def test_automatic_ack_delivery_is_settled_once_sent(connect: Connect, names: Names, target: Target) -> None:
    client, ch, queue = filled(connect, names, 1)
    consume(client, ch, queue, no_ack=True)
    assert take_one(client, ch).body == b"m1"
    assert ready(client, ch, queue) == 0
    client.close_channel(ch)  # nothing is outstanding: nothing comes back
    assert_ready_elsewhere(connect, {queue: 0}, target.timeout(RETURN_S))


@pytest.mark.rules("S001-03")
@pytest.mark.parametrize("via", ["get", "consume"])
def test_positive_ack_settles_the_message_for_good(connect: Connect, names: Names, via: str) -> None:
    client, ch, queue = filled(connect, names, 1)
    if via == "get":
        tag = tag_of(get(client, ch, queue))
    else:
        consume(client, ch, queue)
        tag = take_one(client, ch).tag
    client.send(ch, BasicAck(delivery_tag=tag))
    assert ready(client, ch, queue) == 0
    client.close_channel(ch)
    other = connect()
    assert get(other, other.channel(), queue) is None
