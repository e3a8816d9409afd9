"""Settlement: ack, nack, reject, recover, and what closing a channel or connection requeues.

Responsibility: consumer acknowledgements as operations on the model state, each returning
the outcome the rules prescribe.
Rules:
- ACK-03/04/05/06: `channel.settle_tags` decides; an unknown tag closes the channel with 406
  (class 60, method 80 ack / 90 reject / 120 nack) and settles nothing.
- ACK-07: requeue=true puts the messages back (RQ-01/RQ-02), requeue=false drops them (no DLX
  in the model); neither method has a reply.
- ACK-09: basic.recover requeue=true requeues every unacked delivery of the channel (one
  batch per queue) and replies recover-ok; requeue=false is connection.close 540 (60/110).
- ACK-10: cancelling a consumer leaves its deliveries outstanding (nothing here runs).
- RQ-03: a channel that closes for any reason (client close, channel error, connection close)
  requeues its unacked deliveries; its consumers go, its pending confirms die (PC-13).
- QOS-05: settling releases per-consumer credit and the limiter's volume (prefetch.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from codec.constants import METHOD_IDS, MethodId, ReplyCode
from conformance.model import prefetch
from conformance.model.channel import ChannelKey, ChannelState, Unacked, settle_tags
from conformance.model.outcomes import OK, ChannelClosed, ConnectionClosed, Outcome
from conformance.model.state import BrokerState, MultipleSettle

ACK, REJECT, NACK = (METHOD_IDS[f"basic.{name}"] for name in ("ack", "reject", "nack"))
_NAMES = {ACK: "ack", REJECT: "reject", NACK: "nack"}
RECOVER_ASYNC, RECOVER = METHOD_IDS["basic.recover-async"], METHOD_IDS["basic.recover"]


def _group_key(entry: Unacked) -> tuple[int, int | bytes]:
    """rabbit_channel:foreach_per_queue order: gets (an integer tag) before consumer tags."""
    return (0, entry.tag) if entry.consumer is None else (1, entry.consumer.encode())


def requeue(state: BrokerState, entries: Iterable[Unacked], racing: bool = False, atomic: bool = False,
            by: str = "") -> None:
    """Put settled deliveries back into their queues (RQ-01/02/04): per queue, one group per
    consumer tag and per basic.get delivery, or one group when the queue sees it as one
    operation (`atomic`: a channel closing); `racing`: a limiter resume races it (queues.py);
    `by`: the method that requeued them, kept on each message for the failure's wording."""
    per_queue: dict[str, dict[tuple[int, int | bytes], list[Unacked]]] = {}
    for entry in entries:
        if entry.queue is not None:  # None: the queue was deleted, nothing to requeue into
            key = (0, 0) if atomic else _group_key(entry)
            per_queue.setdefault(entry.queue, {}).setdefault(key, []).append(entry)
    for name, groups in per_queue.items():
        batches = []
        for key in sorted(groups):
            for entry in groups[key]:
                entry.message.returned += 1
                entry.message.requeued_by = by
            batches.append([e.message for e in groups[key]])
        state.queues[name].ready.requeue(batches, racing)


def _settle(state: BrokerState, key: ChannelKey, tag: int, multiple: bool, method: MethodId,
            requeue_them: bool) -> Outcome:
    channel = state.channel(key)
    tags = settle_tags(channel.unacked, tag, multiple)
    if tags is None:
        close_channel(state, key)  # ACK-03, then RQ-03
        return ChannelClosed(ReplyCode.PRECONDITION_FAILED, *method)
    entries = [channel.unacked.pop(t) for t in tags]
    below = tuple((e.tag, e.consumer) for e in entries if e.tag != tag and e.consumer is not None)
    if multiple and below:
        state.multiple_settles[key] = MultipleSettle(_NAMES[method], tag, below)
    racing = prefetch.requeue_races_resume(channel, state.traits)
    prefetch.on_settled(channel, entries, state.traits)
    if requeue_them:
        requeue(state, entries, racing, by="basic.recover")
    return OK


def ack(state: BrokerState, key: ChannelKey, tag: int, multiple: bool) -> Outcome:
    """basic.ack (ACK-03..06)."""
    return _settle(state, key, tag, multiple, ACK, requeue_them=False)


def nack(state: BrokerState, key: ChannelKey, tag: int, multiple: bool, requeue_them: bool) -> Outcome:
    """basic.nack (ACK-05..07)."""
    return _settle(state, key, tag, multiple, NACK, requeue_them)


def reject(state: BrokerState, key: ChannelKey, tag: int, requeue_them: bool) -> Outcome:
    """basic.reject: no multiple field, so tag 0 is always unknown (ACK-06/07)."""
    return _settle(state, key, tag, False, REJECT, requeue_them)


def recover(state: BrokerState, key: ChannelKey, requeue_them: bool = True, asynchronous: bool = False) -> Outcome:
    """basic.recover / recover-async (ACK-09)."""
    if not requeue_them:
        close_connection(state, state.channel(key).connection)
        return ConnectionClosed(ReplyCode.NOT_IMPLEMENTED, *(RECOVER_ASYNC if asynchronous else RECOVER))
    channel = state.channel(key)
    entries = list(channel.unacked.values())
    channel.unacked.clear()
    racing = prefetch.requeue_races_resume(channel, state.traits)
    prefetch.on_settled(channel, entries, state.traits)
    requeue(state, entries, racing, by="basic.recover")
    return OK


def close_channel(state: BrokerState, key: ChannelKey, requeue_unacked: bool = True, by_broker: bool = True) -> None:
    """The channel is gone (RQ-03, PC-13); its key may be opened again as a new channel."""
    channel: ChannelState | None = state.channels.pop(key, None)
    if channel is None:
        return
    if by_broker:
        maybe_sent_behind_close(state, channel)
    if requeue_unacked:
        requeue(state, channel.unacked.values(), atomic=True)
    for table in (state.owed_cancels, state.maybe_cancels, state.limbo, state.grace, state.multiple_settles):
        table.pop(key, None)


def maybe_sent_behind_close(state: BrokerState, channel: ChannelState) -> None:
    """RQ-04 and a race: when the broker raises a channel.close, a queue may already have handed the
    channel's consumers deliveries that the client never sees (RabbitMQ writes such a basic.deliver
    behind the channel.close, seen on 4.3.6 under load); back in the queue, such a message is
    redelivered. Which ones went is unknowable, so each consumer's free prefetch worth of its
    queue's ready messages, from the next one served, may come back with either flag."""
    for consumer in channel.consumers.values():
        queue = state.queues.get(consumer.queue)
        if consumer.no_ack or queue is None:
            continue
        room = consumer.prefetch - consumer.outstanding if consumer.prefetch else len(queue.ready)
        for message in queue.ready.in_order()[:max(room, 0)]:
            message.maybe_sent = True


def close_connection(state: BrokerState, connection: Hashable, by_broker: bool = True) -> None:
    """RQ-03 for every channel of the connection. The channels end in an order the client
    cannot know, so per queue their deliveries come back as one group (no order among them).
    Not modelled: a no-ack consumer on a channel that ends later may take (and lose) what an
    earlier one requeued; the machines do not close a connection that has one."""
    channels = state.channels_of(connection)
    if by_broker:
        for channel in channels:
            maybe_sent_behind_close(state, channel)
    requeue(state, [u for c in channels for u in c.unacked.values()], atomic=True)
    for channel in channels:
        close_channel(state, channel.key, requeue_unacked=False, by_broker=False)
    state.connections.pop(connection, None)
