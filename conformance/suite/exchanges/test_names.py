"""Names with carriage returns and line feeds (EXCH-11): declarations, deletions and bindings
remove them, publishes and consumes do not; and nowait (EXCH-12): unanswered, yet done."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from codec import (
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    ExchangeUnbind,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    ReplyCode,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.topology import Judge
from conformance.suite.steps.wire import sync

Connect = Callable[..., RawClient]


def _broken(name: str) -> str:
    """The name with a CR LF pair inside and a LF at the end."""
    return f"{name[:6]}\r\n{name[6:]}\n"


@pytest.mark.rules("EXCH-11")
def test_cr_and_lf_are_removed_from_declared_and_bound_names(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "EXCH-11")
    x, q = names.exchange("x"), names.queue("q")
    judge.ok(f"declaring exchange {_broken(x)!r}", ExchangeDeclare(exchange=_broken(x), exchange_type="direct"),
             ExchangeDeclareOk)
    assert judge.exchange_exists(x), f"EXCH-11: declaring {_broken(x)!r} must declare exchange {x!r}; it does not exist"
    judge.ok(f"a passive declare of {_broken(x)!r}", ExchangeDeclare(exchange=_broken(x), passive=True),
             ExchangeDeclareOk)
    declared: Any = judge.ok(f"declaring queue {_broken(q)!r}", QueueDeclare(queue=_broken(q), exclusive=True),
                             QueueDeclareOk)
    assert declared.method.queue == q, (f"EXCH-11: declaring queue {_broken(q)!r} must answer the name {q!r}; "
                                        f"declare-ok named {declared.method.queue!r}")
    ch = judge.channel()
    judge.ok("binding the two by their names with CR and LF", QueueBind(queue=_broken(q), exchange=_broken(x),
             routing_key="k"), QueueBindOk, ch=ch)
    judge.client.send(ch, BasicPublish(exchange=x, routing_key="k"), BasicProperties(), b"bound")
    got: Any = judge.ok("a basic.get after a publish on the binding", BasicGet(queue=q, no_ack=True), BasicGetOk,
                        BasicGetEmpty, ch=ch)
    assert isinstance(got.method, BasicGetOk), "EXCH-11: a binding made with CR and LF in the names does not route"
    judge.publish_refused(f"publishing to {_broken(x)!r} (a publish keeps the name as sent)", _broken(x), "k",
                          ReplyCode.NOT_FOUND, f"NOT_FOUND - no exchange '{_broken(x)}' in vhost '{target.vhost}'")
    judge.ok(f"deleting queue {_broken(q)!r}", QueueDelete(queue=_broken(q)), QueueDeleteOk)
    judge.ok(f"deleting exchange {_broken(x)!r}", ExchangeDelete(exchange=_broken(x)), ExchangeDeleteOk)
    assert not judge.queue_exists(q) and not judge.exchange_exists(x), (
        f"EXCH-11: deleting {_broken(q)!r} and {_broken(x)!r} must delete {q!r} and {x!r}")


@pytest.mark.rules("EXCH-12")
def test_nowait_methods_take_effect_unanswered(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "EXCH-12")
    client = judge.client
    x, q = names.exchange("x"), names.queue("q")
    ch = judge.channel()
    steps: list[Any] = [ExchangeDeclare(exchange=x, exchange_type="direct", nowait=True),
                        QueueDeclare(queue=q, exclusive=True, nowait=True),
                        QueueBind(queue=q, exchange=x, routing_key="k", nowait=True)]
    if target.profile.supports("exchange_exchange_bindings"):
        steps += [ExchangeBind(destination=x, source="amq.fanout", nowait=True),
                  ExchangeUnbind(destination=x, source="amq.fanout", nowait=True)]
    for method in steps:
        client.send(ch, method)
    client.send(ch, BasicPublish(exchange=x, routing_key="k"), BasicProperties(), b"through nowait")
    got: Any = judge.ok("a basic.get after nowait declarations and binding", BasicGet(queue=q, no_ack=True),
                        BasicGetOk, BasicGetEmpty, ch=ch)
    replies = [c.method.NAME for c in client.pending(ch)]
    assert isinstance(got.method, BasicGetOk) and got.body == b"through nowait", (
        f"EXCH-12: a message published through an exchange, queue and binding made with nowait must reach the "
        f"queue; basic.get answered {got.method.NAME}")
    assert not replies, f"EXCH-12: methods sent with nowait must not be answered; the broker sent {replies}"
    client.send(ch, QueueDelete(queue=q, nowait=True))
    client.send(ch, ExchangeDelete(exchange=x, nowait=True))
    # a round trip on the same channel first: the checks go on channels of their own, and RabbitMQ's
    # channels are independent processes, so a check could overtake the deletions (seen on 3.10.8 with
    # 4 jobs); the channel handles its methods in order, each deletion done before the next method
    sync(client, ch)
    assert not judge.queue_exists(q) and not judge.exchange_exists(x), (
        f"EXCH-12: queue.delete and exchange.delete with nowait must delete {q!r} and {x!r}")
    extra = [c.method.NAME for c in client.pending(ch)]
    assert not extra, f"EXCH-12: deletions sent with nowait must not be answered; the broker sent {extra}"
