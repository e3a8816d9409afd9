"""Acknowledgements over the wire, how a delivery is settled: ACK-07 (reject and nack), ACK-09
(basic.recover), ACK-10 (cancel) and the seed sentences S001-01..03 (ack modes, positive acks).
The tags, unknown and multiple acks, transactions: test_ack.py.

Rules:
- Errors are compared by scope, reply code and class/method id.
- Whether a delivery was settled is observed through the queue: a delivery still unacked when
  its channel closes is requeued (RQ-03), so the ready count after the close tells settled
  (gone) from outstanding (back).
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
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import ConnectionClosed
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.queues import (
    RETURN_S,
    Connect,
    Publisher,
    assert_quiet,
    assert_ready_elsewhere,
    assert_redelivered,
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


# -- ACK-07: reject and nack -----------------------------------------------------------------
@pytest.mark.rules("ACK-07")
@pytest.mark.clauses("ACK-07.a", "ACK-07.b", "ACK-07.d")
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
@pytest.mark.clauses("ACK-07.a", "ACK-07.e", "ACK-06.a")
@pytest.mark.parametrize("tag", [3, 0], ids=["up-to-3", "tag-0"])
def test_nack_multiple_requeue_puts_every_message_back(connect: Connect, names: Names, target: Target,
                                                       tag: int) -> None:
    require_nack(target.profile)
    client, ch, queue = filled(connect, names, 3)
    assert [d.tag for d in get_all(client, ch, queue)] == [1, 2, 3]
    client.send(ch, BasicNack(delivery_tag=tag, multiple=True, requeue=True))
    assert_redelivered(get_all(client, ch, queue), [b"m1", b"m2", b"m3"])


@pytest.mark.rules("ACK-07")
@pytest.mark.clauses("ACK-07.c")
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


# -- ACK-09: basic.recover -------------------------------------------------------------------
@pytest.mark.rules("ACK-09")
@pytest.mark.clauses("ACK-09.a", "ACK-09.b", "ACK-09.c", "ACK-09.d")
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
@pytest.mark.clauses("ACK-09.e")
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
@pytest.mark.clauses("ACK-10.a", "ACK-10.b", "ACK-10.c")
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
@pytest.mark.rules("S001-01", "S001-02")
@pytest.mark.clauses("S001-01.a", "S001-01.b", "S001-02.b")
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
@pytest.mark.clauses("S001-02.a", "RQ-03.f")
def test_automatic_ack_delivery_is_settled_once_sent(connect: Connect, names: Names, target: Target) -> None:
    client, ch, queue = filled(connect, names, 1)
    consume(client, ch, queue, no_ack=True)
    assert take_one(client, ch).body == b"m1"
    assert ready(client, ch, queue) == 0
    client.close_channel(ch)  # nothing is outstanding: nothing comes back
    assert_ready_elsewhere(connect, {queue: 0}, target.timeout(RETURN_S))


@pytest.mark.rules("S001-03")
@pytest.mark.clauses("S001-03.a")
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
