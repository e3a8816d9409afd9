"""Where a rejected or expired message goes, and what it carries there (DLX-01, DLX-02).

Rules:
- Each test builds its source queue with x-dead-letter-exchange and a target queue bound so that
  the dead-lettered message can only land there, publishes with a confirm (a quorum queue holds
  the message only once a majority wrote it), then looks with basic.get (waiting, bounded, for the
  dead-lettering, which the source queue does after its own reply).
- Values the broker's clock or its version set are checked by type (x-death `time` is a timestamp),
  not by value; the redelivered flag of a dead-lettered message is not judged (4.3.6 sets it after
  a basic.get and a reject, 3.10.8 and 4.0.5 do not).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest

from codec import (
    BasicProperties,
    BasicReject,
    Command,
    QueueBind,
    QueueBindOk,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.deadletter import KINDS, die, expiration, get_ok, headers_of, landed
from conformance.suite.steps.queues import Publisher, declare, prompt, require_kind

Connect = Callable[..., RawClient]
HOW = ["reject", "nack", "expired"]


def source(client: RawClient, ch: int, names: Names, kind: str, arguments: dict[str, Any]) -> str:
    return declare(client, ch, names.queue(f"src-{kind}"), kind, arguments)


def dead_lettered(connect: Connect, names: Names, target: Target, kind: str, how: str,
                  properties: BasicProperties) -> tuple[str, str, Command | None]:
    """A `kind` queue dead-lettering through '' to a classic queue by x-dead-letter-routing-key; one
    message published to it (`properties`) and made to die `how`: (source, target, what landed)."""
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    dlq = declare(client, ch, names.queue("dlq"))
    src = source(client, ch, names, kind, {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    Publisher(client).publish(src, [b"m"], properties)
    die(client, ch, src, how)
    return src, dlq, landed(client, ch, dlq, prompt(client) + 0.1)


def expect_reason(how: str) -> str:
    return "expired" if how == "expired" else "rejected"


@pytest.mark.rules("DLX-01")
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("kind", KINDS)
def test_the_dead_letter_routing_key_routes_it(connect: Connect, names: Names, target: Target, kind: str,
                                              how: str) -> None:
    _src, dlq, got = dead_lettered(connect, names, target, kind, how, BasicProperties(expiration=expiration(how)))
    assert got is not None, (f"DLX-01: a message {expect_reason(how)} from a {kind} queue with x-dead-letter-exchange "
                             f"'' and x-dead-letter-routing-key {dlq!r} goes to {dlq!r}; nothing arrived there")
    assert (got.body, get_ok(got).exchange, get_ok(got).routing_key) == (b"m", "", dlq), (
        f"DLX-01: delivered from the dead-letter exchange '' with the key {dlq!r}; got {got.method}")


@pytest.mark.rules("DLX-01")
@pytest.mark.parametrize("kind", KINDS)
def test_without_a_dead_letter_routing_key_its_own_key_routes_it(connect: Connect, names: Names, target: Target,
                                                                kind: str) -> None:
    """Through amq.direct: the target queue is bound with the source queue's name, the key the
    message was published with; delivered with exchange amq.direct and that key."""
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    dlq = declare(client, ch, names.queue("dlq"))
    src = source(client, ch, names, kind, {"x-dead-letter-exchange": "amq.direct"})
    client.rpc(ch, QueueBind(queue=dlq, exchange="amq.direct", routing_key=src), QueueBindOk)
    Publisher(client).publish(src, [b"m"], BasicProperties())
    die(client, ch, src, "reject")
    reply = landed(client, ch, dlq, prompt(client) + 0.1)
    assert reply is not None, (
        f"DLX-01: a message rejected from {src!r} (x-dead-letter-exchange amq.direct, no routing key) is routed "
        f"with its own routing key {src!r} to {dlq!r}, bound with it; nothing arrived there")
    assert (get_ok(reply).exchange, get_ok(reply).routing_key) == ("amq.direct", src), (
        f"DLX-01: delivered from the dead-letter exchange with the key it was routed by; got exchange "
        f"{get_ok(reply).exchange!r}, routing key {get_ok(reply).routing_key!r}")


@pytest.mark.rules("DLX-02")
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("kind", KINDS)
def test_x_death_records_the_death(connect: Connect, names: Names, target: Target, kind: str, how: str) -> None:
    src, dlq, got = dead_lettered(connect, names, target, kind, how,
                                  BasicProperties(expiration=expiration(how), headers={"app": "kept"}))
    assert got is not None, f"DLX-02: the dead-lettered message never reached {dlq!r} (DLX-01)"
    headers = headers_of(got)
    deaths = headers.get("x-death")
    reason = expect_reason(how)
    assert isinstance(deaths, list) and len(deaths) == 1 and isinstance(deaths[0], dict), (
        f"DLX-02: a message dead-lettered once carries x-death with one table; headers: {headers}")
    death = deaths[0]
    want = {"count": 1, "reason": reason, "queue": src, "exchange": "", "routing-keys": [src],
            "original-expiration": expiration(how)}
    have = {k: death.get(k) for k in want}
    assert have == want, f"DLX-02: the x-death entry of a message {reason} from {src!r}: {death}"
    assert isinstance(death.get("time"), datetime.datetime), (
        f"DLX-02: x-death time is a timestamp; got {death.get('time')!r}")
    assert headers.get("app") == "kept", f"DLX-02: the message's own headers stay; headers: {headers}"
    first = {k: headers.get(f"x-first-death-{k}") for k in ("reason", "queue", "exchange")}
    assert first == {"reason": reason, "queue": src, "exchange": ""}, f"DLX-02: x-first-death-*: {headers}"
    last = {k: headers.get(f"x-last-death-{k}") for k in ("reason", "queue", "exchange")}
    if target.profile.expect("DLX-02").startswith("variant:"):
        assert last == dict.fromkeys(last), f"DLX-02: no x-last-death-* before 3.13 ({target.profile.name}): {headers}"
    else:
        assert last == first, f"DLX-02: x-last-death-* name the latest death: {headers}"


@pytest.mark.rules("DLX-02")
@pytest.mark.parametrize("kind", KINDS)
def test_a_dead_lettered_message_loses_its_expiration(connect: Connect, names: Names, target: Target,
                                                      kind: str) -> None:
    _src, dlq, reply = dead_lettered(connect, names, target, kind, "reject", BasicProperties(expiration="60000"))
    assert reply is not None, f"DLX-02: the rejected message never reached {dlq!r} (DLX-01)"
    expiration = reply.properties.expiration if reply.properties else None
    assert expiration is None, (f"DLX-02: a dead-lettered message no longer carries its expiration (it is kept as "
                                f"x-death original-expiration); it arrived with expiration {expiration!r}")


@pytest.mark.rules("DLX-02")
@pytest.mark.parametrize("kind", KINDS)
def test_dying_again_in_the_same_queue_counts_in_its_entry(connect: Connect, names: Names, target: Target,
                                                            kind: str) -> None:
    """a → b → a, each time rejected: x-death is [a: count 2, b: count 1], newest first."""
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    a, b = names.queue(f"a-{kind}"), names.queue(f"b-{kind}")
    declare(client, ch, a, kind, {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b})
    declare(client, ch, b, kind, {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": a})
    Publisher(client).publish(a, [b"m"], BasicProperties())
    for queue in (a, b, a):
        got = landed(client, ch, queue, prompt(client) + 0.1, no_ack=False)
        assert got is not None, f"DLX-02: the message never reached {queue!r} (DLX-01)"
        client.send(ch, BasicReject(delivery_tag=get_ok(got).delivery_tag, requeue=False))
    final = landed(client, ch, b, prompt(client) + 0.1)
    assert final is not None, f"DLX-02: the message never reached {b!r} the second time (DLX-01)"
    deaths = [{k: d.get(k) for k in ("queue", "reason", "count")} for d in headers_of(final).get("x-death", [])]
    assert deaths == [{"queue": a, "reason": "rejected", "count": 2}, {"queue": b, "reason": "rejected", "count": 1}], (
        f"DLX-02: after dying in {a!r}, {b!r} and {a!r} again, x-death has one entry per queue and reason, "
        f"the latest first, {a!r} counted twice; got {deaths}")
