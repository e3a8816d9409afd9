"""A policy's alternate-exchange on the exchanges it matches (POL-04).

Rules:
- Each test's exchanges and queues are its own; its policy matches exactly its fanout exchange,
  which has no binding, so every message published to it is unroutable there and goes to the
  alternate exchange (if any), a fanout bound to a queue the test reads.
- A policy set before the exchange's declaration is in the exchange from the start. A policy
  deleted from a live exchange leaves it asynchronously: each look publishes one more message and
  reads the alternate's queue, until nothing arrives or `APPLIED` s (scaled) passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from codec import (
    BasicProperties,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueBind,
    QueueBindOk,
    QueuePurge,
    QueuePurgeOk,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.deadletter import landed
from conformance.suite.steps.queues import Publisher, declare, prompt, ready
from conformance.suite.steps.timeouts import exact

Connect = Callable[..., RawClient]
APPLIED = 5.0  # s (scaled): a policy deleted from a live exchange leaves it


def fanout(client: RawClient, ch: int, name: str, arguments: dict[str, str] | None = None) -> str:
    client.rpc(ch, ExchangeDeclare(exchange=name, exchange_type="fanout", arguments=arguments or {}),
               ExchangeDeclareOk)
    return name


def alternate(client: RawClient, ch: int, names: Names, label: str) -> tuple[str, str]:
    """A fanout exchange with a queue bound to it: (exchange, queue)."""
    exchange, queue = fanout(client, ch, names.exchange(label)), declare(client, ch, names.queue(label))
    client.rpc(ch, QueueBind(queue=queue, exchange=exchange), QueueBindOk)
    return exchange, queue


@pytest.mark.rules("POL-04")
def test_a_policy_gives_an_exchange_its_alternate_until_deleted(connect: Connect, names: Names, target: Target,
                                                                admin: RestoringAdmin) -> None:
    client = connect()
    ch = client.channel()
    publisher = Publisher(client)
    ae, ae_queue = alternate(client, ch, names, "ae")
    has_ae = names.exchange("has-ae")
    name = f"{has_ae}.ae"
    admin.put_policy(target.vhost, name, exact(has_ae), {"alternate-exchange": ae}, "exchanges", 0)
    fanout(client, ch, has_ae)
    publisher.publish("", [b"under the policy"], BasicProperties(), exchange=has_ae)
    got = landed(client, ch, ae_queue, prompt(client))
    assert got is not None and got.body == b"under the policy", (
        f"POL-04: the fanout {has_ae!r} has no binding and a policy (apply-to exchanges) alternate-exchange {ae!r}: "
        f"a message published to it goes to {ae!r} and its queue {ae_queue!r}; nothing arrived there")
    admin.delete_policy(target.vhost, name)
    deadline = time.monotonic() + target.timeout(APPLIED)
    while True:
        publisher.publish("", [b"after the policy"], BasicProperties(), exchange=has_ae)
        count = ready(client, ch, ae_queue)
        if count == 0 or time.monotonic() > deadline:
            break
        client.rpc(ch, QueuePurge(queue=ae_queue), QueuePurgeOk)
    assert count == 0, (
        f"POL-04: once the policy is deleted, {has_ae!r} has no alternate exchange: an unroutable message is "
        f"dropped; {target.timeout(APPLIED):.0f} s later {ae_queue!r} still received one")


@pytest.mark.rules("POL-04")
def test_the_exchanges_own_alternate_wins_over_the_policy(connect: Connect, names: Names, target: Target,
                                                          admin: RestoringAdmin) -> None:
    client = connect()
    ch = client.channel()
    (by_policy, policy_queue), (by_argument, argument_queue) = (alternate(client, ch, names, "ae"),
                                                                 alternate(client, ch, names, "ae2"))
    has_ae = names.exchange("has-ae")
    admin.put_policy(target.vhost, f"{has_ae}.ae", exact(has_ae), {"alternate-exchange": by_policy}, "exchanges", 0)
    fanout(client, ch, has_ae, {"alternate-exchange": by_argument})
    Publisher(client).publish("", [b"m"], BasicProperties(), exchange=has_ae)
    got = landed(client, ch, argument_queue, prompt(client))
    astray = ready(client, ch, policy_queue)
    assert got is not None and astray == 0, (
        f"POL-04: the fanout {has_ae!r} (no binding) has the argument alternate-exchange {by_argument!r} and a policy "
        f"alternate-exchange {by_policy!r}: the argument wins, so the message goes to {argument_queue!r}; "
        f"{'it arrived' if got is not None else 'nothing arrived there'}, and {policy_queue!r} counts {astray}")
