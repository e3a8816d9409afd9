"""Prefetch: basic.qos, and whether a consumer may receive one more message now.

Responsibility: the limits of QOS-02..09 as pure functions over the channel's plain data.
Rules:
- QOS-02: `global=false` sets the prefetch that consumers created afterwards keep; 0 is
  unlimited (QOS-10). A consumer may receive while its unacked count is below it.
- QOS-03/04: on rabbitmq ≤4.2 `global=true` is the channel's limiter, enforced together with
  the per-consumer limits; rabbitmq-4.3 rewrites it to `global=false`. On those versions a
  `global=false` qos also switches the channel's limiter off (rabbit_channel's global=false
  clause calls rabbit_limiter:unlimit_prefetch), as does `global=true, prefetch_count=0`.
- QOS-05: the limiter counts a "volume": switching it on from off starts the volume at the
  channel's unacked count, basic.get deliveries included; changing an active limit keeps the
  volume; each limited delivery adds 1; settling (ack, nack, reject, recover) consumer
  deliveries subtracts their number (basic.get ones are not subtracted, the TODO QOS-05
  mentions). Only classic queues ask the limiter (QOS-06 keeps quorum consumers away).
- QOS-07: basic.get ignores every limit. QOS-08: no-ack consumers have no per-consumer limit
  and add nothing to the volume, but a reached channel limit pauses them too (classic).
- QOS-09: a limit switched on while deliveries are in flight does not count those (they were
  decided before it, and the channel had not recorded them yet), so the volume is known
  only as a range: `volume` counts them, `volume_low` does not. A delivery may come while
  the low bound is below the limit; one must come while the high bound is.
- 0-9-1 profile: `global=false` is one limit for the channel's consumers, `global=true` one
  for the connection's; both count unacked consumer deliveries.
"""

from __future__ import annotations

from collections.abc import Iterable

from conformance.model.channel import ChannelState, Consumer, Unacked
from conformance.model.traits import GlobalQos, Traits


def consumer_has_credit(consumer: Consumer) -> bool:
    """QOS-02/08: below its own prefetch (or unlimited, or no-ack)."""
    return consumer.no_ack or consumer.prefetch == 0 or consumer.outstanding < consumer.prefetch  # = take_credit


def limiter_reached(channel: ChannelState, optimistic: bool = False) -> bool:
    """QOS-03: rabbit_limiter's prefetch_limit_reached (limit ≠ 0 and volume ≥ limit);
    `optimistic`: judged by the low bound of the volume (QOS-09)."""
    volume = channel.volume_low if optimistic else channel.volume
    return channel.global_limit != 0 and volume >= channel.global_limit


def requeue_races_resume(channel: ChannelState, traits: Traits) -> bool:
    """A requeue may also resume a reached channel limiter: the two race (queues.py). The
    limiter's count is inexact (QOS-05/09: uncounted in-flight deliveries, get acks not
    subtracted), so any active channel limit is treated as possibly reached: seen live on
    3.10.8, a never-delivered message can overtake the requeued ones after basic.recover."""
    return traits.global_qos is GlobalQos.CHANNEL and channel.global_limit != 0


def channel_allows(channel: ChannelState, queue_kind: str, traits: Traits, connection_unacked: int,
                   connection_limit: int, optimistic: bool = False) -> bool:
    """Whether the channel-wide (or connection-wide) limit lets one more delivery through
    (`optimistic`: may, judged by the low bound of the volume; else must)."""
    if traits.global_qos is GlobalQos.CHANNEL:
        return queue_kind != "classic" or not limiter_reached(channel, optimistic)
    if traits.global_qos is GlobalQos.CONNECTION:
        own = consumer_unacked(channel)
        if channel.global_limit and own >= channel.global_limit:
            return False
        return not (connection_limit and connection_unacked >= connection_limit)
    return True


def consumer_unacked(channel: ChannelState) -> int:
    return sum(1 for u in channel.unacked.values() if u.consumer is not None)


def apply_qos(channel: ChannelState, count: int, global_: bool, traits: Traits, unacked: int | None = None) -> bool:
    """Apply basic.qos to the channel; True when the connection-wide limit is to be set.
    `unacked`: the channel's unacked deliveries when the broker applies it (default: the
    model's own `channel.unacked`; a trace observer counts them itself)."""
    if traits.global_qos is GlobalQos.CONNECTION:
        if global_:
            return True
        channel.global_limit = count  # 0-9-1: one limit for the channel's consumers
        return False
    if global_ and traits.global_qos is GlobalQos.CHANNEL:
        if count == 0:
            _unlimit(channel)
        else:
            if channel.global_limit == 0:
                channel.volume = channel.volume_low = len(channel.unacked) if unacked is None else unacked  # QOS-05
            channel.global_limit = count
        return False
    channel.consumer_prefetch = count  # QOS-02 (and QOS-03 on 4.3: global=true rewritten)
    _unlimit(channel)  # unlimit_prefetch: a no-op unless ≤4.2 global
    return False


def _unlimit(channel: ChannelState) -> None:
    channel.global_limit = channel.volume = channel.volume_low = channel.uncounted = 0


def take_credit(channel: ChannelState, consumer: Consumer, queue_kind: str, traits: Traits) -> bool:
    """Count a delivery to `consumer` against its own and the channel's limit; False when the
    consumer had no credit for it (QOS-02/08: `consumer_has_credit`), which no rule allows."""
    if consumer.no_ack:
        return True
    allowed = consumer.prefetch == 0 or consumer.outstanding < consumer.prefetch
    consumer.outstanding += 1
    if channel.global_limit and traits.global_qos is GlobalQos.CHANNEL and queue_kind == "classic":
        channel.volume += 1
        if channel.uncounted:
            channel.uncounted -= 1  # QOS-09: maybe decided before the limit existed
        else:
            channel.volume_low += 1
    return allowed


def on_delivery(channel: ChannelState, consumer: Consumer, queue_kind: str, traits: Traits) -> None:
    """Count a delivery to `consumer` against its own and the channel's limit."""
    take_credit(channel, consumer, queue_kind, traits)


def on_settled(channel: ChannelState, entries: Iterable[Unacked], traits: Traits) -> None:
    """Release the limits held by settled (acked, rejected, requeued) deliveries."""
    release(channel, [entry.consumer for entry in entries], traits)


def release(channel: ChannelState, consumer_tags: Iterable[str | None], traits: Traits) -> None:
    """QOS-05: settling deliveries of these consumers (None: basic.get) frees their credit."""
    for tag in consumer_tags:
        if tag is not None:  # basic.get: holds no per-consumer credit, never subtracted (QOS-05)
            release_one(channel, tag, traits)


def release_one(channel: ChannelState, consumer_tag: str, traits: Traits) -> None:
    """QOS-05 for one settled consumer delivery."""
    consumer = channel.consumers.get(consumer_tag)
    if consumer is not None and consumer.outstanding > 0:
        consumer.outstanding -= 1
    if channel.global_limit and traits.global_qos is GlobalQos.CHANNEL:
        # rabbit_limiter {ack, Count}: a zero volume stays zero, otherwise it may go below 0
        channel.volume = 0 if channel.volume == 0 else channel.volume - 1
        channel.volume_low = 0 if channel.volume_low == 0 else channel.volume_low - 1
