"""BrokerModel: the executable specification's one entry point (the oracle of the machines).

Responsibility: a small, stable API over the model modules, parameterised by a profile name.
Deterministic operations return their outcome (`Ok`, `ChannelClosed(code, class, method)`,
`ConnectionClosed(...)`) and apply it, including what a closed channel or connection implies
(RQ-03). What the broker decides asynchronously is exposed as allowed sets and checked when
observed: `deliveries(ch)` / `deliver(ch, d)`, `get_outcomes(...)` / `get(...)`,
`confirm(ch, c)`, `returned(ch, r)`, `server_cancel(ch, c)`; `due()`, `unsettled(ch)` and
`owed_cancels()` say what must still come. Observations no rule allows raise `Violation`.
Rules: see the modules - settlement (ACK-03..10, RQ-03), queues (RQ-01/02/04), dispatch
(ACK-01, QOS-07/09, CCN-04), prefetch (QOS-02..08), publishing (PC-01..10), consumers
(CCN-02/03/07, QOS-06), cluster (CLU-01/02/05: a node stop between two steps). The model never
imports the reference broker.
"""

from __future__ import annotations

from collections.abc import Hashable

from conformance.model import cluster, consumers, dispatch, prefetch, publishing, settlement
from conformance.model.channel import ChannelKey, ChannelState
from conformance.model.outcomes import (
    OK,
    Confirm,
    Deliver,
    GetEmpty,
    GetOk,
    GetOutcome,
    Outcome,
    Return,
    ServerCancel,
)
from conformance.model.publishing import Published
from conformance.model.queues import QueueState
from conformance.model.state import BrokerState, ConnectionState, MultipleSettle
from conformance.model.traits import Traits, traits


