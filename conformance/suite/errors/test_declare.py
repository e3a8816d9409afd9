"""Declarations RULES.md gives no code for (DCL-01, DCL-02): a queue redeclared with another
exclusive owner, an exchange declared with a type the broker does not know.

Each case runs on a fresh channel; the reply code, its scope (channel or connection), the text
and the class/method ids are judged, the scope and code by the profile's expectation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from codec import ExchangeDeclare, ExchangeDeclareOk, QueueDeclare, QueueDeclareOk
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import ChannelClosed, ConnectionClosed, RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.replies import assert_text, refused

Connect = Callable[..., RawClient]


def locked_text(queue: str, target: Target) -> str:
    return (f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}' in vhost "
            f"'{target.vhost}'. It could be originally declared on another connection or the exclusive "
            "property value does not match that of the original declaration.")


# -- DCL-01 ----------------------------------------------------------------------------------
REDECLARES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "exclusive-as-shared": ({"exclusive": True}, {"exclusive": False}),
    "exclusive-as-shared-and-durable": ({"exclusive": True}, {"exclusive": False, "durable": True}),
    "shared-as-exclusive": ({"auto_delete": True}, {"exclusive": True, "auto_delete": True}),
}


@pytest.mark.rules("DCL-01")
@pytest.mark.clauses("DCL-01.a", "DCL-01.b", "DCL-01.d", "DCL-01.e")
@pytest.mark.parametrize("case", list(REDECLARES))
def test_the_owner_changing_the_exclusive_flag_is_405(connect: Connect, names: Names, target: Target,
                                                      case: str) -> None:
    first, second = REDECLARES[case]
    client = connect()
    queue = names.queue("excl")
    client.rpc(client.channel(), QueueDeclare(queue=queue, **first), QueueDeclareOk)
    closed = refused(client, client.channel(), QueueDeclare(queue=queue, **second), QueueDeclareOk, target)
    assert isinstance(closed, ChannelClosed), f"a channel error was expected: {closed}"
    if not target.profile.rabbitmq and closed.code == ReplyCode.PRECONDITION_FAILED:
        return  # the plain spec's variant: the flag's own inequivalence
    assert (closed.code, closed.class_id, closed.method_id) == (ReplyCode.RESOURCE_LOCKED, *METHOD_IDS["queue.declare"]), closed
    assert_text(target, closed, locked_text(queue, target))  # as ERR-01 limits it
    if not first.get("exclusive"):
        client.rpc(client.channel(), QueueDeclare(queue=queue, passive=True), QueueDeclareOk)


@pytest.mark.rules("DCL-01")
@pytest.mark.clauses("DCL-01.c", "DCL-01.d", "DCL-01.f")
def test_another_connections_exclusive_queue_is_405_and_a_passive_owner_declare_is_fine(
        connect: Connect, names: Names, target: Target) -> None:
    owner, other = connect(), connect()
    queue = names.queue("excl")
    client_ch = owner.channel()
    owner.rpc(client_ch, QueueDeclare(queue=queue, exclusive=True), QueueDeclareOk)
    owner.rpc(owner.channel(), QueueDeclare(queue=queue, passive=True), QueueDeclareOk)  # lax: no flag check
    closed = refused(other, other.channel(), QueueDeclare(queue=queue, exclusive=True), QueueDeclareOk, target)
    assert isinstance(closed, ChannelClosed) and closed.code == ReplyCode.RESOURCE_LOCKED, closed
    assert_text(target, closed, locked_text(queue, target))  # as ERR-01 limits it


# -- DCL-02 ----------------------------------------------------------------------------------
@pytest.mark.rules("DCL-02")
@pytest.mark.clauses("DCL-02.a", "DCL-02.b")
@pytest.mark.parametrize("existing", [False, True], ids=["new-name", "existing-exchange"])
def test_an_unknown_exchange_type(connect: Connect, names: Names, target: Target, existing: bool) -> None:
    client = connect()
    exchange = names.exchange("typed")
    if existing:  # the type is checked before the lookup: an existing exchange changes nothing
        client.rpc(client.channel(), ExchangeDeclare(exchange=exchange, exchange_type="fanout"), ExchangeDeclareOk)
    kind = "amqpc-no-such-type"
    closed = refused(client, client.channel(), ExchangeDeclare(exchange=exchange, exchange_type=kind),
                     ExchangeDeclareOk, target)
    expect = target.profile.expect("DCL-02")
    channel_406: tuple[type[Exception], int, str] = (ChannelClosed, ReplyCode.PRECONDITION_FAILED, f"PRECONDITION_FAILED - unknown exchange type '{kind}'")
    connection_503: tuple[type[Exception], int, str] = (ConnectionClosed, ReplyCode.COMMAND_INVALID, f"COMMAND_INVALID - unknown exchange type '{kind}'")
    allowed = [channel_406]
    if target.profile.name == "rabbitmq-3.12":
        allowed.append(connection_503)  # 3.12.x to 3.13.2
    elif expect.startswith("variant:"):
        allowed = [connection_503]
    got = (type(closed), closed.code, closed.text if target.profile.rabbitmq else None)
    wanted = [(scope, code, text if target.profile.rabbitmq else None) for scope, code, text in allowed]
    if got not in wanted:
        raise AssertionError(f"got {type(closed).__name__} {closed.code} {closed.text!r}; expected ({expect}): "
                             + " or ".join(f"{scope.__name__} {code}{f' {text!r}' if text else ''}"
                                           for scope, code, text in wanted))
    assert (closed.class_id, closed.method_id) == METHOD_IDS["exchange.declare"], closed
