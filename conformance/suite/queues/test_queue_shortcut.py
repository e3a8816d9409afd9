"""The empty queue name (QUEUE-15): on a channel that declared a queue it names that queue."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from codec import (
    BasicConsume,
    BasicConsumeOk,
    BasicGet,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
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
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.topology import Judge

Connect = Callable[..., RawClient]


@pytest.mark.rules("QUEUE-15")
def test_the_empty_name_is_the_last_declared_queue(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-15")
    q = names.queue("q")
    ch = judge.channel()
    judge.ok("declaring a queue", QueueDeclare(queue=q, exclusive=True), QueueDeclareOk, ch=ch)
    judge.ok("queue.bind of '' with key 'k'", QueueBind(queue="", exchange="amq.direct", routing_key="k"), QueueBindOk,
             ch=ch)
    judge.client.send(ch, BasicPublish(exchange="amq.direct", routing_key="k"), BasicProperties(), b"on k")
    got: Any = judge.ok("basic.get of ''", BasicGet(queue="", no_ack=True), BasicGetOk, ch=ch)
    assert got.body == b"on k", f"QUEUE-15: basic.get of '' must get the message bound with '' ; it got {got.body!r}"
    if judge.pinned:
        judge.ok("queue.bind of '' with an empty key (the queue's name as key)",
                 QueueBind(queue="", exchange="amq.direct", routing_key=""), QueueBindOk, ch=ch)
        judge.client.send(ch, BasicPublish(exchange="amq.direct", routing_key=q), BasicProperties(), b"on its name")
        got = judge.ok("basic.get of the queue", BasicGet(queue=q, no_ack=True), BasicGetOk, ch=ch)
        assert got.body == b"on its name", (f"QUEUE-15: a bind of '' with an empty key must use the queue's name as "
                                            f"key; the queue gave {got.body!r}")
    judge.client.send(ch, BasicPublish(exchange="", routing_key=q), BasicProperties(), b"purged")
    purged: Any = judge.ok("queue.purge of ''", QueuePurge(queue=""), QueuePurgeOk, ch=ch)
    assert purged.method.message_count == 1, (f"QUEUE-15: queue.purge of '' must purge the last declared queue's one "
                                              f"message; purge-ok said {purged.method.message_count}")
    judge.ok("basic.consume of ''", BasicConsume(queue="", consumer_tag="c", no_ack=True), BasicConsumeOk, ch=ch)
    judge.ok("queue.unbind of ''", QueueUnbind(queue="", exchange="amq.direct", routing_key="k"), QueueUnbindOk, ch=ch)
    judge.ok("queue.delete of ''", QueueDelete(queue=""), QueueDeleteOk, ch=ch)
    assert not judge.queue_exists(q), f"QUEUE-15: queue.delete of '' must delete {q!r}, the last declared queue"
