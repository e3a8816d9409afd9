"""Nodes that stop and start (docs/findings-cluster.md; the rules are cluster.py's).

Rules: the transport ends a stopping node's connections first (their sockets die with it), then
calls `node_down`; `node_up` after the node listens again. Both return effects like any entry
point; nothing here reads a clock.
"""

from __future__ import annotations

from codec import BasicCancel
from reference_broker.core import delivery
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.cluster import has_majority
from reference_broker.core.cluster_state import Cluster
from reference_broker.core.effects import Effect, Send
from reference_broker.core.state import CLASSIC, QUORUM, Queue


def node_down(core: BrokerState, meta: Meta, node: int) -> list[Effect]:
    cluster = core.cluster
    if cluster is None or not 1 <= node <= cluster.size or node in cluster.down:
        return []
    cluster.down.add(node)
    effects: list[Effect] = []
    for queue in [q for v in core.vhosts.values() for q in v.queues.values()]:
        if queue.kind == CLASSIC and queue.node == node:
            effects += _stop_classic(core, queue)
        elif queue.kind == QUORUM and queue.node == node and has_majority(cluster, queue):
            _failover(core, cluster, queue)
    return effects


def node_up(core: BrokerState, meta: Meta, node: int) -> list[Effect]:
    cluster = core.cluster
    if cluster is None or node not in cluster.down:
        return []
    cluster.down.discard(node)
    effects: list[Effect] = []
    for queue in [q for v in core.vhosts.values() for q in v.queues.values()]:
        if queue.kind == CLASSIC and queue.node == node:
            if queue.durable:
                _restart_classic(core, cluster, queue)
            else:
                effects += delivery.delete_queue(core, meta, queue)
        elif queue.kind == QUORUM and not cluster.running(queue.node) and has_majority(cluster, queue):
            _failover(core, cluster, queue)  # a majority again, its leader's node still down
    return effects + _release_held(core, meta, cluster)


def _stop_classic(core: BrokerState, queue: Queue) -> list[Effect]:
    """CLU-01/02: its consumers go, with basic.cancel where the capability asks for it; the
    deliveries other channels hold are forgotten there, the persistent ones recovered later."""
    effects: list[Effect] = []
    for consumer in list(queue.consumers.values()):
        queue.remove_consumer(consumer)
        conn = core.connections.get(consumer.conn)
        ch = conn.channels.get(consumer.channel) if conn is not None else None
        if conn is None or ch is None:
            continue
        ch.consumers.pop(consumer.tag, None)
        if core.rules.cancel_on_node_down(conn.cancel_notify) and not ch.closing:
            effects.append(Send(conn.id, ch.number, BasicCancel(consumer.tag, nowait=True)))
    recovering = core.cluster.recovering.setdefault(queue, []) if core.cluster is not None else []
    for conn in core.connections.values():
        if conn.vhost != queue.vhost:
            continue
        for ch in conn.channels.values():
            for u in [*ch.unacked.values(), *ch.tx_held.values()]:
                if u.queue == queue.name and not u.orphaned:
                    u.orphaned = True
                    queue.checked_out -= 1
                    if u.message.properties.delivery_mode == 2:
                        recovering.append(u.message)
    return effects


def _restart_classic(core: BrokerState, cluster: Cluster, queue: Queue) -> None:
    """A durable classic queue's restart (CLU-09): its bindings stay (they are the cluster's, not
    the node's), its persistent messages come back, ready or recovered from the channels that held
    them, in their original order; the transient ones are lost."""
    if not core.rules.bindings_kept_at_restart():
        for exchange in core.vhosts[queue.vhost].exchanges.values():
            exchange.bindings = [b for b in exchange.bindings if b.is_exchange or b.destination != queue.name]
    kept = [m for m in queue.ready_messages() if m.properties.delivery_mode == 2]
    queue.purge()
    for message in sorted([*kept, *cluster.recovering.pop(queue, [])], key=lambda m: m.seq):
        queue.return_message(message)


def _failover(core: BrokerState, cluster: Cluster, queue: Queue) -> None:
    """CLU-05: the lowest-numbered running member leads; consumers and deliveries stay (a
    fault's rule may lose the unacked deliveries)."""
    queue.node = min(n for n in queue.members if cluster.running(n))
    held = [(conn.id, ch.number, u) for conn in core.connections.values() if conn.vhost == queue.vhost
            for ch in conn.channels.values() for u in ch.unacked.values()
            if u.queue == queue.name and not u.orphaned and not u.timed_out]
    lost = {id(u) for u in core.rules.lost_at_failover([u for _c, _n, u in held])}
    for conn_id, number, u in held:
        if id(u) in lost:
            u.orphaned = True
            queue.checked_out -= 1
            queue.deadlines.pop((conn_id, number, u.tag), None)


def _release_held(core: BrokerState, meta: Meta, cluster: Cluster) -> list[Effect]:
    """Held publishes of queues with a majority again: enqueued in order, then confirmed once
    none of a publish's holds is left."""
    effects: list[Effect] = []
    kept = []
    for held in cluster.held:
        if held.queue.name in core.vhosts[held.queue.vhost].queues and not has_majority(cluster, held.queue):
            kept.append(held)
        elif core.find_queue(held.queue.vhost, held.queue.name) is held.queue:
            held.queue.enqueue(held.message, core.rules.priority_level(held.queue, held.message, core.config.emulates))
    released = [h for h in cluster.held if h not in kept]
    cluster.held = kept
    waiting = {(id(h.confirm[0]), h.confirm[1]) for h in kept if h.confirm is not None}
    confirms = {(id(h.confirm[0]), h.confirm[1]): h.confirm for h in released if h.confirm is not None}
    for key, (ch, seqno) in confirms.items():
        conn = core.connections.get(ch.conn)
        if key not in waiting and conn is not None and conn.channels.get(ch.number) is ch and not ch.closing:
            ch.confirms_ready.append(seqno)
    for queue in {id(h.queue): h.queue for h in released}.values():
        effects += delivery.dispatch(core, meta, queue)
    return effects
