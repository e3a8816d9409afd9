"""The cluster in the pure core (docs/findings-cluster.md CLU-01..CLU-09): classic
queues on their node, quorum queues replicated, nodes stopping and starting."""

from __future__ import annotations

from typing import Any

import pytest

from codec import (
    BasicAck,
    BasicCancel,
    BasicConsume,
    BasicDeliver,
    BasicGet,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    BasicReturn,
    ChannelClose,
    ConfirmSelect,
    ExchangeDeclare,
    QueueBind,
    QueueDeclare,
    QueueDeclareOk,
    QueuePurge,
)
from reference_broker.config import BrokerConfig, ConfigError
from reference_broker.core import Effect, Meta, Send
from tests.reference_broker.sim import Sim, methods

PERSISTENT = BasicProperties(delivery_mode=2)
STOPPED = "NOT_FOUND - queue 'cq' in vhost '/' process is stopped by supervisor"


class Cluster(Sim):
    """Connection n comes in on node n (connections 4.. on the node given)."""

    def __init__(self, **config: Any) -> None:
        super().__init__(nodes=3, **config)

    def join(self, conn: int, node: int, cancel_notify: bool = True) -> None:
        self.connect(conn, cancel_notify=cancel_notify)
        self.core.connection_attached(conn, node)
        self.open(conn)

    def stop(self, node: int) -> list[Effect]:
        return self.core.node_down(Meta(self.now), node) + self.core.flush()

    def start(self, node: int) -> list[Effect]:
        return self.core.node_up(Meta(self.now), node) + self.core.flush()

    def send(self, conn: int, rk: str, body: bytes, exchange: str = "", mandatory: bool = False) -> list[Effect]:
        return self.do(conn, 1, BasicPublish(exchange=exchange, routing_key=rk, mandatory=mandatory), PERSISTENT, body)

    def consume(self, conn: int, queue: str, tag: str, ch: int = 1) -> list[Effect]:
        return self.do(conn, ch, BasicConsume(queue=queue, consumer_tag=tag))

    def count(self, conn: int, queue: str) -> int:
        ok = methods(self.do(conn, 1, QueueDeclare(queue=queue, passive=True)), QueueDeclareOk)
        return int(ok[0].message_count)


def closed(effects: list[Effect]) -> list[ChannelClose]:
    return methods(effects, ChannelClose)


def classic_on_node_3(**config: Any) -> Cluster:
    sim = Cluster(**config)
    for conn in (1, 2, 3):
        sim.join(conn, conn)
    sim.join(4, 2, cancel_notify=False)
    sim.queue("cq", conn=3)
    sim.queue("local", conn=2)
    return sim


def test_a_classic_queue_lives_on_the_declaring_node_and_quorum_members_follow_the_ring() -> None:
    sim = classic_on_node_3()
    sim.queue("qq", conn=2, **{"x-queue-type": "quorum", "x-quorum-initial-group-size": 2})
    sim.queue("qall", conn=3, **{"x-queue-type": "quorum"})
    cq, qq, qall = (sim.core.find_queue("/", n) for n in ("cq", "qq", "qall"))
    assert cq is not None and qq is not None and qall is not None
    assert (cq.node, qq.node, qq.members, qall.node, qall.members) == (3, 2, (2, 3), 3, (1, 2, 3))


def test_clu_01_consumers_of_a_stopped_nodes_queue_are_cancelled_with_the_capability_only() -> None:
    sim = classic_on_node_3()
    sim.consume(2, "cq", "cap")
    sim.consume(2, "local", "other")
    sim.consume(4, "cq", "nocap")
    effects = sim.stop(3)
    assert [(e.conn, e.method) for e in effects] == [(2, BasicCancel("cap", nowait=True))]
    assert methods(sim.send(2, "local", b"x"), BasicDeliver)[0].consumer_tag == "other"
    assert methods(sim.do(4, 1, BasicQos(prefetch_count=5)), BasicQosOk)  # its channel is untouched
    sim.start(3)
    assert not methods(sim.send(1, "cq", b"later"), BasicDeliver)  # CLU-02: gone for good
    assert sim.count(1, "cq") == 1


@pytest.mark.parametrize("method", [QueueDeclare(queue="cq", passive=True), QueueDeclare(queue="cq", durable=True),
                                    BasicConsume(queue="cq"), BasicGet(queue="cq"), QueuePurge(queue="cq")])
def test_clu_04_a_stopped_nodes_classic_queue_answers_404(method: Any) -> None:
    sim = classic_on_node_3()
    sim.stop(3)
    close = closed(sim.do(1, 1, method))
    assert [(c.reply_code, c.reply_text) for c in close] == [(404, STOPPED)]
    assert (close[0].class_id, close[0].method_id) == (method.CLASS_ID, method.METHOD_ID)


