"""Declaring exchanges (EXCH-01..05): equivalent and inequivalent redeclarations, passive
declares and the reserved amq. names (an unknown type: DCL-02).

A refused redeclaration is followed by a check that nothing changed: the exchange still routes
as it did (a bound queue still receives).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from codec import ExchangeDeclare, ExchangeDeclareOk, ExchangeDelete, ExchangeDeleteOk, ReplyCode
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.routing import assert_reached, topology
from conformance.suite.steps.topology import Judge, flag, inequivalent

Connect = Callable[..., RawClient]
SYSTEM = {"amq.direct": "direct", "amq.fanout": "fanout", "amq.topic": "topic", "amq.headers": "headers",
          "amq.match": "headers"}


def _declare(name: str, **fields: Any) -> ExchangeDeclare:
    base: dict[str, Any] = {"exchange": name, "exchange_type": "direct", "auto_delete": True}
    return ExchangeDeclare(**{**base, **fields})


@pytest.mark.rules("EXCH-01")
def test_an_equivalent_redeclaration_changes_nothing(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-01")
    ae = names.exchange("ae")
    x = t.exchange("x", "direct", {"alternate-exchange": ae, "x-foo": "a"})
    t.queue("q")
    t.bind("q", "x", "k")
    judge.ok("redeclaring the exchange as it is", _declare(x, arguments={"alternate-exchange": ae, "x-foo": "a"}),
             ExchangeDeclareOk)
    if judge.pinned:  # only alternate-exchange is compared: other arguments may differ, come or go
        for other in ({"x-foo": "b"}, {"x-bar": 1}, {}):
            judge.ok(f"redeclaring it with alternate-exchange and the other arguments {other}",
                     _declare(x, arguments={"alternate-exchange": ae, **other}), ExchangeDeclareOk)
    t.publish("x", "k", "after the redeclarations")
    assert_reached(t.reached(), {"q": ["after the redeclarations"]}, "EXCH-01",
                   "a publish after equivalent redeclarations (the binding must stay)")


INEQUIVALENT: dict[str, tuple[dict[str, Any], str, str, str]] = {  # what differs -> (the redeclaration's fields, the argument named, received, current)
    "type": ({"exchange_type": "fanout"}, "type", "'fanout'", "'direct'"),
    "durable": ({"durable": True}, "durable", flag(True), flag(False)),
    "auto_delete": ({"auto_delete": False}, "auto_delete", flag(False), flag(True)),
    "internal": ({"internal": True}, "internal", flag(True), flag(False)),
    "type and durable (type is named first)": ({"exchange_type": "topic", "durable": True}, "type", "'topic'",
                                               "'direct'"),
}


@pytest.mark.rules("EXCH-02")
@pytest.mark.parametrize("differs", list(INEQUIVALENT))
def test_an_inequivalent_redeclaration_is_refused(connect: Connect, names: Names, target: Target,
                                                  differs: str) -> None:
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-02")
    x = t.exchange("x", "direct")
    t.queue("q")
    t.bind("q", "x", "k")
    fields, arg, received, current = INEQUIVALENT[differs]
    text = (f"PRECONDITION_FAILED - inequivalent arg '{arg}' for exchange '{x}' in vhost '{target.vhost}': "
            f"received {received} but current is {current}")
    judge.refused(f"redeclaring a direct, transient, auto-delete exchange with another {differs}",
                  _declare(x, **fields), ExchangeDeclareOk, ReplyCode.PRECONDITION_FAILED, text)
    t.publish("x", "k", "after the refusal")
    assert_reached(t.reached(), {"q": ["after the refusal"]}, "EXCH-02",
                   "a publish after the refused redeclaration (the exchange must be unchanged)")


AE_CASES = {  # (declared, redeclared) alternate-exchange values
    "another alternate": ("ae1", "ae2"),
    "the alternate dropped": ("ae1", None),
    "an alternate added": (None, "ae1"),
}


@pytest.mark.rules("EXCH-03")
@pytest.mark.parametrize("case", list(AE_CASES))
def test_the_alternate_exchange_is_compared(connect: Connect, names: Names, target: Target, case: str) -> None:
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-03")
    declared, redeclared = AE_CASES[case]
    first = {"alternate-exchange": declared} if declared else {}
    x = t.exchange("x", "direct", first)
    again = {"alternate-exchange": redeclared} if redeclared else {}
    judge.refused(f"redeclaring an exchange declared with {first or 'no arguments'} with {again or 'no arguments'}",
                  _declare(x, arguments=again), ExchangeDeclareOk, ReplyCode.PRECONDITION_FAILED,
                  inequivalent("alternate-exchange", f"exchange '{x}' in vhost '{target.vhost}'", redeclared, declared))


@pytest.mark.rules("EXCH-04")
def test_a_passive_declare_checks_existence_only(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    judge = Judge(t.client, target, "EXCH-04")
    x = t.exchange("x", "direct")
    t.queue("q")
    t.bind("q", "x", "k")
    judge.ok("a passive declare of an existing direct exchange naming type fanout, durable and internal",
             ExchangeDeclare(exchange=x, exchange_type="fanout", durable=True, internal=True, passive=True),
             ExchangeDeclareOk)
    missing = names.exchange("missing")
    judge.refused("a passive declare of a missing exchange", ExchangeDeclare(exchange=missing, passive=True),
                  ExchangeDeclareOk, ReplyCode.NOT_FOUND,
                  f"NOT_FOUND - no exchange '{missing}' in vhost '{target.vhost}'")
    reserved = f"amq.{missing}"
    judge.refused("a passive declare of a missing amq. exchange", ExchangeDeclare(exchange=reserved, passive=True),
                  ExchangeDeclareOk, ReplyCode.NOT_FOUND,
                  f"NOT_FOUND - no exchange '{reserved}' in vhost '{target.vhost}'")
    t.publish("x", "k", "after the passive declares")
    assert_reached(t.reached(), {"q": ["after the passive declares"]}, "EXCH-04",
                   "a publish after the passive declares (the exchange must be unchanged)")


@pytest.mark.rules("EXCH-05")
def test_the_amq_names_are_reserved(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    judge = Judge(client, target, "EXCH-05")
    reserved = f"amq.{names.exchange('new')}"
    judge.refused("declaring a new exchange named amq.*", _declare(reserved), ExchangeDeclareOk,
                  ReplyCode.ACCESS_REFUSED, f"ACCESS_REFUSED - exchange name '{reserved}' contains reserved prefix 'amq.*'")
    if not judge.pinned:
        return
    for name, kind in SYSTEM.items():
        judge.ok(f"redeclaring the predeclared {name} as a durable {kind} exchange",
                 ExchangeDeclare(exchange=name, exchange_type=kind, durable=True), ExchangeDeclareOk)
    judge.refused("deleting amq.direct", ExchangeDelete(exchange="amq.direct"), ExchangeDeleteOk,
                  ReplyCode.ACCESS_REFUSED,
                  f"ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '{target.vhost}' not allowed")
    if not Judge(connect(), target, "EXCH-05").exchange_exists("amq.direct"):
        raise AssertionError("EXCH-05: amq.direct no longer exists after its refused deletion")
