"""A broker of several nodes, as RabbitMQ 4.3.6 treats them (docs/findings-cluster.md):
where queues live, and what the rule code asks while a node is down (nodes.py stops and starts them).

Rules:
- Placement: a classic queue lives on the node of the connection that declared it
  (client-local); a quorum queue's members are the first x-quorum-initial-group-size (default
  all) running nodes in ring order from the declaring node, its leader (`Queue.node`) the
  declaring node's member. Streams are not placed (always available).
- A node stops (`node_down`; the transport has already ended its connections):
  - its classic queues' consumers are removed, each with basic.cancel{nowait} when its
    connection advertised consumer_cancel_notify (CLU-01), for good (CLU-02); the unacked
    deliveries other channels hold from them are forgotten (settling them does nothing) and
    the persistent ones come back at the queue's restart, redelivered;
  - a publish routed to such a queue is nacked, even when other queues took it (CLU-03);
    declare, consume, get and purge of it: 404 "<queue> process is stopped by supervisor" (CLU-04);
  - a quorum queue whose leader it hosted elects its lowest-numbered running member while a
    majority runs: nothing changes for its consumers and their unacked deliveries (CLU-05);
    without a majority nothing is delivered, and publishes are held: not enqueued, not
    confirmed (CLU-07), until a majority is back; then they are enqueued in order and confirmed.
- A node starts (`node_up`): its durable classic queues restart with their persistent
  messages (transient ones are lost) and the recovered deliveries; its transient classic queues
  are deleted (Khepri removes them at node up); quorum queues with a majority again take their
  held publishes. Leaders do not move back.
- Metadata lag (`BrokerConfig.metadata_lag`, 0 by default; a slow path, not a fault): for that
  many ms after its declare, a queue is known only to the node that declared it. Through the
  other nodes it is 404 "no queue" (a passive declare, consume, get, purge, bind) and a publish
  does not reach it (unroutable there). RabbitMQ 4.2+ with Khepri: the declaring node answers
  declare-ok once the record is committed on a majority; another node answers and routes from its
  own projections, filled when its member applies the command (rabbit_db_queue v4.3.5), so a
  loaded node learns of a queue late.
- Not modelled: the ~65 s retries and "... due to timeout" 404 of a crashed node (nodes here
  stop cleanly), basic.get on a quorum queue without a majority.
"""

from __future__ import annotations

from codec import ReplyCode
from reference_broker.core import texts
from reference_broker.core.broker_state import BrokerState
from reference_broker.core.cluster_state import Cluster, Held
from reference_broker.core.errors import soft
from reference_broker.core.state import CLASSIC, QUORUM, Channel, Message, Queue

GROUP_SIZE = "x-quorum-initial-group-size"


# -- placement and availability ----------------------------------------------------------------
def place(core: BrokerState, conn: int, queue: Queue) -> None:
    """Where a new queue lives (see the module rules); nothing on a single node."""
    cluster = core.cluster
    if cluster is None:
        return
    home = cluster.node_of(conn)
    queue.node = home
    if queue.kind == QUORUM:
        ring = [(home - 1 + i) % cluster.size + 1 for i in range(cluster.size)]
        wanted = queue.arguments.get(GROUP_SIZE)
        size = wanted if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted > 0 else cluster.size
        queue.members = tuple(sorted([n for n in ring if cluster.running(n)][:size]))
    if core.config.metadata_lag:
        cluster.unseen[queue] = (home, cluster.now_ms + core.config.metadata_lag)


def known(core: BrokerState, conn: int, queue: Queue) -> bool:
    """Whether the node of `conn` knows `queue` yet (metadata lag, module rules)."""
    cluster = core.cluster
    if cluster is None or queue not in cluster.unseen:
        return True
    home, learnt_at = cluster.unseen[queue]
    if cluster.now_ms >= learnt_at:
        del cluster.unseen[queue]
        return True
    return cluster.node_of(conn) == home


def lagging(core: BrokerState) -> bool:
    """Whether some queue is not yet known to every node (metadata lag): only then does a publish
    route through `known`."""
    return core.cluster is not None and bool(core.cluster.unseen)


def has_majority(cluster: Cluster, queue: Queue) -> bool:
    running = sum(1 for n in queue.members if cluster.running(n))
    return running * 2 > len(queue.members)


def stopped(core: BrokerState, queue: Queue) -> bool:
    """A classic queue whose node is down (CLU-04)."""
    return core.cluster is not None and queue.kind == CLASSIC and not core.cluster.running(queue.node)


def ensure_available(core: BrokerState, queue: Queue) -> None:
    """CLU-04: declare, consume, get and purge of a classic queue on a stopped node."""
    if stopped(core, queue):
        raise soft(ReplyCode.NOT_FOUND, texts.stopped(queue.name, queue.vhost))


def serving(core: BrokerState, queue: Queue) -> bool:
    """Whether the queue delivers now (CLU-07: not a quorum queue without a majority)."""
    cluster = core.cluster
    if cluster is None or queue.kind != QUORUM or has_majority(cluster, queue):
        return True
    return core.rules.delivers_without_majority()


def connection_attached(core: BrokerState, conn: int, node: int) -> None:
    if core.cluster is not None:
        core.cluster.conn_node[conn] = node


def connection_detached(core: BrokerState, conn: int) -> None:
    """The connection is gone: its node is forgotten, its held publishes wait for no confirm."""
    cluster = core.cluster
    if cluster is not None:
        cluster.conn_node.pop(conn, None)
        for held in cluster.held:
            if held.confirm is not None and held.confirm[0].conn == conn:
                held.confirm = None


# -- publishing --------------------------------------------------------------------------------
def divert(core: BrokerState, queue: Queue, message: Message) -> bool | None:
    """Routing to `queue`: None when it takes the message as usual; False when it refuses it
    (a stopped classic queue, CLU-03); True when it holds it (no majority, CLU-07)."""
    cluster = core.cluster
    if cluster is None:
        return None
    if stopped(core, queue):
        return not core.rules.nack_for_stopped_queue()
    if queue.kind == QUORUM and not has_majority(cluster, queue):
        cluster.holding.append(Held(queue, message))
        return True
    return None


def hold_confirm(core: BrokerState, ch: Channel, seqno: int, accepted: bool | None) -> bool:
    """After routing a publish: the holds it made wait for its confirm; True when the confirm
    must wait for them (it is neither acked nor nacked now, CLU-07)."""
    cluster = core.cluster
    if cluster is None or not cluster.holding:
        return False
    holding, cluster.holding = cluster.holding, []
    waits = bool(seqno) and accepted is not False and core.rules.confirm_waits_for_majority()
    for held in holding:
        held.confirm = (ch, seqno) if waits else None
    cluster.held += holding
    return waits


def unconfirmed(core: BrokerState, ch: Channel) -> list[int]:
    """The channel's seqnos held for a majority: a multiple=true ack must not cover them."""
    if core.cluster is None:
        return []
    return [h.confirm[1] for h in core.cluster.held if h.confirm is not None and h.confirm[0] is ch]
