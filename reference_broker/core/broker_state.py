"""The broker's state, declared in one place: what every concern module reads and changes.

Rules:
- `BrokerState` holds every mutable field of the broker (vhosts, connections, policies, the
  memory alarm, the durability journal); the entities it holds are in `state.py`. The
  concern modules (publish, settlement, consumers, delivery, timeouts, durability, flow,
  permissions, ...) take it as their first argument, named `core`, and never import the
  router (`router.py`).
- `rules` are the policy functions chosen once at construction (`rules.py`): the rules of
  RabbitMQ, or a named fault's substitution of some of them (`reference_broker.faults`).
- Time arrives in `Meta`; nothing here reads a clock, the environment or a socket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_broker.config import BrokerConfig
from reference_broker.core.cluster_state import Cluster
from reference_broker.core.journal import StoreOp
from reference_broker.core.rules import Rules
from reference_broker.core.state import Channel, Connection, Exchange, Queue, Unacked, VHost

DEFAULT_EXCHANGES = (("", "direct"), ("amq.direct", "direct"), ("amq.fanout", "fanout"),
                     ("amq.topic", "topic"), ("amq.headers", "headers"), ("amq.match", "headers"))


@dataclass(frozen=True, slots=True)
class Meta:
    """What the core may know about the outside world: the time (monotonic ms)."""

    now_ms: int


@dataclass(eq=False)
class BrokerState:
    """All broker state. `faults` names the faults whose substitutions are in `rules`."""

    config: BrokerConfig
    rules: Rules = field(default_factory=Rules)
    faults: frozenset[str] = frozenset()
    vhosts: dict[str, VHost] = field(default_factory=dict)
    connections: dict[int, Connection] = field(default_factory=dict)
    policies: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # vhost -> name -> policy
    operator_policies: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # the same (POL-03)
    policy_version: int = 0
    alarms: frozenset[str] = frozenset()  # resources in alarm (core/alarms.py)
    memory_over: bool = False  # the memory monitor's own alarm (over the watermark)
    published: bool = False  # a publish since the last flush
    counter: int = 0  # server-named queues and consumer tags
    # durability.py: the journal for the store (None: nothing is stored, no data_dir)
    journal: list[StoreOp] | None = None
    journal_pos: int = 0  # ops journalled since the start
    stored_pos: int = 0  # ops the store has made durable
    store_seq: int = 0  # the last store id given to a message
    defs_dirty: bool = False  # durable definitions may have changed since the last flush
    awaiting_store: dict[tuple[int, int], Channel] = field(default_factory=dict)  # confirms/commit-ok held
    cluster: Cluster | None = None  # several nodes (core/cluster.py); None: a single node
    clock_offset_ms: int = 0  # wall clock minus Meta.now_ms, set by the transport (x-death times, DLX-02)

    def __post_init__(self) -> None:
        if self.journal is None and self.config.data_dir:
            self.journal = []
        if self.config.nodes > 1:
            self.cluster = Cluster(self.config.nodes)
        for name in self.config.vhosts:
            self.add_vhost(name)

    def add_vhost(self, name: str) -> VHost:
        vhost = self.vhosts.setdefault(name, VHost(name))
        for ex_name, kind in DEFAULT_EXCHANGES:
            vhost.exchanges.setdefault(ex_name, Exchange(ex_name, kind))
        return vhost

    def next_id(self) -> int:
        self.counter += 1
        return self.counter

    def find_queue(self, vhost: str, name: str) -> Queue | None:
        v = self.vhosts.get(vhost)
        return v.queues.get(name) if v else None

    def queue_of(self, vhost: str, unacked: Unacked) -> Queue | None:
        """The queue an unacked delivery came from; None once it was deleted (a queue declared
        again under its name is another queue: RabbitMQ's queue process is gone)."""
        return None if unacked.orphaned else self.find_queue(vhost, unacked.queue)
