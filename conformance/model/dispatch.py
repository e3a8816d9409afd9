"""Dispatch: which deliveries may come next, which must still come, and basic.get.

Responsibility: the model as an acceptor of the broker's asynchronous deliveries. The broker
chooses among consumers (round robin, timing), so the model does not predict one delivery; it
answers "may this delivery come now?" (`allowed_deliveries`), "must one still come?" (`due`),
and applies the one observed (`commit_delivery`).
Rules:
- ACK-01: a delivery or get-ok takes the channel's next tag; no-ack ones too.
- RQ-01/RQ-02: only the queue's head candidates may be delivered (queues.py).
- RQ-04: the redelivered flag of the message taken.
- QOS-02..09: a consumer receives only within its limits (prefetch.py); a limit lowered while
  deliveries were in flight lets up to `grace` of them through (QOS-09).
- QOS-07: basic.get ignores prefetch; get on a missing queue is 404 (channel.close, class 60
  method 70).
- CCN-04: a cancelled consumer receives nothing (it is no longer in the channel's consumers).
- CLU-05: a delivery beyond the prefetch of a consumer that holds deliveries from before a
  failover names CLU-05 (the broker dropped them at the failover).
"""

from __future__ import annotations

from codec.constants import METHOD_IDS, ReplyCode
from conformance.model import cluster, prefetch, wording
from conformance.model.channel import ChannelKey, ChannelState, Consumer, Unacked
from conformance.model.outcomes import ChannelClosed, Deliver, GetEmpty, GetOk, GetOutcome
from conformance.model.queues import Message, QueueState
from conformance.model.state import BrokerState, Violation
from conformance.model.traits import GlobalQos

BASIC_GET = METHOD_IDS["basic.get"]


def _connection_usage(state: BrokerState, channel: ChannelState) -> tuple[int, int]:
    conn = state.connections[channel.connection]
    used = sum(prefetch.consumer_unacked(c) for c in state.channels_of(channel.connection))
    return used, conn.global_limit


def consumer_may_receive(state: BrokerState, channel: ChannelState, consumer: Consumer,
                         optimistic: bool = True) -> bool:
    """Within the consumer's and the channel's limits now (QOS-02..08), ignoring grace;
    `optimistic`: may receive (else: must, QOS-09 volume range)."""
    queue = state.queues.get(consumer.queue)
    if queue is None or not prefetch.consumer_has_credit(consumer):
        return False
    used, limit = _connection_usage(state, channel)
    return prefetch.channel_allows(channel, queue.kind, state.traits, used, limit, optimistic)


def eligible(state: BrokerState, channel: ChannelState, with_grace: bool) -> list[Consumer]:
    """Consumers that may (with_grace) or must (without) receive a ready message now."""
    grace = with_grace and state.grace.get(channel.key, 0) > 0
    out = []
    for consumer in channel.consumers.values():
        queue = state.queues.get(consumer.queue)
        if queue is None or not len(queue.ready):
            continue
        if consumer_may_receive(state, channel, consumer, optimistic=with_grace) or (
                grace and prefetch.consumer_has_credit(consumer)):
            out.append(consumer)
    return out


def allowed_deliveries(state: BrokerState, key: ChannelKey) -> frozenset[Deliver]:
    """Every basic.deliver that may arrive next on channel `key`."""
    channel = state.channels.get(key)
    if channel is None:
        return frozenset()
    allowed = set()
    on_return_only = state.traits.quorum_redelivered_on_return
    for consumer in eligible(state, channel, with_grace=True):
        queue = state.queues[consumer.queue]
        for message in queue.ready.candidates():
            for flag in flags(queue, message, on_return_only):
                allowed.add(Deliver(consumer.tag, channel.next_tag, flag, message.body))
    return frozenset(allowed)


def flags(queue: QueueState, message: Message, on_return_only: bool) -> tuple[bool, ...]:
    """RQ-04: the redelivered flags `message` may carry when taken now: both for one the broker may
    have sent behind a channel.close it raised (settlement.maybe_sent_behind_close)."""
    flag = queue.redelivered(message, on_return_only)
    return (flag, True) if message.maybe_sent and not flag else (flag,)