class BrokerModel:
    """The model of one broker as seen by one client program (all its connections)."""

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.traits: Traits = traits(profile)
        self.state = BrokerState(self.traits)

    # -- topology ----------------------------------------------------------------------------
    def open_connection(self, connection: Hashable = 0, *, cancel_notify: bool = True) -> None:
        self.state.connections[connection] = ConnectionState(connection, cancel_notify)

    def close_connection(self, connection: Hashable = 0) -> None:
        """Client connection.close or a lost connection (RQ-03)."""
        settlement.close_connection(self.state, connection)

    def open_channel(self, ch: ChannelKey, connection: Hashable = 0) -> None:
        if connection not in self.state.connections:
            self.open_connection(connection)
        if ch in self.state.channels:
            raise ValueError(f"channel {ch!r} is already open")
        self.state.channels[ch] = ChannelState(ch, connection)

    def close_channel(self, ch: ChannelKey) -> None:
        """Client channel.close (RQ-03, PC-13): the machines drain the channel first, so nothing
        is in flight behind it."""
        settlement.close_channel(self.state, ch, by_broker=False)

    def is_open(self, ch: ChannelKey) -> bool:
        return ch in self.state.channels

    def declare_queue(self, name: str, kind: str = "classic", *, max_length: int | None = None,
                      overflow: str = "drop-head") -> None:
        if kind == "quorum" and not self.traits.quorum_queues:
            raise ValueError(f"{self.profile} has no quorum queues")
        if name not in self.state.queues:
            self.state.queues[name] = QueueState.new(name, kind, max_length, overflow)

    def delete_queue(self, name: str) -> int:
        """queue.delete (CCN-02); returns the message count of delete-ok."""
        return consumers.delete_queue(self.state, name)

    def purge_queue(self, name: str) -> int:
        return self.state.queues[name].ready.clear()

    def node_stopped_and_started(self, classic: list[str], quorum: list[str]) -> None:
        """A node stopped and started again (cluster.py): `classic` live on it (CLU-01/02), `quorum`
        keep a majority (CLU-05)."""
        cluster.node_stopped_and_started(self.state, classic, quorum)

    def failed_over_ready(self, queue: str) -> int:
        """Ready messages of `queue` that were unacked deliveries across a failover (CLU-05)."""
        return cluster.failed_over_ready(self.state, queue)

    def failed_over_held(self, ch: ChannelKey, consumer: str | None = None) -> int:
        return cluster.failed_over_held(self.state, ch, consumer)

    def declare_fanout(self, exchange: str, queues: list[str]) -> None:
        self.state.fanouts[exchange] = list(queues)

    # -- publishing --------------------------------------------------------------------------
    def publish(self, ch: ChannelKey, exchange: str, routing_key: str, body: bytes, *,
                mandatory: bool = False) -> Published:
        return publishing.publish(self.state, ch, exchange, routing_key, body, mandatory)

    def confirm_select(self, ch: ChannelKey) -> Outcome:
        return publishing.confirm_select(self.state, ch)

    def tx_select(self, ch: ChannelKey) -> Outcome:
        return publishing.tx_select(self.state, ch)

    def tx_commit(self, ch: ChannelKey) -> Outcome:
        return publishing.tx_commit(self.state, ch)

    def tx_rollback(self, ch: ChannelKey) -> Outcome:
        return publishing.tx_rollback(self.state, ch)

    def holds_publishes_for(self, queue: str) -> bool:
        return publishing.holds_publishes_for(self.state, queue)

    def closed_by_broker(self, ch: ChannelKey) -> None:
        """The broker closed the channel (after what it sent before the close was checked)."""
        settlement.close_channel(self.state, ch)

    def held_publishes(self, ch: ChannelKey) -> int:
        """How many publishes the channel's open transaction holds (TX-02)."""
        channel = self.state.channels.get(ch)
        return len(channel.held) if channel is not None else 0

    def tx_mode(self, ch: ChannelKey) -> bool:
        channel = self.state.channels.get(ch)
        return channel is not None and channel.tx

    def confirm(self, ch: ChannelKey, observed: Confirm) -> list[int]:
        return publishing.on_confirm(self.state, ch, observed)

    def returned(self, ch: ChannelKey, observed: Return) -> None:
        publishing.on_return(self.state, ch, observed)

    def unsettled(self, ch: ChannelKey) -> frozenset[int]:
        return publishing.unsettled(self.state, ch)

    def confirm_mode(self, ch: ChannelKey) -> bool:
        channel = self.state.channels.get(ch)
        return channel is not None and channel.confirm

    def expected_returns(self, ch: ChannelKey) -> int:
        channel = self.state.channels.get(ch)
        return len(channel.returns) if channel is not None else 0

    # -- consumers and deliveries ------------------------------------------------------------
    def qos(self, ch: ChannelKey, prefetch_count: int, global_: bool = False) -> Outcome:
        """basic.qos (QOS-02..05); a change while deliveries are due allows QOS-09 overshoot."""
        channel = self.state.channel(ch)
        grace = dispatch.grace_for_change(self.state, channel)
        was_limited = channel.global_limit != 0
        if prefetch.apply_qos(channel, prefetch_count, global_, self.traits):
            self.state.connections[channel.connection].global_limit = prefetch_count
        if grace:
            self.state.grace[ch] = self.state.grace.get(ch, 0) + grace
            if not was_limited and channel.global_limit:
                channel.uncounted += grace  # QOS-09: in flight, so never counted
        return OK

    def consume(self, ch: ChannelKey, queue: str, tag: str, *, no_ack: bool = False) -> Outcome:
        return consumers.consume(self.state, ch, queue, tag, no_ack)

    def cancel(self, ch: ChannelKey, tag: str) -> Outcome:
        return consumers.cancel(self.state, ch, tag)

    def server_cancel(self, ch: ChannelKey, observed: ServerCancel) -> None:
        consumers.on_server_cancel(self.state, ch, observed)

    def owed_cancels(self) -> dict[ChannelKey, frozenset[str]]:
        return consumers.owed_cancels(self.state)

    def owed_cancel_rules(self) -> dict[str, dict[ChannelKey, frozenset[str]]]:
        """`owed_cancels` by the rule that owes each: CCN-02 (queue deleted), CLU-01 (its node stopped)."""
        return consumers.owed_cancel_rules(self.state)

    def may_reuse_tag(self, ch: ChannelKey, tag: str) -> bool:
        """False while the broker may or may not still know the tag (CCN-02 races)."""
        return not consumers.in_limbo(self.state, ch, tag)

    def deliveries(self, ch: ChannelKey) -> frozenset[Deliver]:
        return dispatch.allowed_deliveries(self.state, ch)

    def multiple_settle(self, ch: ChannelKey) -> MultipleSettle | None:
        """The channel's last multiple=true settle that also settled consumer deliveries below
        the tag it named (ACK-05/06), if any."""
        return self.state.multiple_settles.get(ch)

    def due_consumers(self) -> list[tuple[ChannelKey, str, bool]]:
        """(channel, consumer tag, no_ack) of every consumer a delivery must still come to."""
        return [(key, c.tag, c.no_ack) for key, channel in self.state.channels.items()
                for c in dispatch.eligible(self.state, channel, with_grace=False)]

    def deliver(self, ch: ChannelKey, observed: Deliver) -> None:
        dispatch.commit_delivery(self.state, ch, observed)

    def due(self, ch: ChannelKey | None = None) -> bool:
        """A delivery must still come (anywhere, or on channel `ch`)."""
        return dispatch.due(self.state) if ch is None else dispatch.due_on(self.state, ch)

    def quiesce(self) -> None:
        """The client has seen everything that was in flight: end QOS-09 allowances, and
        requeues racing a limiter resume have landed (queues.py)."""
        self.state.grace.clear()
        for channel in self.state.channels.values():
            channel.uncounted = 0
        for queue in self.state.queues.values():
            queue.ready.land()

    def get_outcomes(self, ch: ChannelKey, queue: str) -> frozenset[GetOutcome]:
        return dispatch.get_outcomes(self.state, ch, queue)

    def get(self, ch: ChannelKey, queue: str, observed: GetOutcome, *, no_ack: bool = False) -> None:
        """Apply an observed basic.get answer (Violation if not allowed; 404 closes the channel)."""
        dispatch.commit_get(self.state, ch, queue, no_ack, observed)
        if not isinstance(observed, (GetOk, GetEmpty)):
            settlement.close_channel(self.state, ch)

    # -- acknowledgements --------------------------------------------------------------------
    def ack(self, ch: ChannelKey, tag: int, multiple: bool = False) -> Outcome:
        return settlement.ack(self.state, ch, tag, multiple)

    def nack(self, ch: ChannelKey, tag: int, multiple: bool = False, requeue: bool = True) -> Outcome:
        return settlement.nack(self.state, ch, tag, multiple, requeue)

    def reject(self, ch: ChannelKey, tag: int, requeue: bool = True) -> Outcome:
        return settlement.reject(self.state, ch, tag, requeue)

    def recover(self, ch: ChannelKey, requeue: bool = True) -> Outcome:
        return settlement.recover(self.state, ch, requeue)

    # -- queries -----------------------------------------------------------------------------
    def queues(self) -> list[str]:
        return list(self.state.queues)

    def has_queue(self, name: str) -> bool:
        return name in self.state.queues

    def ready(self, queue: str) -> int:
        return len(self.state.queues[queue].ready)

    def ready_bodies(self, queue: str) -> list[bytes]:
        return self.state.queues[queue].ready.bodies()

    def unacked_tags(self, ch: ChannelKey) -> tuple[int, ...]:
        channel = self.state.channels.get(ch)
        return channel.unacked_tags() if channel is not None else ()

    def consumer_tags(self, ch: ChannelKey) -> tuple[str, ...]:
        channel = self.state.channels.get(ch)
        return tuple(channel.consumers) if channel is not None else ()

    def consumer_no_ack(self, ch: ChannelKey, tag: str) -> bool:
        return self.state.channel(ch).consumers[tag].no_ack

    def consumer_queue(self, ch: ChannelKey, tag: str) -> str:
        return self.state.channel(ch).consumers[tag].queue

    def global_limit_active(self, ch: ChannelKey) -> bool:
        return self.state.channel(ch).global_limit != 0
