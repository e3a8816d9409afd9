"""Shared steps of the cluster tests (cluster/test_cluster*.py, CLU-01..09, docs/findings-cluster.md):
a rule judged only where it was measured, queues placed on a node, waits that name their rule.

Rules: a queue lives where it is declared (a classic queue on the declaring node; a quorum
queue's leader there too on RabbitMQ 4.x and on the reference broker), so a test declares on the
node it will stop. Every wait is bounded and scaled; what did not come names the rule it breaks.
"""

from __future__ import annotations

import time
from typing import Any

from codec import (
    BasicCancel,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    Command,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDeclareOk,
)
from codec.constants import ReplyCode
from conformance.catalogue.rules import REQUIRED
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.plugin.session import Target
from conformance.plugin.verdicts import judged_elsewhere
from conformance.suite.steps.queues import Delivery

PERSISTENT = BasicProperties(delivery_mode=2)
CAP = {"consumer_cancel_notify": True}
NO_CAP = {"consumer_cancel_notify": False}
QUIET = 1.0  # seconds of "nothing arrives" after a node stopped (the cancel came in 0.04-0.5 s)


def measured(target: Target, *rule_ids: str) -> None:
    """Judge the test only where its rules were measured (required): elsewhere its verdict is the
    profile's (not-applicable: "not measured on this version")."""
    for rule_id in rule_ids:
        if target.profile.expect(rule_id) != REQUIRED:
            judged_elsewhere(target.profile, rule_id)


def classic(client: RawClient, ch: int, queue: str) -> None:
    """A durable classic queue (it survives its node's restart with its persistent messages)."""
    client.rpc(ch, QueueDeclare(queue=queue, durable=True, arguments={"x-queue-type": "classic"}), QueueDeclareOk)


def quorum(client: RawClient, ch: int, queue: str, **arguments: Any) -> None:
    client.rpc(ch, QueueDeclare(queue=queue, durable=True, arguments={"x-queue-type": "quorum", **arguments}),
               QueueDeclareOk)


def publish(client: RawClient, ch: int, queue: str, body: bytes, *, exchange: str = "", mandatory: bool = False) -> None:
    client.send(ch, BasicPublish(exchange=exchange, routing_key=queue, mandatory=mandatory), PERSISTENT, body)


def counts(client: RawClient, queue: str) -> tuple[int, int]:
    """(message_count, consumer_count) of `queue` by a passive declare on a fresh channel."""
    ch = client.channel()
    reply = client.rpc(ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk).method
    client.close_channel(ch)
    assert isinstance(reply, QueueDeclareOk)
    return reply.message_count, reply.consumer_count


def arrives(client: RawClient, ch: int, seconds: float, *types: type) -> Command | None:
    """The next command of `types` on `ch` within `seconds`, or None (a bounded look)."""
    return client.poll(ch, *types, duration=seconds)


def await_queue_back(client: RawClient, queue: str, target: Target, rule_id: str) -> int:
    """The durable queue's ready count once it answers again after its node's restart (bounded:
    404 until then)."""
    deadline = time.monotonic() + target.timeout(30)
    while True:
        ch = client.channel()
        try:
            reply = client.rpc(ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk, timeout=target.timeout(5))
        except ChannelClosed as closed:
            if closed.code != ReplyCode.NOT_FOUND or time.monotonic() > deadline:
                raise AssertionError(f"{rule_id}: the durable queue {queue} is not back after its node's restart: "
                                     f"{closed}") from None
            time.sleep(0.2)  # polled: a restarted node answers 404 until it has recovered the queue
            continue
        client.close_channel(ch)
        assert isinstance(reply.method, QueueDeclareOk)
        return reply.method.message_count


def consumer(client: RawClient, queue: str, tag: str, prefetch: int) -> int:
    ch = client.channel()
    client.rpc(ch, BasicQos(prefetch_count=prefetch), BasicQosOk)
    client.rpc(ch, BasicConsume(queue=queue, consumer_tag=tag), BasicConsumeOk)
    return ch


def confirming(client: RawClient) -> int:
    ch = client.channel()
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    return ch


def delivered(client: RawClient, ch: int, seconds: float, rule: str, what: str) -> Delivery:
    got = arrives(client, ch, seconds, BasicDeliver, BasicCancel)
    assert got is not None and isinstance(got.method, BasicDeliver), f"{rule}: {what}: got {got}, expected a delivery"
    return Delivery.of(got)
