"""A node's restart and what comes back on it (CLU-09, docs/findings-cluster.md (g)).

The test declares on node 2 what the RabbitMQ Java client's restart tests declare on a single
broker (server/DurableBindingLifecycle, ExclusiveQueueDurability, MessageRecovery), restarts node 2
through the `cluster` fixture's node control and looks again from node 2. A transient exchange is
the cluster's: it outlives the node's restart while other nodes run (the Java client's
transientExchangeDurableQueue).
"""

from __future__ import annotations

import pytest

from codec import (
    BasicAck,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    BasicReturn,
    ConfirmSelect,
    ConfirmSelectOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
)
from codec.constants import ReplyCode
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.plugin.cluster import Cluster
from conformance.plugin.session import Names, Target
from conformance.suite.steps.cluster import await_queue_back, classic, measured, publish
from conformance.suite.steps.wire import sync

NODE = 2


def _get(client: RawClient, ch: int, queue: str, target: Target) -> tuple[bytes, bool] | None:
    reply = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk, BasicGetEmpty, timeout=target.timeout(5))
    method = reply.method
    return (reply.body, method.redelivered) if isinstance(method, BasicGetOk) else None


@pytest.mark.rules("CLU-09")
def test_a_restarted_nodes_durable_queue_keeps_its_bindings_and_persistent_messages(cluster: Cluster, names: Names,
                                                                                    target: Target) -> None:
    measured(target, "CLU-09")
    cluster.require(NODE)
    kept, unbound, exclusive = names.queue("kept"), names.queue("unbound"), names.queue("exclusive")
    topic, deleted, fan = names.exchange("topic"), names.exchange("deleted"), names.exchange("transient")
    home = cluster.connect(NODE)
    ch = home.channel()
    classic(home, ch, kept)
    classic(home, ch, unbound)
    for exchange, kind in ((topic, "topic"), (deleted, "direct")):
        home.rpc(ch, ExchangeDeclare(exchange=exchange, exchange_type=kind, durable=True), ExchangeDeclareOk)
    home.rpc(ch, ExchangeDeclare(exchange=fan, exchange_type="fanout"), ExchangeDeclareOk)  # transient: the cluster's
    home.rpc(ch, QueueBind(queue=kept, exchange=topic, routing_key="a.#"), QueueBindOk)
    home.rpc(ch, QueueBind(queue=kept, exchange=fan), QueueBindOk)
    home.rpc(ch, QueueBind(queue=unbound, exchange=deleted, routing_key="k"), QueueBindOk)
    home.rpc(ch, ExchangeDelete(exchange=deleted), ExchangeDeleteOk)
    home.rpc(ch, QueueDeclare(queue=exclusive, durable=True, exclusive=True), QueueDeclareOk)
    home.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    publish(home, ch, kept, b"persistent")
    home.send(ch, BasicPublish(routing_key=kept), BasicProperties(delivery_mode=1), b"transient")
    confirmed: set[int] = set()
    while len(confirmed) < 2:
        ack = home.expect(ch, BasicAck, timeout=target.timeout(10)).method
        assert isinstance(ack, BasicAck)
        confirmed |= set(range(1, ack.delivery_tag + 1)) if ack.multiple else {ack.delivery_tag}
    cluster.stop(NODE)
    cluster.start(NODE)
    client = cluster.connect(NODE)
    ch = client.channel()
    ready = await_queue_back(client, kept, target, "CLU-09")
    got = [_get(client, ch, kept, target) for _ in range(ready + 1)]
    assert got[:-1] == [(b"persistent", False)] and got[-1] is None, \
        f"CLU-09: after the restart {kept} must hold its persistent message, never delivered (redelivered=false), " \
        f"and not the transient one; basic.get gave {got}"
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    for exchange, key, what in ((topic, "a.b", "its binding to the durable topic exchange (a.#)"),
                                (fan, "", "its binding to a transient exchange, which the other nodes kept"),
                                ("", kept, "the default exchange's binding by its name")):
        client.send(ch, BasicPublish(exchange=exchange, routing_key=key, mandatory=True), BasicProperties(), b"after")
        client.expect(ch, BasicAck, timeout=target.timeout(10))
        returned = [c for c in client.pending(ch) if isinstance(c.method, BasicReturn)]
        assert not returned and _get(client, ch, kept, target) == (b"after", False), \
            f"CLU-09: after the restart {kept} must be reached through {what}; returned: {returned}"
    client.rpc(ch, ExchangeDeclare(exchange=deleted, exchange_type="direct", durable=True), ExchangeDeclareOk)
    client.send(ch, BasicPublish(exchange=deleted, routing_key="k", mandatory=True), BasicProperties(), b"old key")
    sync(client, ch)
    assert _get(client, ch, unbound, target) is None, \
        f"CLU-09: the binding of {unbound} went with its exchange before the restart: a publish to the exchange " \
        "declared again must not reach it"
    other = client.channel()
    try:
        client.rpc(other, QueueDeclare(queue=exclusive, passive=True), QueueDeclareOk, timeout=target.timeout(5))
        raise AssertionError(f"CLU-09: the exclusive queue {exclusive} of a connection to the restarted node is still "
                             "there")
    except ChannelClosed as closed:
        assert closed.code == ReplyCode.NOT_FOUND, f"CLU-09: passive declare of the gone exclusive queue: {closed}"
    other = client.channel()
    client.rpc(other, QueueDeclare(queue=exclusive, durable=True), QueueDeclareOk, timeout=target.timeout(5))
