"""A node that crashes (killed, cut off) rather than stopping: its consumers are unreachable, not
gone (TMO-4.3-6.c, RabbitMQ 4.3's consumer_disconnected_timeout).

Rules (rabbit_fifo v4.3.5: `{down, Pid, noconnection}` l. 562-605 marks the node's consumers
`suspected_down` and starts a `consumer_disconnected_timeout` timer for each; the timer's
`return_all(..., false)` l. 607-620 gives their checked-out messages back without counting a
delivery; `{nodeup, Node}` l. 652 re-monitors them, and a process that is gone is `down`):
- When a node crashes (`node_crashing`, then the transport loses its connections), the
  deliveries its connections hold from a quorum queue whose leader runs elsewhere stay checked
  out (neither ready nor redelivered) for the queue's consumer_disconnected_timeout: the lower of
  x-consumer-disconnected-timeout and the policy key consumer-disconnected-timeout, else the
  broker's 60 s; then they go back to the queue, redelivered, their delivery count unchanged.
- The node starting again ends the wait at once: its processes are gone, the deliveries go back.
- Only under the 4.3 rules: up to 4.2 (the legacy modes) rabbit_fifo's noconnection returned them
  at once (v4.0.5 l. 562-600, `return_all(..., true)`), as a clean stop does here.
- Deliveries of classic queues, and of quorum queues led on the crashed node, go as for a stop.
"""

from __future__ import annotations

from reference_broker.core import delivery
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.effects import CancelTimer, Effect, StartTimer
from reference_broker.core.settings import policy_definition
from reference_broker.core.state import QUORUM, Message, Queue

TIMER = "disconnected"
DEFAULT_MS = 60_000  # rabbit_quorum_queue:get_consumer_disconnected_timeout's default
ARGUMENT, POLICY_KEY = "x-consumer-disconnected-timeout", "consumer-disconnected-timeout"


def wait_ms(core: BrokerState, queue: Queue) -> int:
    values = [v for v in (queue.arguments.get(ARGUMENT), policy_definition(core, queue).get(POLICY_KEY))
              if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    return core.rules.disconnected_wait(min(values) if values else None, DEFAULT_MS)


def node_crashing(core: BrokerState, node: int) -> None:
    """The transport is about to lose `node`'s connections without a close: they are unreachable."""
    if core.cluster is not None:
        core.cluster.crashing.add(node)


def suspend(core: BrokerState, meta: Meta, conn_id: int) -> list[Effect]:
    """A connection of a crashing node is lost: keep its quorum deliveries checked out, each
    returned when its queue's timer fires (see the module rules). Call before its channels go."""
    cluster, conn = core.cluster, core.connections.get(conn_id)
    if cluster is None or conn is None or core.config.timeout_mode == "legacy":
        return []
    node = cluster.node_of(conn_id)
    if node not in cluster.crashing:
        return []
    effects: list[Effect] = []
    for ch in conn.channels.values():
        for tag, unacked in list(ch.unacked.items()):
            queue = core.queue_of(conn.vhost, unacked)
            if queue is None or queue.kind != QUORUM or unacked.timed_out or not cluster.running(queue.node):
                continue
            del ch.unacked[tag]
            queue.deadlines.pop((conn_id, ch.number, tag), None)
            cluster.next_suspect += 1
            cluster.suspected[cluster.next_suspect] = (node, queue, unacked.message)
            effects.append(StartTimer((TIMER, cluster.next_suspect), meta.now_ms + wait_ms(core, queue)))
    return effects


def on_timer(core: BrokerState, meta: Meta, key: tuple[object, ...]) -> list[Effect]:
    cluster = core.cluster
    entry = cluster.suspected.pop(int(str(key[1])), None) if cluster is not None else None
    if entry is None:
        return []
    _node, queue, message = entry
    return _give_back(core, meta, queue, [message])


def node_back(core: BrokerState, meta: Meta, node: int) -> list[Effect]:
    """`node` runs again: the deliveries its lost connections held go back now."""
    cluster = core.cluster
    if cluster is None:
        return []
    cluster.crashing.discard(node)
    effects: list[Effect] = []
    for number, (where, queue, message) in sorted(cluster.suspected.items()):
        if where == node:
            del cluster.suspected[number]
            effects += [CancelTimer((TIMER, number)), *_give_back(core, meta, queue, [message])]
    return effects


def _give_back(core: BrokerState, meta: Meta, queue: Queue, messages: list[Message]) -> list[Effect]:
    if core.find_queue(queue.vhost, queue.name) is not queue:
        return []  # deleted meanwhile: nothing to return to
    effects: list[Effect] = []
    for message in messages:
        queue.checked_out -= 1
        effects += delivery.return_to_queue(core, meta, queue, message, failed=False)
    return effects + delivery.dispatch(core, meta, queue)
