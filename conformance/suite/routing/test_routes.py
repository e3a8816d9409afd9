"""Routes through several exchanges and what becomes of unroutable messages: exchange-to-exchange
bindings (ROUTE-09), one copy per queue (ROUTE-10), mandatory returns (ROUTE-11) and alternate
exchanges (ROUTE-12).

A return is looked for after the round trips that drain the queues: a broker sends basic.return
before it answers the channel's next request, so no extra wait is needed to see one, and none to
see that none came.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import BasicReturn, ExchangeUnbind, ExchangeUnbindOk, ReplyCode
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_claimed
from conformance.suite.steps.routing import Topology, assert_reached, topology

Connect = Callable[..., RawClient]


@pytest.mark.rules("ROUTE-09")
def test_exchange_to_exchange_bindings_route_on(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    t.exchange("entry", "direct")
    t.exchange("middle", "topic")
    t.exchange("last", "fanout")
    t.queue("via middle")
    t.queue("via last")
    t.bind_exchange("middle", "entry", "k1")  # entry --k1--> middle --a.#--> queue
    t.bind("via middle", "middle", "k1")
    t.bind_exchange("last", "middle", "#")  # middle --#--> last --> queue
    t.bind("via last", "last")
    t.bind_exchange("entry", "last")  # a cycle back to entry: followed once, no loop
    t.bind("via middle", "entry", "keep")  # keeps the auto-delete entry after the unbind below
    t.publish("entry", "k1", "k1")
    t.publish("entry", "k2", "k2")  # entry routes it nowhere
    t.publish("middle", "k2", "k2 to middle")
    t.rpc(ExchangeUnbind(destination=t.exchanges["middle"], source=t.exchanges["entry"], routing_key="k1"),
          ExchangeUnbindOk)
    t.publish("entry", "k1", "k1 after unbind")
    want = {"via middle": ["k1"], "via last": ["k1", "k2 to middle"]}
    assert_reached(t.reached(), want, "ROUTE-09", "publishes through exchange-to-exchange bindings "
                   "(entry -k1-> middle (topic) -#-> last (fanout) -> entry; the queues on middle with key k1 and on last)")


@pytest.mark.rules("ROUTE-10")
def test_one_copy_per_queue(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    t.exchange("t", "topic")
    t.queue("bound twice")
    t.queue("bound once")
    t.bind("bound twice", "t", "a.*")
    t.bind("bound twice", "t", "*.b")
    t.bind("bound once", "t", "#")
    t.publish("t", "a.b", "both bindings match")
    t.publish("t", "a.c", "one binding matches")
    t.exchange("h", "headers")
    t.bind("bound twice", "h", "", {"x-match": "any", "a": 1})
    t.bind("bound twice", "h", "", {"x-match": "all", "b": 2})
    t.publish("h", "", "two header bindings match", headers={"a": 1, "b": 2})
    want = {"bound twice": ["both bindings match", "one binding matches", "two header bindings match"],
            "bound once": ["both bindings match", "one binding matches"]}
    assert_reached(t.reached(), want, "ROUTE-10", "publishes matching several bindings of one queue")


@pytest.mark.rules("ROUTE-10")
def test_one_copy_through_two_exchanges(connect: Connect, names: Names, target: Target) -> None:
    if not target.profile.supports("exchange_exchange_bindings"):
        not_claimed("the broker does not claim exchange_exchange_bindings; test_one_copy_per_queue judges ROUTE-10")
    t = topology(connect, names, target)
    t.exchange("entry", "fanout")
    t.exchange("inner", "fanout")
    t.queue("on both")
    t.bind_exchange("inner", "entry")
    t.bind("on both", "entry")
    t.bind("on both", "inner")
    t.publish("entry", "", "reached twice")
    assert_reached(t.reached(), {"on both": ["reached twice"]}, "ROUTE-10",
                   "a publish reaching one queue directly and through a second exchange")


def _returns(t: Topology) -> dict[str, tuple[int, str, str, str]]:
    return {c.body.decode(): (c.method.reply_code, c.method.reply_text, c.method.exchange, c.method.routing_key)
            for c in t.client.pending(t.ch) if isinstance(c.method, BasicReturn)}


@pytest.mark.rules("ROUTE-11")
def test_unroutable_mandatory_publish_is_returned(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    x = t.exchange("x", "direct")
    t.queue("q")
    t.bind("q", "x", "bound")
    t.publish("x", "unbound", "mandatory, no route", mandatory=True)
    t.publish("x", "unbound", "no route, not mandatory")
    t.publish("x", "bound", "mandatory, routed", mandatory=True)
    t.publish("", f"{x}.no-such-queue", "mandatory, no such queue", mandatory=True)
    assert_reached(t.reached(), {"q": ["mandatory, routed"]}, "ROUTE-11", "publishes with and without routes")
    text = "NO_ROUTE" if target.profile.expect("ROUTE-11") == "required" else None
    got = {body: (code, text or reply_text, exchange, key) for body, (code, reply_text, exchange, key) in _returns(t).items()}
    want = {"mandatory, no route": (ReplyCode.NO_ROUTE, text, x, "unbound"),
            "mandatory, no such queue": (ReplyCode.NO_ROUTE, text, "", f"{x}.no-such-queue")}
    if text is None:
        want = {body: (code, got.get(body, (0, None))[1], exchange, key) for body, (code, _, exchange, key) in want.items()}
    assert got == want, ("ROUTE-11: exactly the unroutable mandatory publishes come back as basic.return "
                         f"(reply-code, reply-text, exchange, routing-key) {want}; the broker returned {got}")


@pytest.mark.rules("ROUTE-12")
def test_alternate_exchange_takes_the_unroutable(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    alternate = t.exchange("alternate", "fanout")
    t.exchange("second alternate", "fanout")
    t.exchange("x", "direct", {"alternate-exchange": alternate})
    t.exchange("alternate of alternate", "direct", {"alternate-exchange": t.exchanges["second alternate"]})
    t.exchange("no such alternate", "direct", {"alternate-exchange": f"{alternate}.missing"})
    for label in ("routed", "alternate", "second alternate"):
        t.queue(label)
    t.bind("routed", "x", "bound")
    t.bind("alternate", "alternate")
    t.bind("second alternate", "second alternate")
    t.publish("x", "bound", "routed by x", mandatory=True)
    t.publish("x", "unbound", "unroutable at x", mandatory=True)
    t.publish("alternate of alternate", "k", "to the alternate's alternate", mandatory=True)
    t.publish("no such alternate", "k", "missing alternate", mandatory=True)
    want = {"routed": ["routed by x"], "alternate": ["unroutable at x"],
            "second alternate": ["to the alternate's alternate"]}
    assert_reached(t.reached(), want, "ROUTE-12", "publishes to exchanges with an alternate-exchange argument")
    returned = sorted(_returns(t))
    assert returned == ["missing alternate"], (
        "ROUTE-12: a message taken by an alternate exchange is not returned, one whose alternate does not "
        f"exist is (312); the broker returned {returned}")