def test_clu_03_publishes_routed_to_a_stopped_queue_are_nacked_even_when_another_queue_took_them() -> None:
    sim = classic_on_node_3()
    sim.do(1, 1, ExchangeDeclare(exchange="fan", exchange_type="fanout"))
    for q in ("cq", "local"):
        sim.do(1, 1, QueueBind(queue=q, exchange="fan"))
    sim.do(1, 1, ConfirmSelect())
    sim.stop(3)
    direct = sim.send(1, "cq", b"d1", mandatory=True)
    fanned = sim.send(1, "", b"d2", exchange="fan")
    # a lone nack goes multiple=true, as measured on 4.3.6 (PC-04's coalescing)
    assert methods(direct, BasicNack) == [BasicNack(1, True, True)] and not methods(direct, BasicReturn)
    assert methods(fanned, BasicNack) == [BasicNack(2, True, True)]
    assert sim.count(1, "local") == 1
    sim.start(3)
    assert sim.count(1, "cq") == 0  # nothing was stored while it was down


def test_a_classic_queue_restarts_with_its_persistent_messages_and_the_deliveries_others_held() -> None:
    sim = classic_on_node_3()
    sim.send(1, "cq", b"held")
    sim.send(1, "cq", b"ready")
    sim.do(1, 1, BasicPublish(routing_key="cq"), BasicProperties(), b"transient")
    assert methods(sim.do(2, 1, BasicGet(queue="cq")), BasicGetOk)  # "held" stays unacked on node 2
    sim.queue("tq", conn=3)
    sim.do(3, 1, QueueDeclare(queue="gone", durable=False))
    sim.stop(3)
    assert not methods(sim.do(2, 1, BasicAck(1)))  # settling a forgotten delivery does nothing
    sim.start(3)
    assert sim.core.find_queue("/", "gone") is None  # a transient queue of the node is deleted
    got = [e for _ in range(3) for e in sim.do(1, 1, BasicGet(queue="cq", no_ack=True)) if isinstance(e, Send)]
    assert [(e.method.redelivered, e.body) for e in got if isinstance(e.method, BasicGetOk)] == [
        (True, b"held"), (False, b"ready")]


def quorum_with_deliveries(**config: Any) -> Cluster:
    sim = Cluster(**config)
    for conn in (1, 2, 3):
        sim.join(conn, conn)
    sim.queue("qq", conn=3, **{"x-queue-type": "quorum"})
    sim.do(1, 1, BasicQos(prefetch_count=10))
    sim.consume(1, "qq", "qc")
    for n in range(1, 6):
        sim.send(2, "qq", f"m{n}".encode())
    return sim


def test_clu_05_a_leader_change_keeps_consumers_and_unacked_deliveries() -> None:
    sim = quorum_with_deliveries()
    assert not sim.stop(3)
    queue = sim.core.find_queue("/", "qq")
    assert queue is not None and queue.node == 1 and queue.checked_out == 5
    assert methods(sim.send(2, "qq", b"m6"), BasicDeliver)[0].delivery_tag == 6
    sim.do(1, 1, BasicAck(1))
    again = sim.do(1, 1, BasicNack(2, requeue=True))
    deliver = [e for e in again if isinstance(e.method, BasicDeliver)]  # type: ignore[union-attr]
    assert deliver and deliver[0].method.redelivered and deliver[0].body == b"m2"  # type: ignore[union-attr]
    assert deliver[0].properties.headers == {"x-acquired-count": 1}  # type: ignore[union-attr]


def test_clu_07_without_a_majority_nothing_is_delivered_or_confirmed_until_it_is_back() -> None:
    sim = Cluster()
    for conn in (1, 2, 3):
        sim.join(conn, conn)
    sim.queue("qc", conn=1, **{"x-queue-type": "quorum", "x-quorum-initial-group-size": 2})
    sim.queue("cq", conn=1)
    sim.consume(1, "qc", "c")
    sim.do(3, 1, ConfirmSelect())
    sim.stop(2)
    out = sim.send(3, "qc", b"a") + sim.send(3, "cq", b"b") + sim.send(3, "cq", b"c") + sim.send(3, "qc", b"d")
    assert methods(out, BasicAck) == [BasicAck(3, True)] or methods(out, BasicAck) == [BasicAck(2, False),
                                                                                          BasicAck(3, False)]
    assert not methods(out, BasicDeliver) and not methods(out, BasicNack)
    assert sim.count(1, "qc") == 0
    back = sim.start(2)
    assert [m.delivery_tag for m in methods(back, BasicDeliver)] == [1, 2]
    assert methods(back, BasicAck) == [BasicAck(4, True)]  # 2 and 3 were acked already


