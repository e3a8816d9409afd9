"""Emptying and removing queues (QUEUE-09..12): purge, delete with its counts and conditions, the
bindings a deleted queue loses, and consuming or getting from a queue that does not exist.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import (
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
    ReplyCode,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.topology import Judge

Connect = Callable[..., RawClient]


def _filled(judge: Judge, q: str, count: int) -> int:
    """Declare `q` exclusive with `count` messages, one of them delivered and unacked; its channel."""
    ch = judge.channel()
    judge.client.rpc(ch, QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    for n in range(count):
        judge.client.send(ch, BasicPublish(exchange="", routing_key=q), BasicProperties(), f"m{n}".encode())
    judge.client.rpc(ch, BasicGet(queue=q), BasicGetOk, timeout=judge.target.timeout(5))
    return ch


@pytest.mark.rules("QUEUE-09")
def test_purge_removes_the_ready_messages_and_counts_them(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-09")
    q = names.queue("q")
    ch = _filled(judge, q, 4)
    reply = judge.ok("purging a queue with 3 ready messages and 1 delivered unacked", QueuePurge(queue=q), QueuePurgeOk)
    assert reply.method.message_count == 3, (f"QUEUE-09: purge-ok must count the 3 ready messages (not the one "
                                             f"delivered and unacked); it said {reply.method.message_count}")
    assert judge.queue_counts(q) == (0, 0), f"QUEUE-09: after the purge the queue still holds {judge.queue_counts(q)}"
    judge.client.send(ch, BasicNack(delivery_tag=1, requeue=True))
    judge.client.rpc(ch, QueueDeclare(queue=q, passive=True), QueueDeclareOk)
    assert judge.queue_counts(q) == (1, 0), (f"QUEUE-09: the unacked message must survive the purge and come back "
                                             f"when rejected; the queue holds {judge.queue_counts(q)}")
    missing = names.queue("missing")
    judge.refused("purging a missing queue", QueuePurge(queue=missing), QueuePurgeOk, ReplyCode.NOT_FOUND,
                  f"NOT_FOUND - no queue '{missing}' in vhost '{target.vhost}'")


@pytest.mark.rules("QUEUE-10")
def test_delete_counts_the_ready_messages(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-10")
    q = names.queue("q")
    _filled(judge, q, 3)
    reply = judge.ok("deleting a queue with 2 ready messages and 1 delivered unacked", QueueDelete(queue=q),
                     QueueDeleteOk)
    assert reply.method.message_count == 2, (f"QUEUE-10: delete-ok must count the 2 ready messages; it said "
                                             f"{reply.method.message_count}")
    assert not judge.queue_exists(q), f"QUEUE-10: queue {q} still exists after delete-ok"
    if not judge.pinned:
        return  # QUEUE-10's variant on the 0-9-1 profile: a missing queue's deletion is not pinned
    reply = judge.ok("deleting a missing queue", QueueDelete(queue=names.queue("missing")), QueueDeleteOk)
    assert reply.method.message_count == 0, (f"QUEUE-10: deleting a missing queue must answer delete-ok with 0; "
                                             f"it said {reply.method.message_count}")


@pytest.mark.rules("QUEUE-10")
def test_if_unused_and_if_empty(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-10")
    q = names.queue("q")
    ch = judge.channel()
    judge.client.rpc(ch, QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    judge.publish_confirmed(q, "one")
    judge.refused("deleting with if-empty a queue holding a ready message", QueueDelete(queue=q, if_empty=True),
                  QueueDeleteOk, ReplyCode.PRECONDITION_FAILED,
                  f"PRECONDITION_FAILED - queue '{q}' in vhost '{target.vhost}' not empty")
    counts = judge.queue_counts(q)
    assert counts == (1, 0), (f"QUEUE-10: the queue must stay, with its message, after the refused if-empty "
                              f"deletion; {'it is gone' if counts is None else f'a passive declare answered {counts}'}")
    judge.client.rpc(ch, BasicConsume(queue=q, consumer_tag="c", no_ack=True), BasicConsumeOk)
    judge.refused("deleting with if-unused a queue with a consumer", QueueDelete(queue=q, if_unused=True),
                  QueueDeleteOk, ReplyCode.PRECONDITION_FAILED,
                  f"PRECONDITION_FAILED - queue '{q}' in vhost '{target.vhost}' in use")
    counts = judge.queue_counts(q)
    assert counts == (0, 1), (f"QUEUE-10: the queue must stay, with its consumer, after the refused if-unused "
                              f"deletion; {'it is gone' if counts is None else f'a passive declare answered {counts}'}")
    judge.ok("deleting with if-empty the queue now empty (its message went to the consumer)",
             QueueDelete(queue=q, if_empty=True), QueueDeleteOk)
    assert not judge.queue_exists(q), f"QUEUE-10: queue {q} still exists after delete-ok"


@pytest.mark.rules("QUEUE-10")
def test_delete_a_queue_whose_consumer_holds_a_delivery(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-10")
    q = names.queue("q")
    ch = _filled(judge, q, 3)  # 2 ready, 1 delivered by basic.get
    consumer = judge.channel()
    judge.client.rpc(consumer, BasicQos(prefetch_count=1), BasicQosOk)
    judge.client.rpc(consumer, BasicConsume(queue=q, consumer_tag="holding"), BasicConsumeOk)
    judge.client.expect(consumer, BasicDeliver, timeout=target.timeout(5))  # 1 ready left
    reply = judge.ok("deleting a queue with 1 ready message, whose consumer holds an unacked delivery",
                     QueueDelete(queue=q), QueueDeleteOk, ch=ch)
    assert reply.method.message_count == 1, (f"QUEUE-10: delete-ok must count the 1 ready message; it said "
                                             f"{reply.method.message_count}")
    assert not judge.queue_exists(q), f"QUEUE-10: queue {q} still exists after delete-ok"


@pytest.mark.rules("QUEUE-11")
def test_a_deleted_queues_bindings_are_gone(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-11")
    q = names.queue("q")
    ch = judge.channel()
    judge.client.rpc(ch, QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    judge.client.rpc(ch, QueueBind(queue=q, exchange="amq.direct", routing_key=q), QueueBindOk)
    judge.client.rpc(ch, QueueDelete(queue=q), QueueDeleteOk)
    judge.client.rpc(ch, QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    judge.publish("amq.direct", q, "on the old binding", mandatory=True, ch=ch)
    returned = [r.reply_code for r in judge.returned(ch)]
    counts = judge.queue_counts(q)
    assert returned == [ReplyCode.NO_ROUTE] and counts == (0, 0), (
        f"QUEUE-11: a mandatory publish on the binding of a deleted queue, declared again, must be returned 312 "
        f"and not reach it; returns {returned}, the queue holds {counts}")
    judge.client.rpc(ch, QueueBind(queue=q, exchange="amq.direct", routing_key=q), QueueBindOk)
    judge.publish_confirmed(q, "on the new binding", exchange="amq.direct")
    assert judge.queue_counts(q) == (1, 0), (f"QUEUE-11: bound again, the queue must receive; it holds "
                                             f"{judge.queue_counts(q)}")


@pytest.mark.rules("QUEUE-12")
@pytest.mark.parametrize("method", ["basic.consume", "basic.get"])
def test_consuming_or_getting_from_a_missing_queue_is_404(connect: Connect, names: Names, target: Target,
                                                          method: str) -> None:
    judge = Judge(connect(), target, "QUEUE-12")
    missing = names.queue("missing")
    request, reply = ((BasicConsume(queue=missing), BasicConsumeOk) if method == "basic.consume"
                      else (BasicGet(queue=missing), BasicGetOk))
    judge.refused(f"{method} from a missing queue", request, reply, ReplyCode.NOT_FOUND,
                  f"NOT_FOUND - no queue '{missing}' in vhost '{target.vhost}'")
