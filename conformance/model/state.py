"""The whole model state as plain data: connections, channels, queues, exchanges.

Responsibility: hold what the operations in dispatch/settlement/publishing read and change,
and nothing else (no behaviour beyond lookups). `Violation` is how the model reports a broker
observation that the rules do not allow; it is an AssertionError so a machine fails with it.
Rules: a channel belongs to one connection (RQ-03 requeues per connection on its close);
cancel notification is chosen per connection (CCN-01); a fanout exchange routes to every
bound queue and the default exchange "" to the queue named by the routing key.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from conformance.model.channel import ChannelKey, ChannelState
from conformance.model.queues import QueueState
from conformance.model.traits import Traits


class Violation(AssertionError):
    """The broker did something no rule allows; the message names the rule."""


@dataclass(frozen=True, slots=True)
class MultipleSettle:
    """A basic.ack/nack multiple=true that settled consumer deliveries below the tag it named
    (ACK-05/06): what a missing delivery may be owed to, if the broker settled only the named tag."""

    method: str  # "ack" | "nack"
    named: int
    below: tuple[tuple[int, str], ...]  # (delivery tag, consumer tag) of the deliveries below the named tag

    def tags_of(self, consumer: str) -> list[int]:
        return [tag for tag, owner in self.below if owner == consumer]


@dataclass(slots=True)
class ConnectionState:
    key: Hashable
    cancel_notify: bool  # CCN-01: the client advertised consumer_cancel_notify
    global_limit: int = 0  # 0-9-1 spec only: basic.qos global=true is per connection


@dataclass(slots=True)
class BrokerState:
    traits: Traits
    queues: dict[str, QueueState] = field(default_factory=dict)
    fanouts: dict[str, list[str]] = field(default_factory=dict)  # exchange -> bound queues
    connections: dict[Hashable, ConnectionState] = field(default_factory=dict)
    channels: dict[ChannelKey, ChannelState] = field(default_factory=dict)
    owed_cancels: dict[ChannelKey, set[str]] = field(default_factory=dict)  # CCN-02: must come
    cancel_causes: dict[tuple[ChannelKey, str], str] = field(default_factory=dict)  # owed cancel -> its rule
    maybe_cancels: dict[ChannelKey, set[str]] = field(default_factory=dict)  # CCN-03 race: may come
    limbo: dict[ChannelKey, set[str]] = field(default_factory=dict)  # dropped silently, when unknown
    grace: dict[ChannelKey, int] = field(default_factory=dict)  # QOS-09: transient overshoot allowed
    multiple_settles: dict[ChannelKey, MultipleSettle] = field(default_factory=dict)  # the channel's last one

    def channel(self, key: ChannelKey) -> ChannelState:
        try:
            return self.channels[key]
        except KeyError:
            raise KeyError(f"channel {key!r} is not open in the model") from None

    def channels_of(self, connection: Hashable) -> list[ChannelState]:
        return [c for c in self.channels.values() if c.connection == connection]

    def route(self, exchange: str, routing_key: str) -> list[str]:
        """The queues a publish reaches (default exchange or a declared fanout)."""
        if exchange == "":
            return [routing_key] if routing_key in self.queues else []
        if exchange not in self.fanouts:
            raise KeyError(f"exchange {exchange!r} is not declared in the model")
        return [q for q in self.fanouts[exchange] if q in self.queues]
