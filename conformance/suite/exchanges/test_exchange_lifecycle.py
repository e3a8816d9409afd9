"""What an exchange's life does to bindings (EXCH-06..10): delete and if-unused, the bindings a
delete removes, auto-delete exchanges, internal exchanges, and binding or unbinding what is
missing.

Where a deletion follows another connection's act (an exclusive queue going with its connection)
it is asked about again until the scaled wait ends (`Judge.gone`); every other deletion is
synchronous with the reply to the request that causes it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import (
    ExchangeBind,
    ExchangeBindOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    ExchangeUnbind,
    ExchangeUnbindOk,
    Method,
    QueueBind,
    QueueBindOk,
    QueueDelete,
    QueueDeleteOk,
    QueueUnbind,
    QueueUnbindOk,
    ReplyCode,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_claimed
from conformance.suite.steps.routing import assert_reached, topology
from conformance.suite.steps.topology import Judge

Connect = Callable[..., RawClient]


def _e2e(target: Target, what: str) -> None:
    if not target.profile.supports("exchange_exchange_bindings"):
        not_claimed(f"{what} needs exchange_exchange_bindings, which the broker does not claim")


@pytest.mark.rules("EXCH-06")
def test_delete_and_if_unused(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-06")
    missing = names.exchange("missing")
    judge.ok("deleting a missing exchange", ExchangeDelete(exchange=missing), ExchangeDeleteOk)
    judge.ok("deleting a missing exchange with if-unused", ExchangeDelete(exchange=missing, if_unused=True),
             ExchangeDeleteOk)
    x = t.exchange("bound", "direct")
    t.queue("q")
    t.bind("q", "bound", "k")
    judge.refused("deleting with if-unused an exchange bound to a queue", ExchangeDelete(exchange=x, if_unused=True),
                  ExchangeDeleteOk, ReplyCode.PRECONDITION_FAILED,
                  f"PRECONDITION_FAILED - exchange '{x}' in vhost '{target.vhost}' in use")
    assert judge.exchange_exists(x), f"EXCH-06: exchange {x} is gone after its refused if-unused deletion"
    lonely = names.exchange("lonely")
    judge.ok("declaring an exchange", ExchangeDeclare(exchange=lonely, exchange_type="fanout"), ExchangeDeclareOk)
    judge.ok("deleting with if-unused an exchange without bindings", ExchangeDelete(exchange=lonely, if_unused=True),
             ExchangeDeleteOk)
    assert not judge.exchange_exists(lonely), f"EXCH-06: exchange {lonely} still exists after delete-ok"


@pytest.mark.rules("EXCH-06")
def test_if_unused_counts_exchange_bindings_as_a_source_only(connect: Connect, names: Names, target: Target) -> None:
    _e2e(target, "an exchange-to-exchange binding")
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-06")
    source, destination = t.exchange("source", "fanout"), t.exchange("destination", "fanout")
    t.queue("q")
    t.bind("q", "source")  # keeps the auto-delete source after the destination goes
    t.bind_exchange("destination", "source")
    judge.refused("deleting with if-unused the source of an exchange-to-exchange binding",
                  ExchangeDelete(exchange=source, if_unused=True), ExchangeDeleteOk, ReplyCode.PRECONDITION_FAILED,
                  f"PRECONDITION_FAILED - exchange '{source}' in vhost '{target.vhost}' in use")
    judge.ok("deleting with if-unused an exchange that is only the destination of a binding",
             ExchangeDelete(exchange=destination, if_unused=True), ExchangeDeleteOk)
    assert not judge.exchange_exists(destination), f"EXCH-06: exchange {destination} still exists after delete-ok"


@pytest.mark.rules("EXCH-07")
def test_deleting_an_exchange_removes_its_bindings_as_a_source(connect: Connect, names: Names,
                                                               target: Target) -> None:
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-07")
    x = names.exchange("x")
    judge.ok("declaring an exchange", ExchangeDeclare(exchange=x, exchange_type="direct"), ExchangeDeclareOk)
    t.exchanges["x"] = x
    t.queue("q")
    t.bind("q", "x", "k")
    judge.ok("deleting the exchange", ExchangeDelete(exchange=x), ExchangeDeleteOk)
    judge.ok("declaring it again", ExchangeDeclare(exchange=x, exchange_type="direct"), ExchangeDeclareOk)
    t.publish("x", "k", "on the old binding", mandatory=True)
    assert_reached(t.reached(), {"q": []}, "EXCH-07", "a publish to an exchange deleted and declared again "
                   "(its binding to the queue must have gone with it)")
    assert [r.reply_code for r in t.returned()] == [ReplyCode.NO_ROUTE], (
        f"EXCH-07: the mandatory publish on the deleted binding must be returned 312 NO_ROUTE; returns: {t.returned()}")
    judge.ok("deleting the exchange", ExchangeDelete(exchange=x), ExchangeDeleteOk)


@pytest.mark.rules("EXCH-07")
def test_deleting_an_exchange_removes_its_bindings_as_a_destination(connect: Connect, names: Names,
                                                                    target: Target) -> None:
    _e2e(target, "an exchange-to-exchange binding")
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-07")
    source, destination = names.exchange("source"), names.exchange("destination")
    for name in (source, destination):
        judge.ok("declaring an exchange", ExchangeDeclare(exchange=name, exchange_type="fanout"), ExchangeDeclareOk)
    t.exchanges.update({"source": source, "destination": destination})
    t.queue("q")
    t.bind_exchange("destination", "source")
    judge.ok("deleting the destination exchange", ExchangeDelete(exchange=destination), ExchangeDeleteOk)
    judge.ok("declaring it again", ExchangeDeclare(exchange=destination, exchange_type="fanout"), ExchangeDeclareOk)
    t.bind("q", "destination")
    t.publish("source", "k", "through the old exchange binding", mandatory=True)
    assert_reached(t.reached(), {"q": []}, "EXCH-07", "a publish to the source of an exchange-to-exchange "
                   "binding whose destination was deleted and declared again")
    judge.ok("deleting with if-unused the former source (its binding went with the destination)",
             ExchangeDelete(exchange=source, if_unused=True), ExchangeDeleteOk)
    judge.ok("deleting the destination", ExchangeDelete(exchange=destination), ExchangeDeleteOk)


@pytest.mark.rules("EXCH-08")
def test_an_auto_delete_exchange_goes_with_its_last_queue_binding(connect: Connect, names: Names,
                                                                   target: Target) -> None:
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-08")
    x = t.exchange("x", "direct")  # auto-delete
    assert judge.exchange_exists(x), "EXCH-08: a new auto-delete exchange was deleted before it had a binding"
    t.queue("a")
    t.queue("b")
    judge.ok("an unbind that removes nothing", QueueUnbind(queue=t.queues["a"], exchange=x, routing_key="none"),
             QueueUnbindOk)
    assert judge.exchange_exists(x), "EXCH-08: an unbind that removed nothing deleted the auto-delete exchange"
    t.bind("a", "x", "k")
    t.bind("b", "x", "k")
    judge.ok("unbinding one of two queues", QueueUnbind(queue=t.queues["a"], exchange=x, routing_key="k"),
             QueueUnbindOk)
    assert judge.exchange_exists(x), "EXCH-08: the auto-delete exchange was deleted while a binding remained"
    judge.ok("deleting the last bound queue", QueueDelete(queue=t.queues["b"]), QueueDeleteOk)
    assert not judge.exchange_exists(x), (
        "EXCH-08: the auto-delete exchange still exists after its last bound queue was deleted")
    y = t.exchange("y", "direct")
    t.bind("a", "y", "k")
    judge.ok("unbinding its only queue", QueueUnbind(queue=t.queues["a"], exchange=y, routing_key="k"), QueueUnbindOk)
    assert not judge.exchange_exists(y), "EXCH-08: the auto-delete exchange still exists after its last unbind"


@pytest.mark.rules("EXCH-08")
def test_an_auto_delete_exchange_goes_with_an_exclusive_queues_connection(connect: Connect, names: Names,
                                                                          target: Target) -> None:
    owner = topology(connect, names, target)
    x = owner.exchange("x", "fanout")
    owner.queue("exclusive")
    owner.bind("exclusive", "x")
    owner.client.close()
    judge = Judge(connect(), target, "EXCH-08")
    assert judge.gone(lambda: judge.exchange_exists(x)), (
        "EXCH-08: an auto-delete exchange still exists after the connection of its only bound (exclusive) queue "
        "closed")


@pytest.mark.rules("EXCH-08")
def test_auto_delete_through_exchange_bindings(connect: Connect, names: Names, target: Target) -> None:
    _e2e(target, "an exchange-to-exchange binding")
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-08")
    source, middle = t.exchange("source", "fanout"), t.exchange("middle", "fanout")
    t.queue("q")
    t.bind("q", "middle")
    t.bind_exchange("middle", "source")
    judge.ok("unbinding the source's only binding", ExchangeUnbind(destination=middle, source=source),
             ExchangeUnbindOk)
    assert not judge.exchange_exists(source), "EXCH-08: the auto-delete source still exists after its last unbind"
    assert judge.exchange_exists(middle), (
        "EXCH-08: an auto-delete exchange that still has a queue binding was deleted when it stopped being a destination")
    upstream = t.exchange("upstream", "fanout")  # upstream -> middle -> q, all auto-delete
    t.bind_exchange("middle", "upstream")
    judge.ok("deleting the queue at the end of the chain", QueueDelete(queue=t.queues["q"]), QueueDeleteOk)
    assert not judge.exchange_exists(middle), (
        "EXCH-08: the auto-delete exchange still exists after its only bound queue was deleted")
    assert not judge.exchange_exists(upstream), (
        "EXCH-08: the deletion did not cascade: the auto-delete exchange bound only to the deleted auto-delete "
        "exchange still exists")
    lone = t.exchange("destination only", "fanout")
    anchor = names.exchange("anchor")
    judge.ok("declaring a plain exchange", ExchangeDeclare(exchange=anchor, exchange_type="fanout"), ExchangeDeclareOk)
    judge.ok("binding the auto-delete exchange as a destination", ExchangeBind(destination=lone, source=anchor),
             ExchangeBindOk)
    judge.ok("unbinding it", ExchangeUnbind(destination=lone, source=anchor), ExchangeUnbindOk)
    assert judge.exchange_exists(lone), (
        "EXCH-08: an auto-delete exchange that was only ever a destination was deleted by an unbind")
    judge.ok("deleting the plain exchange", ExchangeDelete(exchange=anchor), ExchangeDeleteOk)


@pytest.mark.rules("EXCH-09")
def test_an_internal_exchange_takes_no_publish(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    internal = names.exchange("internal")
    t.rpc(ExchangeDeclare(exchange=internal, exchange_type="fanout", internal=True, auto_delete=True),
          ExchangeDeclareOk)
    t.exchanges["internal"] = internal
    t.exchange("entry", "fanout")
    t.queue("q")
    t.bind("q", "internal")
    t.bind_exchange("internal", "entry")
    t.publish("entry", "k", "through the internal exchange")
    assert_reached(t.reached(), {"q": ["through the internal exchange"]}, "EXCH-09",
                   "a publish reaching an internal exchange through an exchange-to-exchange binding")
    Judge(t.client, target, "EXCH-09").publish_refused(
        "publishing to an internal exchange", internal, "k", ReplyCode.ACCESS_REFUSED,
        f"ACCESS_REFUSED - cannot publish to internal exchange '{internal}' in vhost '{target.vhost}'")
    assert_reached(t.reached(), {"q": []}, "EXCH-09", "a publish to the internal exchange itself")


@pytest.mark.rules("EXCH-10")
def test_binding_needs_both_ends(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-10")
    x, q = t.exchange("x", "direct"), t.queue("q")
    missing_x, missing_q = names.exchange("missing"), names.queue("missing")
    judge.refused("binding a queue to a missing exchange", QueueBind(queue=q, exchange=missing_x, routing_key="k"),
                  QueueBindOk, ReplyCode.NOT_FOUND, f"NOT_FOUND - no exchange '{missing_x}' in vhost '{target.vhost}'")
    judge.refused("binding a missing queue", QueueBind(queue=missing_q, exchange=x, routing_key="k"),
                  QueueBindOk, ReplyCode.NOT_FOUND, f"NOT_FOUND - no queue '{missing_q}' in vhost '{target.vhost}'")
    if target.profile.supports("exchange_exchange_bindings"):
        for what, method in (("an exchange binding from a missing source", ExchangeBind(destination=x, source=missing_x)),
                             ("an exchange binding to a missing destination",
                              ExchangeBind(destination=missing_x, source=x))):
            judge.refused(what, method, ExchangeBindOk, ReplyCode.NOT_FOUND,
                          f"NOT_FOUND - no exchange '{missing_x}' in vhost '{target.vhost}'")


@pytest.mark.rules("EXCH-10")
def test_unbinding_a_missing_binding_succeeds(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-10")
    x, q = t.exchange("x", "direct"), t.queue("q")
    t.bind("q", "x", "k")  # keeps the auto-delete exchange
    missing_x, missing_q = names.exchange("missing"), names.queue("missing")
    cases: list[tuple[str, Method, type[Method]]] = [("unbinding a key that was never bound", QueueUnbind(queue=q, exchange=x, routing_key="other"),
              QueueUnbindOk),
             ("unbinding from a missing exchange", QueueUnbind(queue=q, exchange=missing_x, routing_key="k"),
              QueueUnbindOk),
             ("unbinding a missing queue", QueueUnbind(queue=missing_q, exchange=x, routing_key="k"), QueueUnbindOk)]
    if target.profile.supports("exchange_exchange_bindings"):
        cases += [("unbinding an exchange binding that does not exist",
                   ExchangeUnbind(destination="amq.fanout", source=x, routing_key="k"), ExchangeUnbindOk),
                  ("unbinding an exchange binding from a missing source",
                   ExchangeUnbind(destination=x, source=missing_x, routing_key="k"), ExchangeUnbindOk)]
    for what, method, reply in cases:
        if judge.pinned:
            judge.ok(what, method, reply)
    t.publish("x", "k", "after the unbinds")
    assert_reached(t.reached(), {"q": ["after the unbinds"]}, "EXCH-10",
                   "a publish after unbinds that named missing bindings (the real binding must stay)")


@pytest.mark.rules("EXCH-10")
def test_binding_twice_keeps_one_binding(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    x, q = t.exchange("x", "direct"), t.queue("q")
    t.queue("keeper")
    t.bind("keeper", "x", "keep")  # keeps the auto-delete exchange after the unbind
    t.bind("q", "x", "k")
    t.bind("q", "x", "k")
    Judge(t.client, target, "EXCH-10").ok("unbinding the route once", QueueUnbind(queue=q, exchange=x, routing_key="k"),
                                          QueueUnbindOk)
    t.publish("x", "k", "after one unbind")
    assert_reached(t.reached(), {"q": []}, "EXCH-10",
                   "a publish after the same route was bound twice and unbound once (one binding: none left)")