def _broken_rule(state: BrokerState, key: ChannelKey, delivery: Deliver, allowed: frozenset[Deliver]) -> str:
    """The rule an unexpected delivery breaks, the most specific the model can tell."""
    channel = state.channels.get(key)
    consumer = channel.consumers.get(delivery.consumer_tag) if channel is not None else None
    if channel is not None and consumer is None and state.cancel_causes.get((key, delivery.consumer_tag)) == "CLU-01":
        return "CLU-02: that consumer was removed when its queue's node stopped, and stays removed"
    if channel is None or consumer is None:
        return "CCN-04: no consumer with that tag on this channel (cancelled or never created)"
    mine = {d for d in allowed if d.consumer_tag == delivery.consumer_tag}
    if not mine:
        queue = state.queues.get(consumer.queue)
        if queue is None or not len(queue.ready):
            return "RQ-03/RQ-05: no ready message in its queue to deliver"
        crossed = cluster.failed_over_held(state, key, consumer.tag)
        if crossed and not prefetch.consumer_has_credit(consumer):
            return (f"CLU-05: beyond the consumer's prefetch {consumer.prefetch}, as if its {crossed} unacked "
                    "deliveries from before the node stop had left it: they stay checked out across the failover")
        if not prefetch.consumer_has_credit(consumer):
            return f"QOS-02: beyond the consumer's prefetch {consumer.prefetch}"
        if channel.global_limit and state.traits.global_qos is not GlobalQos.PER_CONSUMER:
            return f"QOS-05: beyond the channel-wide prefetch {channel.global_limit} (what is outstanding counts)"
        return "QOS-04: beyond the limits in force"
    if all(d.delivery_tag != delivery.delivery_tag for d in mine):
        return f"ACK-01: delivery-tag {delivery.delivery_tag}, the channel's next is {channel.next_tag}"
    if all(d.body != delivery.body for d in mine):
        queue = state.queues[consumer.queue]
        text = wording.head_of_queue("RQ-02" if queue.kind == "quorum" else "RQ-01", queue.name)
        if not delivery.redelivered and mine and all(d.redelivered for d in mine):
            by = {m.requeued_by for m in queue.ready.candidates() if m.body in {d.body for d in mine}}
            text += f": {wording.overtook(by.pop() if len(by) == 1 else '')}"
        return text
    return "RQ-04: the redelivered flag"


def due(state: BrokerState) -> bool:
    """True while some consumer with room has a ready message: a delivery must still come."""
    return any(eligible(state, channel, with_grace=False) for channel in state.channels.values())


def due_on(state: BrokerState, key: ChannelKey) -> bool:
    channel = state.channels.get(key)
    return channel is not None and bool(eligible(state, channel, with_grace=False))


def _take(state: BrokerState, queue: QueueState, body: bytes) -> Message:
    for message in queue.ready.candidates():
        if message.body == body:
            queue.ready.take(message)
            message.delivered += 1
            message.failed_over = False  # taken again: a new checkout (CLU-05 attribution ends)
            return message
    raise Violation(f"{body!r} is not at the head of {queue.name} (RQ-01/RQ-02); "
                    f"ready: {queue.ready.bodies()}")


def commit_delivery(state: BrokerState, key: ChannelKey, delivery: Deliver) -> None:
    """Apply an observed basic.deliver; Violation when no rule allows it now."""
    allowed = allowed_deliveries(state, key)
    if delivery not in allowed:
        raise Violation(f"unexpected {delivery} on channel {key!r} ({_broken_rule(state, key, delivery, allowed)}); "
                        f"allowed now: {sorted(allowed, key=repr)}")
    channel = state.channels[key]
    consumer = channel.consumers[delivery.consumer_tag]
    queue = state.queues[consumer.queue]
    if not consumer_may_receive(state, channel, consumer):
        state.grace[key] -= 1  # QOS-09: an in-flight delivery under the old limit
    message = _take(state, queue, delivery.body)
    tag = channel.take_tag()
    if not consumer.no_ack:
        channel.unacked[tag] = Unacked(tag, queue.name, message, consumer.tag)
    prefetch.on_delivery(channel, consumer, queue.kind, state.traits)


def get_outcomes(state: BrokerState, key: ChannelKey, queue_name: str) -> frozenset[GetOutcome]:
    """What basic.get may answer now (QOS-07: no limit applies)."""
    channel = state.channel(key)
    queue = state.queues.get(queue_name)
    if queue is None:
        return frozenset({ChannelClosed(ReplyCode.NOT_FOUND, *BASIC_GET)})
    if not len(queue.ready):
        return frozenset({GetEmpty()})
    on_return_only = state.traits.quorum_redelivered_on_return
    return frozenset(GetOk(channel.next_tag, flag, m.body)
                     for m in queue.ready.candidates() for flag in flags(queue, m, on_return_only))


def commit_get(state: BrokerState, key: ChannelKey, queue_name: str, no_ack: bool, observed: GetOutcome) -> None:
    """Apply an observed basic.get answer (the caller closes the channel on ChannelClosed)."""
    allowed = get_outcomes(state, key, queue_name)
    if observed not in allowed:
        raise Violation(f"basic.get {queue_name} answered {observed}; allowed: {sorted(allowed, key=repr)} "
                        "(ACK-01 tag, RQ-01/02 order, RQ-04 flag, QOS-07)")
    if not isinstance(observed, GetOk):
        return
    channel = state.channels[key]
    queue = state.queues[queue_name]
    message = _take(state, queue, observed.body)
    tag = channel.take_tag()
    if not no_ack:
        channel.unacked[tag] = Unacked(tag, queue_name, message, None)


def grace_for_change(state: BrokerState, channel: ChannelState) -> int:
    """QOS-09: how many deliveries may still be in flight under the limits being replaced."""
    consumers = eligible(state, channel, with_grace=False)
    if not consumers:
        return 0
    ready = sum(len(state.queues[q].ready) for q in {c.queue for c in consumers})
    if channel.global_limit:
        return max(0, min(ready, channel.global_limit - channel.volume_low))
    return ready
