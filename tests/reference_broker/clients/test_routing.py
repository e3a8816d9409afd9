"""Exchanges, routing and exclusive queues through pika and py-amqp."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import amqp
import pika
import pytest
from amqp import exceptions as amqp_exc
from pika import exceptions as pika_exc

from reference_broker.server import EmbeddedBroker
from tests.reference_broker.clients.support import (
    QueueState,
    queue_state,
)

pytestmark = pytest.mark.timeout(30)


# ===============================================================================================
# Exchanges and routing
# ===============================================================================================
# case: exchange type, bindings (queue label, binding key, arguments), publishes (routing key,
# headers, the queue labels that must receive it)
ROUTING_CASES: dict[str, tuple[str, list[tuple[str, str, dict[str, Any] | None]],
                               list[tuple[str, dict[str, Any] | None, set[str]]]]] = {
    "direct": ("direct",
               [("a", "black", None), ("b", "green", None), ("c", "green", None)],
               [("black", None, {"a"}), ("green", None, {"b", "c"}), ("red", None, set())]),
    "fanout": ("fanout",
               [("a", "", None), ("b", "ignored", None)],
               [("anything", None, {"a", "b"}), ("", None, {"a", "b"})]),
    "topic": ("topic",
              [("a", "*.orange.*", None), ("b", "*.*.rabbit", None), ("b", "lazy.#", None),
               ("c", "#", None)],
              [("quick.orange.rabbit", None, {"a", "b", "c"}),
               ("lazy.orange.elephant", None, {"a", "b", "c"}),
               ("quick.orange.fox", None, {"a", "c"}),
               ("lazy.brown.fox", None, {"b", "c"}),
               ("lazy.pink.rabbit", None, {"b", "c"}),  # two bindings of b match: one copy
               ("lazy", None, {"b", "c"}),
               ("quick.brown.fox", None, {"c"}),
               ("quick.orange.male.rabbit", None, {"c"}),
               ("", None, {"c"})]),
    "headers": ("headers",
                [("all", "", {"x-match": "all", "format": "pdf", "type": "report"}),
                 ("any", "", {"x-match": "any", "format": "pdf", "type": "log"}),
                 ("none", "", {})],
                [("", {"format": "pdf", "type": "report"}, {"all", "any", "none"}),
                 ("", {"format": "zip", "type": "log"}, {"any", "none"}),
                 ("", {"format": "zip", "type": "report"}, {"none"}),
                 ("", {"format": "pdf"}, {"any", "none"}),
                 ("ignored", None, {"none"})]),
}


@pytest.mark.parametrize("case", list(ROUTING_CASES))
def test_pika_exchange_routing(pika_connect: Callable[[], pika.BlockingConnection],
                               unique_name: Callable[..., str], case: str) -> None:
    kind, bindings, publishes = ROUTING_CASES[case]
    conn = pika_connect()
    ch = conn.channel()
    exchange = unique_name(f"x-{kind}")
    ch.exchange_declare(exchange, kind, auto_delete=False)
    queues = {label: unique_name(f"q-{label}") for label, _key, _args in bindings}
    for name in queues.values():
        ch.queue_declare(name)
    for label, key, args in bindings:
        ch.queue_bind(queues[label], exchange, routing_key=key, arguments=args)
    expected: dict[str, list[bytes]] = {label: [] for label in queues}
    for i, (routing_key, headers, targets) in enumerate(publishes):
        body = f"{i}:{routing_key}".encode()
        ch.basic_publish(exchange, routing_key, body, pika.BasicProperties(headers=headers))
        for label in targets:
            expected[label].append(body)
    received: dict[str, list[bytes]] = {}
    for label, name in queues.items():
        received[label] = []
        while True:
            method, _props, body = ch.basic_get(name, auto_ack=True)
            if method is None:
                break
            received[label].append(body)
    assert received == expected


def test_pika_exchange_to_exchange_binding(pika_connect: Callable[[], pika.BlockingConnection],
                                           unique_name: Callable[..., str]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    source, middle = unique_name("x-src"), unique_name("x-mid")
    ch.exchange_declare(source, "topic")
    ch.exchange_declare(middle, "fanout")
    ch.exchange_bind(destination=middle, source=source, routing_key="orders.*")
    queue = unique_name()
    ch.queue_declare(queue)
    ch.queue_bind(queue, middle)
    ch.basic_publish(source, "orders.new", b"routed")
    ch.basic_publish(source, "invoices.new", b"not-routed")
    ch.basic_publish(middle, "whatever", b"direct-to-middle")
    bodies = []
    while (got := ch.basic_get(queue, auto_ack=True))[0] is not None:
        bodies.append(got[2])
    assert bodies == [b"routed", b"direct-to-middle"]
    ch.exchange_unbind(destination=middle, source=source, routing_key="orders.*")
    ch.basic_publish(source, "orders.new", b"after-unbind")
    assert ch.basic_get(queue, auto_ack=True) == (None, None, None)


def test_pika_exchange_redeclare_other_type_406(pika_connect: Callable[[], pika.BlockingConnection],
                                                unique_name: Callable[..., str]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    exchange = unique_name("x")
    ch.exchange_declare(exchange, "direct")
    ch.exchange_declare(exchange, "direct")  # equivalent: fine
    with pytest.raises(pika_exc.ChannelClosedByBroker) as info:
        ch.exchange_declare(exchange, "fanout")
    assert info.value.reply_code == 406
    assert info.value.reply_text == (f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange "
                                     f"'{exchange}' in vhost '/': received 'fanout' but current is 'direct'")
    assert conn.is_open
    conn.channel().exchange_declare(exchange, "direct", passive=True)  # unchanged and still there


# ===============================================================================================
# Exclusive queues
# ===============================================================================================
EXCLUSIVE_OPERATIONS: dict[str, Callable[[Any, str], Any]] = {
    "declare": lambda ch, q: ch.queue_declare(q),
    "declare-passive": lambda ch, q: ch.queue_declare(q, passive=True),
    "consume": lambda ch, q: ch.basic_consume(q, lambda *_a: None),
    "get": lambda ch, q: ch.basic_get(q),
    "purge": lambda ch, q: ch.queue_purge(q),
    "delete": lambda ch, q: ch.queue_delete(q),
    "bind": lambda ch, q: ch.queue_bind(q, "amq.direct", routing_key="k"),
}


@pytest.mark.parametrize("operation", list(EXCLUSIVE_OPERATIONS))
def test_pika_exclusive_queue_locked_for_other_connection(
        broker: EmbeddedBroker, pika_connect: Callable[[], pika.BlockingConnection],
        unique_name: Callable[..., str], operation: str) -> None:
    owner = pika_connect().channel()
    queue = unique_name()
    owner.queue_declare(queue, exclusive=True)
    owner.basic_publish("", queue, b"mine")
    other_conn = pika_connect()
    with pytest.raises(pika_exc.ChannelClosedByBroker) as info:
        EXCLUSIVE_OPERATIONS[operation](other_conn.channel(), queue)
    assert info.value.reply_code == 405
    assert info.value.reply_text.startswith(
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}' in vhost '/'")
    assert other_conn.is_open  # a channel error only
    assert queue_state(broker, queue) == QueueState(ready=1, unacked=0, consumers=0)
    _method, _props, body = owner.basic_get(queue, auto_ack=True)  # the owner is unaffected
    assert body == b"mine"


def test_amqp_exclusive_queue_locked_for_other_connection(
        amqp_connect: Callable[..., amqp.Connection], unique_name: Callable[..., str]) -> None:
    owner = amqp_connect().channel()
    queue = unique_name()
    owner.queue_declare(queue, exclusive=True)
    other = amqp_connect()
    with pytest.raises(amqp_exc.ResourceLocked) as info:
        other.channel().basic_consume(queue, callback=lambda _m: None)
    assert info.value.reply_code == 405
    assert info.value.method_sig == (60, 20)
    assert other.connected


def test_pika_exclusive_queue_deleted_with_owner(broker: EmbeddedBroker,
                                                 pika_connect: Callable[[], pika.BlockingConnection],
                                                 unique_name: Callable[..., str]) -> None:
    owner = pika_connect()
    queue = unique_name()
    owner.channel().queue_declare(queue, exclusive=True)
    assert queue_state(broker, queue) is not None
    owner.close()
    ch = pika_connect().channel()
    with pytest.raises(pika_exc.ChannelClosedByBroker) as info:
        ch.queue_declare(queue, passive=True)
    assert (info.value.reply_code, info.value.reply_text) == (
        404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")