def test_clu_08_a_quorum_consumer_timeout_keeps_its_deadline_across_the_failover() -> None:
    sim = quorum_with_deliveries()
    queue = sim.core.find_queue("/", "qq")
    assert queue is not None
    before = dict(queue.deadlines)
    sim.stop(3)
    assert queue.deadlines == before and before


@pytest.mark.parametrize(("fault", "check"), [
    ("cluster_no_cancel_on_node_down", "cancel"), ("cluster_ack_for_stopped_queue", "nack"),
    ("cluster_failover_drops_unacked", "failover"), ("cluster_delivers_without_majority", "majority"),
    ("cluster_confirms_without_majority", "confirm"), ("cluster_restart_drops_bindings", "restart")])
def test_each_cluster_fault_breaks_its_rule(fault: str, check: str) -> None:
    def observe(faults: list[str]) -> object:
        if check == "restart":
            sim = classic_on_node_3(faults=faults)
            sim.do(3, 1, QueueBind(queue="cq", exchange="amq.fanout"))
            sim.stop(3)
            sim.start(3)
            return [b.destination for b in sim.core.vhosts["/"].exchanges["amq.fanout"].bindings]
        if check in ("cancel", "nack"):
            sim = classic_on_node_3(faults=faults)
            sim.consume(2, "cq", "cap")
            sim.do(1, 1, ConfirmSelect())
            cancels = methods(sim.stop(3), BasicCancel)
            return cancels if check == "cancel" else methods(sim.send(1, "cq", b"x"), BasicNack)
        if check == "failover":
            sim = quorum_with_deliveries(faults=faults)
            sim.stop(3)
            return methods(sim.do(1, 1, BasicNack(1, requeue=True)), BasicDeliver)
        sim = Cluster(faults=faults)
        sim.join(1, 1)
        sim.queue("qc", **{"x-queue-type": "quorum", "x-quorum-initial-group-size": 2})
        sim.send(1, "qc", b"before")
        sim.do(1, 1, ConfirmSelect())
        sim.stop(2)
        if check == "majority":
            return methods(sim.consume(1, "qc", "c"), BasicDeliver)
        return methods(sim.send(1, "qc", b"x"), BasicAck)

    assert observe([]) != observe([fault])


def test_a_cluster_keeps_nothing_on_disk_and_has_one_to_nine_nodes() -> None:
    for bad in ({"nodes": 0}, {"nodes": 10}, {"nodes": 2, "data_dir": "/tmp/x"}):
        with pytest.raises(ConfigError):
            BrokerConfig(**bad).validate()  # type: ignore[arg-type]
    assert Sim().core.cluster is None  # a single node: nothing of the cluster applies


def test_a_held_confirm_goes_to_its_channel_only_and_not_to_one_opened_again_under_its_number() -> None:
    sim = Cluster()
    sim.join(1, 1)
    sim.queue("qc", **{"x-queue-type": "quorum", "x-quorum-initial-group-size": 2})
    sim.do(1, 1, ConfirmSelect())
    sim.stop(2)
    sim.send(1, "qc", b"held")
    sim.do(1, 1, ChannelClose(200, "bye", 0, 0))
    sim.open(1)
    sim.do(1, 1, ConfirmSelect())
    assert not methods(sim.start(2), BasicAck)
    assert sim.count(1, "qc") == 1  # the message itself was enqueued


def test_with_a_metadata_lag_a_queue_is_known_first_to_the_node_that_declared_it() -> None:
    """metadata_lag (a slow path): through node 1 the queue node 2 declared is 404 and
    unroutable until the lag has passed; node 2 knows it at once."""
    sim = Cluster(metadata_lag=500)
    sim.join(1, 1)
    sim.join(2, 2)
    sim.queue("late", conn=2)
    sim.open(1, 2)
    assert [c.reply_code for c in closed(sim.do(1, 2, QueueDeclare(queue="late", passive=True)))] == [404]
    assert sim.send(1, "late", b"dropped") == [] and sim.count(2, "late") == 0  # unroutable on node 1
    sim.send(2, "late", b"kept")
    sim.now += 500
    assert sim.count(1, "late") == 1  # node 1 learnt of it: it counts what node 2 enqueued
    sim.send(1, "late", b"routed")
    assert sim.count(2, "late") == 2


def test_a_metadata_lag_needs_a_cluster_and_is_never_negative() -> None:
    for bad in ({"metadata_lag": 100}, {"metadata_lag": -1, "nodes": 3}):
        with pytest.raises(ConfigError):
            BrokerConfig(**bad).validate()  # type: ignore[arg-type]
