"""Consumers: basic.consume, basic.cancel, queue deletion and cancel notification.

Responsibility: creating and removing consumers, and what the broker must, may or must not
send when a consumer's queue goes away.
Rules:
- QOS-02: a new consumer keeps the channel's consumer prefetch of that moment.
- QOS-06: on rabbitmq ≤4.2, consuming from a quorum queue while the channel's limiter is
  active is connection.close 540 (60/20).
- CCN-07: a tag already in use on the channel is connection.close 530 (60/20); a missing
  queue is channel.close 404 (60/20).
- CCN-02: deleting a queue drops its consumers; on a connection that advertised
  consumer_cancel_notify the broker must send basic.cancel{tag}; without it, nothing.
  CLU-01: the same when the node a classic queue lives on stops (`delete_queue` with
  rule="CLU-01"); each owed cancel remembers the rule that owes it (`owed_cancel_rules`).
- CCN-03: basic.cancel of an unknown or already cancelled tag is answered cancel-ok. A client
  cancel that races the broker's own cancel leaves that broker cancel optional.
- CCN-04: a consumer receives nothing after its cancel-ok (it leaves the channel's consumers).
- ACK-10: cancelling leaves the consumer's deliveries outstanding.
Tags whose consumer the broker drops at an unknown moment (no notification) are kept in
`limbo`; reusing them has no single defined outcome, so `consume` refuses to predict it.
"""

from __future__ import annotations

from codec.constants import METHOD_IDS, ReplyCode
from conformance.model.channel import ChannelKey, Consumer
from conformance.model.outcomes import OK, ChannelClosed, ConnectionClosed, Outcome, ServerCancel
from conformance.model.settlement import close_channel, close_connection
from conformance.model.state import BrokerState, Violation
from conformance.model.traits import GlobalQos

BASIC_CONSUME = METHOD_IDS["basic.consume"]


def in_limbo(state: BrokerState, key: ChannelKey, tag: str) -> bool:
    """The broker drops (or dropped) this consumer at a moment the client cannot know."""
    return any(tag in table.get(key, ()) for table in (state.owed_cancels, state.maybe_cancels, state.limbo))


def consume(state: BrokerState, key: ChannelKey, queue_name: str, tag: str, no_ack: bool = False) -> Outcome:
    channel = state.channel(key)
    if tag in channel.consumers:
        close_connection(state, channel.connection)
        return ConnectionClosed(ReplyCode.NOT_ALLOWED, *BASIC_CONSUME)  # CCN-07
    if in_limbo(state, key, tag):
        raise ValueError(f"consumer tag {tag!r} on {key!r} races a broker-side cancel: no single outcome")
    queue = state.queues.get(queue_name)
    if queue is None:
        close_channel(state, key)
        return ChannelClosed(ReplyCode.NOT_FOUND, *BASIC_CONSUME)  # CCN-07
    limited = state.traits.global_qos is GlobalQos.CHANNEL and channel.global_limit != 0
    if limited and queue.kind == "quorum":
        close_connection(state, channel.connection)
        return ConnectionClosed(ReplyCode.NOT_IMPLEMENTED, *BASIC_CONSUME)  # QOS-06
    channel.consumers[tag] = Consumer(tag, queue_name, no_ack, channel.consumer_prefetch)
    return OK


def cancel(state: BrokerState, key: ChannelKey, tag: str) -> Outcome:
    """Client basic.cancel: always cancel-ok (CCN-03); deliveries stay (ACK-10)."""
    channel = state.channel(key)
    channel.consumers.pop(tag, None)
    owed = state.owed_cancels.get(key, set())
    if tag in owed:  # CCN-03: the broker's cancel and ours race; its notification may come
        owed.discard(tag)
        state.maybe_cancels.setdefault(key, set()).add(tag)
    return OK


def delete_queue(state: BrokerState, name: str, rule: str = "CCN-02") -> int:
    """queue.delete: drop the queue and its consumers (CCN-02; `rule` CLU-01 when its node
    stopped); returns the ready count."""
    queue = state.queues.pop(name)
    for channel in state.channels.values():
        for entry in channel.unacked.values():
            if entry.queue == name:
                entry.queue = None  # its acks still succeed; a requeue has nowhere to go
        notify = state.connections[channel.connection].cancel_notify
        for tag, consumer in list(channel.consumers.items()):
            if consumer.queue != name:
                continue
            del channel.consumers[tag]
            table = state.owed_cancels if notify else state.limbo
            table.setdefault(channel.key, set()).add(tag)
            state.cancel_causes[(channel.key, tag)] = rule
    return len(queue.ready)


def on_server_cancel(state: BrokerState, key: ChannelKey, observed: ServerCancel) -> None:
    """Check a broker-sent basic.cancel (CCN-02/03)."""
    tag = observed.consumer_tag
    for table in (state.owed_cancels, state.maybe_cancels):
        tags = table.get(key, set())
        if tag in tags:
            tags.discard(tag)
            return
    notify = state.connections[state.channel(key).connection].cancel_notify
    why = "its queue was not deleted" if notify else "the connection did not advertise consumer_cancel_notify"
    raise Violation(f"broker sent basic.cancel for {tag!r} on channel {key!r} but {why} (CCN-01/CCN-02); "
                    "or the client had cancelled it already")


def owed_cancels(state: BrokerState) -> dict[ChannelKey, frozenset[str]]:
    """Broker basic.cancel notifications that must still arrive (CCN-02)."""
    return {k: frozenset(v) for k, v in state.owed_cancels.items() if v}


def owed_cancel_rules(state: BrokerState) -> dict[str, dict[ChannelKey, frozenset[str]]]:
    """The owed notifications (`owed_cancels`) by the rule that owes each: CCN-02 (its queue was
    deleted) or CLU-01 (its queue's node stopped)."""
    found: dict[str, dict[ChannelKey, set[str]]] = {}
    for key, tags in state.owed_cancels.items():
        for tag in sorted(tags):
            rule = state.cancel_causes.get((key, tag), "CCN-02")
            found.setdefault(rule, {}).setdefault(key, set()).add(tag)
    return {rule: {k: frozenset(v) for k, v in by_key.items()} for rule, by_key in sorted(found.items())}
