"""The state of a broker that runs as several nodes: declared apart from the
functions (core/cluster.py) so that `BrokerState` can hold it without an import cycle.

Rules: plain data, changed only by core/cluster.py; nodes are numbered 1..size; `None` in
`BrokerState.cluster` is a single node, whose behaviour nothing here changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reference_broker.core.state import Channel, Message, Queue


@dataclass(slots=True, eq=False)
class Held:
    """A publish a quorum queue without a majority holds (CLU-07): enqueued, and its confirm
    released, when a majority is back. `confirm`: (the publishing channel, seqno) or None; the
    channel object itself, so that a channel opened again under its number gets no stray ack."""

    queue: Queue
    message: Message
    confirm: tuple[Channel, int] | None = None


@dataclass(eq=False)
class Cluster:
    size: int
    down: set[int] = field(default_factory=set)
    conn_node: dict[int, int] = field(default_factory=dict)  # connection -> the node it came in on
    held: list[Held] = field(default_factory=list)  # in publish order
    holding: list[Held] = field(default_factory=list)  # held by the publish being routed now
    recovering: dict[Queue, list[Message]] = field(default_factory=dict)  # classic: back at its restart
    crashing: set[int] = field(default_factory=set)  # crashed nodes (killed, not stopped): disconnected.py
    suspected: dict[int, tuple[int, Queue, Message]] = field(default_factory=dict)  # -> (node, queue, message)
    next_suspect: int = 0
    # BrokerConfig.metadata_lag: a queue -> (the node that declared it, when the others learn of it, ms)
    unseen: dict[Queue, tuple[int, int]] = field(default_factory=dict)
    now_ms: int = 0  # the time of the command being handled (BrokerCore.apply): the lag's clock

    def running(self, node: int) -> bool:
        return node not in self.down

    def node_of(self, conn: int) -> int:
        return self.conn_node.get(conn, 1)

    def name(self, node: int) -> str:
        return f"reference{node}@localhost"
