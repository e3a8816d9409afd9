"""A node of the broker's cluster stops and starts again (docs/findings-cluster.md).

Responsibility: what one stop-and-start of a node means for the queues the client uses, as an
operation on the model state, between two steps (nothing else happens while the node is down).
Rules (RabbitMQ 4.3, a clean stop, e.g. `rabbitmqctl stop`):
- CLU-01: a classic queue living on the node loses its consumers; basic.cancel{nowait} is owed
  on connections that advertised consumer_cancel_notify (the owed cancel names CLU-01), the
  others hear nothing (rabbit_channel handle_consuming_queue_down_or_eol/cancel_consumer).
- CLU-02: the queue (durable) comes back without its consumers.
- Its transient messages are lost, ready or unacked (rabbit_variable_queue terminate/2 deletes
  the transient store; the machines publish only transient messages, delivery_mode 1). Its
  unacked deliveries' tags stay valid on their channels (the channel keeps them): ack, nack and
  reject succeed and settle nothing (the restarted queue process ignores tags it does not hold,
  rabbit_amqqueue_process subtract_acks, rabbit_variable_queue ack/2 `{none, _}`), so a requeue
  has nowhere to go, as after a deletion (`Unacked.queue` None).
- CLU-05: a quorum queue that keeps a majority (its leader may have been on the node) changes
  nothing: consumers, unacked deliveries and their tags stay. Its unacked messages are marked
  (`Message.failed_over`) until taken again, so a failure they explain names CLU-05.
"""

from __future__ import annotations

from conformance.model.channel import ChannelKey
from conformance.model.consumers import delete_queue
from conformance.model.queues import QueueState
from conformance.model.state import BrokerState

RULE_CANCEL = "CLU-01"
RULE_FAILOVER = "CLU-05"


def node_stopped_and_started(state: BrokerState, classic: list[str], quorum: list[str]) -> None:
    """`classic`: the classic queues that live on the node; `quorum`: the quorum queues with a
    member (or their leader) there that keep a majority (module rules)."""
    for name in classic:
        queue = state.queues[name]
        delete_queue(state, name, rule=RULE_CANCEL)  # CLU-01; its transient messages are lost
        state.queues[name] = QueueState.new(name, queue.kind, queue.max_length, queue.overflow)  # CLU-02
    for channel in state.channels.values():
        for entry in channel.unacked.values():
            if entry.queue in quorum:
                entry.message.failed_over = True  # CLU-05: still checked out


def failed_over_ready(state: BrokerState, name: str) -> int:
    """How many ready messages of `name` were unacked deliveries across a failover (CLU-05)."""
    queue = state.queues.get(name)
    if queue is None:
        return 0
    return sum(1 for m in queue.ready.all() if m.failed_over)


def failed_over_held(state: BrokerState, key: ChannelKey, consumer: str | None) -> int:
    """How many of the channel's unacked deliveries (of `consumer`, or all) are held across a failover."""
    channel = state.channels.get(key)
    if channel is None:
        return 0
    return sum(1 for u in channel.unacked.values()
               if u.message.failed_over and (consumer is None or u.consumer == consumer))

