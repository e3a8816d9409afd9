"""Who a queue belongs to and when it goes (QUEUE-05, QUEUE-06): exclusive queues and
auto-delete queues.

A deletion caused by a connection's close is asked about from another connection until the
scaled wait ends (`Judge.gone`): RabbitMQ deletes an exclusive queue when it learns that its
owner is gone, a moment after the close-ok.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import (
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    Method,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
    QueueUnbind,
    QueueUnbindOk,
    ReplyCode,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.topology import LOCKED, Judge

Connect = Callable[..., RawClient]


def _locked_operations(q: str) -> dict[str, tuple[Method, type[Method] | tuple[type[Method], ...]]]:
    return {
        "basic.consume": (BasicConsume(queue=q), BasicConsumeOk),
        "basic.get": (BasicGet(queue=q), (BasicGetOk, BasicGetEmpty)),
        "queue.bind": (QueueBind(queue=q, exchange="amq.direct", routing_key="other"), QueueBindOk),
        "queue.unbind of its binding": (QueueUnbind(queue=q, exchange="amq.direct", routing_key="owned"),
                                        QueueUnbindOk),
        "queue.purge": (QueuePurge(queue=q), QueuePurgeOk),
        "queue.delete": (QueueDelete(queue=q), QueueDeleteOk),
    }


@pytest.mark.rules("QUEUE-05")
@pytest.mark.parametrize("operation", list(_locked_operations("q")))
def test_another_connection_may_not_use_an_exclusive_queue(connect: Connect, names: Names, target: Target,
                                                           operation: str) -> None:
    owner = Judge(connect(), target, "QUEUE-05")
    q = names.queue("exclusive")
    owner.ok("declaring an exclusive queue", QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    owner.ok("binding it", QueueBind(queue=q, exchange="amq.direct", routing_key="owned"), QueueBindOk)
    other = Judge(connect(), target, "QUEUE-05")
    method, reply = _locked_operations(q)[operation]
    other.refused(f"{operation} from another connection", method, reply, ReplyCode.RESOURCE_LOCKED,
                  LOCKED.format(name=q, vhost=target.vhost))
    assert owner.queue_exists(q), f"QUEUE-05: the exclusive queue {q} is gone after another connection's refused {operation}"


@pytest.mark.rules("QUEUE-05")
def test_the_owner_uses_an_exclusive_queue_on_any_channel(connect: Connect, names: Names, target: Target) -> None:
    owner = Judge(connect(), target, "QUEUE-05")
    q = names.queue("exclusive")
    owner.ok("declaring an exclusive queue", QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    for what, method, reply in (("redeclaring it on another channel", QueueDeclare(queue=q, exclusive=True),
                                 (QueueDeclareOk,)),
                                ("binding it", QueueBind(queue=q, exchange="amq.direct", routing_key="k"), (QueueBindOk,)),
                                ("a basic.get", BasicGet(queue=q), (BasicGetOk, BasicGetEmpty)),
                                ("consuming", BasicConsume(queue=q, consumer_tag="c"), (BasicConsumeOk,)),
                                ("purging it", QueuePurge(queue=q), (QueuePurgeOk,))):
        owner.ok(f"{what} (its own connection, a new channel)", method, *reply)


@pytest.mark.rules("QUEUE-05")
def test_an_exclusive_queue_goes_with_its_connection(connect: Connect, names: Names, target: Target) -> None:
    owner = connect()
    q = names.queue("exclusive")
    owner.rpc(owner.channel(), QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    owner.close()
    judge = Judge(connect(), target, "QUEUE-05")
    assert judge.gone(lambda: judge.queue_exists(q)), (
        f"QUEUE-05: the exclusive queue {q} still exists after its connection closed")


@pytest.mark.rules("QUEUE-06")
def test_an_auto_delete_queue_goes_with_its_last_consumer(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-06")
    client = judge.client
    q = names.queue("auto-delete")
    judge.ok("declaring an auto-delete queue", QueueDeclare(queue=q, auto_delete=True), QueueDeclareOk)
    judge.ok("a basic.get", BasicGet(queue=q), BasicGetOk, BasicGetEmpty)
    assert judge.queue_exists(q), "QUEUE-06: an auto-delete queue that never had a consumer went after a basic.get"
    ch = client.channel()
    client.rpc(ch, BasicConsume(queue=q, consumer_tag="first"), BasicConsumeOk)
    client.rpc(ch, BasicConsume(queue=q, consumer_tag="second"), BasicConsumeOk)
    client.rpc(ch, BasicCancel(consumer_tag="first"), BasicCancelOk)
    counts = judge.queue_counts(q)
    assert counts == (0, 1), (f"QUEUE-06: with one of two consumers cancelled, the auto-delete queue must remain "
                              f"with one consumer; a passive declare answered {counts}")
    client.rpc(ch, BasicCancel(consumer_tag="second"), BasicCancelOk)
    assert not judge.queue_exists(q), "QUEUE-06: the auto-delete queue still exists after its last consumer was cancelled"
    kept = names.queue("exclusive, not auto-delete")
    judge.ok("declaring an exclusive queue that is not auto-delete", QueueDeclare(queue=kept, exclusive=True),
             QueueDeclareOk)
    client.rpc(ch, BasicConsume(queue=kept, consumer_tag="only"), BasicConsumeOk)
    client.rpc(ch, BasicCancel(consumer_tag="only"), BasicCancelOk)
    assert judge.queue_exists(kept), ("QUEUE-06: an exclusive queue that is not auto-delete went when its only "
                                      "consumer was cancelled (exclusive does not mean auto-delete)")


@pytest.mark.rules("QUEUE-06")
@pytest.mark.parametrize("closed", ["channel", "connection"])
def test_an_auto_delete_queue_goes_when_its_consumers_channel_closes(connect: Connect, names: Names, target: Target,
                                                                    closed: str) -> None:
    judge = Judge(connect(), target, "QUEUE-06")
    q = names.queue("auto-delete")
    judge.ok("declaring an auto-delete queue", QueueDeclare(queue=q, auto_delete=True), QueueDeclareOk)
    consumer = connect() if closed == "connection" else judge.client
    ch = consumer.channel()
    consumer.rpc(ch, BasicConsume(queue=q, consumer_tag="only"), BasicConsumeOk)
    if closed == "connection":
        consumer.close()
        assert judge.gone(lambda: judge.queue_exists(q)), (
            "QUEUE-06: the auto-delete queue still exists after its only consumer's connection closed")
    else:
        consumer.close_channel(ch)
        assert not judge.queue_exists(q), (
            "QUEUE-06: the auto-delete queue still exists after its only consumer's channel closed")
