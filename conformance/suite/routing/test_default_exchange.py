"""The default exchange (ROUTE-01, ROUTE-02): it routes by queue name and nothing can change it.

Every operation naming "" other than a publish is refused; the close is compared by code,
class/method id and text (on the plain 0-9-1 profile, ROUTE-02's variant: only that a channel
error refuses it).
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
    QueueUnbind,
    QueueUnbindOk,
    ReplyCode,
)
from conformance.drivers.raw import ChannelClosed, NoReply, RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_claimed
from conformance.suite.steps.replies import refused
from conformance.suite.steps.routing import assert_reached, topology

Connect = Callable[..., RawClient]
REFUSED = "ACCESS_REFUSED - operation not permitted on the default exchange"


@pytest.mark.rules("ROUTE-01")
def test_default_exchange_routes_by_queue_name(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    first, second = t.queue("first"), t.queue("second")
    t.publish("", first, "to-first")
    t.publish("", second, "to-second")
    t.publish("", first.upper(), "to-nobody")  # names compare exactly
    t.publish("", f"{first}.x", "to-nobody-either")
    assert_reached(t.reached(), {"first": ["to-first"], "second": ["to-second"]}, "ROUTE-01",
                   "publishes to the default exchange (routing key = queue name)")


def _operations(queue: str, exchange: str) -> dict[str, tuple[Method, type[Method]]]:
    return {
        "exchange.declare": (ExchangeDeclare(exchange="", exchange_type="direct"), ExchangeDeclareOk),
        "exchange.declare passive": (ExchangeDeclare(exchange="", exchange_type="direct", passive=True),
                                     ExchangeDeclareOk),
        "exchange.delete": (ExchangeDelete(exchange=""), ExchangeDeleteOk),
        "queue.bind": (QueueBind(queue=queue, exchange="", routing_key="k"), QueueBindOk),
        "queue.unbind of its implicit binding": (QueueUnbind(queue=queue, exchange="", routing_key=queue),
                                                 QueueUnbindOk),
        "exchange.bind from it": (ExchangeBind(destination=exchange, source="", routing_key="k"), ExchangeBindOk),
        "exchange.bind to it": (ExchangeBind(destination="", source=exchange, routing_key="k"), ExchangeBindOk),
        "exchange.unbind from it": (ExchangeUnbind(destination=exchange, source="", routing_key="k"),
                                    ExchangeUnbindOk),
    }


@pytest.mark.rules("ROUTE-02")
@pytest.mark.parametrize("operation", list(_operations("q", "x")))
def test_default_exchange_cannot_be_changed(connect: Connect, names: Names, target: Target, operation: str) -> None:
    if operation.startswith(("exchange.bind", "exchange.unbind")) and not target.profile.supports(
            "exchange_exchange_bindings"):
        not_claimed(f"{operation} needs exchange_exchange_bindings, which the broker does not claim")
    t = topology(connect, names, target)
    queue, exchange = t.queue("q"), t.exchange("x", "direct")
    method, ok = _operations(queue, exchange)[operation]
    try:
        closed = refused(t.client, t.client.channel(), method, ok, target)
    except NoReply as exc:
        raise AssertionError(f"ROUTE-02: {operation} on the default exchange must be refused with channel.close "
                             f"403; the broker answered nothing: {exc}") from None
    except AssertionError:
        raise AssertionError(f"ROUTE-02: {operation} on the default exchange must be refused with channel.close "
                             f"403; the broker answered {ok.NAME}, as if it had done it") from None
    pinned = target.profile.expect("ROUTE-02") == "required"
    assert isinstance(closed, ChannelClosed) or not pinned, (
        f"ROUTE-02: {operation} on the default exchange must close the channel, the broker closed "
        f"the connection: {closed}")
    if pinned:
        want = (ReplyCode.ACCESS_REFUSED, REFUSED, method.CLASS_ID, method.METHOD_ID)
        have = (closed.code, closed.text, closed.class_id, closed.method_id)
        assert have == want, (f"ROUTE-02: {operation} on the default exchange must be refused with "
                              f"channel.close {want}; the broker sent {have}")
    t.publish("", queue, "still-routed")  # refused, the implicit binding is still there
    assert_reached(t.reached(), {"q": ["still-routed"]}, "ROUTE-01", "a publish after the refused operation")
