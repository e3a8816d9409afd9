"""Broker state: vhosts, exchanges, queues, connections, channels, consumers, messages.

Rules:
- Plain mutable data owned by the core; read it through the methods here, change it only
  from the handlers in `reference_broker.core` (the transport never touches it).
- Classic queues put a requeued message back at its original position (RQ-01): ready
  messages sit in a heap keyed by their enqueue sequence. Quorum queues serve returned
  messages first, in return order (RQ-02): a returns FIFO ahead of the main FIFO.
- Priorities (PRI-01, PRI-02): ready messages sit in one `Lane` per priority level, the highest
  level served first, each lane in the order above. A classic queue has levels only with
  x-max-priority (0..max; no priority counts as 0, above max as max: rabbit_priority_queue); a
  quorum queue always has them, as 4.3's rabbit_fifo_pq: 0..31, no priority counts as 4.
- Delivery tags count per channel from 1, shared by consume and get (ACK-01).
- Stream queues keep an append-only `log` (offsets are its indices) instead of ready
  messages; each stream consumer reads it from its own `offset` (streams.py).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from codec import BasicProperties

CLASSIC = "classic"
QUORUM = "quorum"
STREAM = "stream"
QUORUM_MAX_PRIORITY = 31  # rabbit_fifo ?MAX_PRIORITY (4.3)
QUORUM_DEFAULT_PRIORITY = 4  # rabbit_fifo ?DEFAULT_PRIORITY (4.3)


@dataclass(slots=True, eq=False)
class Message:
    exchange: str
    routing_key: str
    properties: BasicProperties
    body: bytes
    seq: int = 0  # enqueue position in its queue
    delivered: bool = False  # classic redelivered flag (RQ-04)
    delivery_count: int = 0  # quorum, 4.3: failed attempts only (RQ-05, RQ-06)
    acquired_count: int = 0  # quorum: every checkout
    expires_at: int | None = None  # absolute ms, from x-message-ttl / expiration
    store_id: int = 0  # its row in the durable store (0: not stored), durability.py
    level: int = 0  # the priority level it waits at in its queue (PRI-01, PRI-02)
    written_at: int = 0  # ms (monotonic) it was appended to a stream's log
    arriving: bool = False  # being published: a consumer with room takes it whatever its TTL (TTL-05)
    routes: tuple[str, ...] = ()  # the keys it was routed by, CC and BCC ones after its own (DLX-06)
    deaths: list[dict[str, Any]] | None = None  # the deaths the broker recorded, newest first (DLX-07, 4.x)

    def copy_for_queue(self) -> Message:
        return Message(self.exchange, self.routing_key, self.properties, self.body, routes=self.routes,
                       deaths=self.deaths)


@dataclass(slots=True, eq=False)
class Consumer:
    tag: str
    conn: int
    channel: int
    queue: str
    no_ack: bool
    exclusive: bool
    prefetch: int  # 0 = unlimited (QOS-02)
    arguments: dict[str, Any]
    priority: int = 0
    unacked: int = 0
    timeout_ms: int | None = None  # effective consumer timeout (TMO-03), quorum only
    timed_out: set[int] = field(default_factory=set)  # delivery tags returned by a timeout
    offset: int = 0  # stream consumers: the next offset of the log it reads

    @property
    def key(self) -> str:
        """Unique across channels (tags are unique per channel only)."""
        return f"{self.tag}@{self.conn}.{self.channel}"

    def has_capacity(self, window: int) -> bool:
        """`window`: the prefetch count as the rules apply it (QOS-02)."""
        return not self.timed_out and (self.no_ack or self.prefetch == 0 or self.unacked < window)


@dataclass(slots=True, eq=False)
class Unacked:
    tag: int
    queue: str
    message: Message
    consumer_tag: str | None  # None for basic.get
    delivered_at: int
    timed_out: bool = False  # returned by a 4.3 timeout; a late ack is accepted (TMO-4.3-5)
    deadline: int | None = None  # 4.3 quorum consumer timeout (TMO-4.3-2)
    orphaned: bool = False  # its queue was deleted: settling forgets it, even if the name is declared again


@dataclass(slots=True, eq=False)
class Lane:
    """Ready messages of one priority level: never delivered ones in order, requeued ones
    (classic) in a small heap by their position, so the lowest position goes first (RQ-01)."""

    fresh: deque[Message] = field(default_factory=deque)
    heap: list[tuple[int, Message]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.fresh) + len(self.heap)

    def pop(self) -> Message | None:
        if self.heap and (not self.fresh or self.heap[0][0] < self.fresh[0].seq):
            return heapq.heappop(self.heap)[1]
        return self.fresh.popleft() if self.fresh else None

    def peek(self) -> Message | None:
        """What `pop` would return, left in place."""
        if self.heap and (not self.fresh or self.heap[0][0] < self.fresh[0].seq):
            return self.heap[0][1]
        return self.fresh[0] if self.fresh else None

    def remove(self, message: Message) -> bool:
        if message in self.fresh:
            self.fresh.remove(message)
            return True
        entries = [entry for entry in self.heap if entry[1] is not message]
        if len(entries) == len(self.heap):
            return False
        self.heap[:] = entries
        heapq.heapify(self.heap)
        return True

    def messages(self) -> list[Message]:
        return [*self.fresh, *(m for _seq, m in self.heap)]


@dataclass(slots=True, eq=False)
class Queue:
    name: str
    vhost: str
    kind: str
    durable: bool
    exclusive_owner: int | None
    auto_delete: bool
    arguments: dict[str, Any]
    consumers: dict[str, Consumer] = field(default_factory=dict)
    rotation: deque[str] = field(default_factory=deque)
    checked_out: int = 0
    next_seq: int = 0
    had_consumer: bool = False
    lease_until: int | None = None  # x-expires: when the queue is deleted unless used (lease.py)
    policy_cache: tuple[int, dict[str, Any]] | None = None
    ready_bytes: int = 0  # body octets of ready messages (the memory alarm's measure)
    deadlines: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (conn, ch, tag) -> ms
    timer_at: int | None = None  # when the queue's timeout timer is armed for
    ttl_timer_at: int | None = None  # when its head's TTL timer is armed for (TTL-03)
    overflow_blocked: bool = False  # a quorum queue over a limit under reject-publish (LEN-04, limits.py)
    log: list[Message] = field(default_factory=list)  # stream queues: every message, by offset
    node: int = 1  # cluster (core/cluster.py): a classic queue's node, a quorum queue's leader
    members: tuple[int, ...] = ()  # cluster: a quorum queue's member nodes
    _lanes: dict[int, Lane] = field(default_factory=dict)  # priority level -> its ready messages
    _levels: list[int] = field(default_factory=list)  # the lanes' levels, highest first
    _returns: deque[Message] = field(default_factory=deque)  # quorum returns first

    def declared_consumer_count(self) -> int:
        """queue.declare-ok's consumer_count. A single-active-consumer quorum queue counts only
        its active consumer, not the waiting ones (rabbit_fifo:query_stat/1, live 4.3.6); a
        timed-out consumer that still holds deliveries stays the active one."""
        if self.kind == QUORUM and self.arguments.get("x-single-active-consumer") is True:
            return int(any(not c.timed_out or c.unacked for c in self.consumers.values()))
        return len(self.consumers)

    # -- ready messages ------------------------------------------------------------
    def level(self, message: Message, one_level_at_zero: bool = False) -> int:
        """The priority level a message waits at (PRI-01 classic, PRI-02 quorum). x-max-priority 0
        has levels 0 and 1, as 1 does (from 3.13.4: max(1, M)); `one_level_at_zero`: as before."""
        priority = message.properties.priority
        if self.kind == QUORUM:
            return QUORUM_DEFAULT_PRIORITY if priority is None else min(priority, QUORUM_MAX_PRIORITY)
        top = self.arguments.get("x-max-priority")
        if not isinstance(top, int) or isinstance(top, bool) or top < 0 or (top == 0 and one_level_at_zero):
            return 0
        return min(priority or 0, max(1, top))

    def _lane(self, level: int) -> Lane:
        lane = self._lanes.get(level)
        if lane is None:
            lane = self._lanes[level] = Lane()
            self._levels.append(level)
            self._levels.sort(reverse=True)
        return lane

    def ready_count(self) -> int:
        return len(self._returns) + sum(len(lane) for lane in self._lanes.values())

    def enqueue(self, message: Message, level: int | None = None) -> None:
        """At the tail of its level (`level` as the rules chose it, else `Queue.level`)."""
        message.seq = self.next_seq
        self.next_seq += 1
        self.ready_bytes += len(message.body)
        message.level = self.level(message) if level is None else level
        self._lane(message.level).fresh.append(message)

    def return_message(self, message: Message) -> None:
        """Put a delivered message back (RQ-01 classic position, RQ-02 quorum returns first)."""
        self.ready_bytes += len(message.body)
        if self.kind == QUORUM:
            self._returns.append(message)
        else:
            heapq.heappush(self._lane(message.level).heap, (message.seq, message))

    def pop(self) -> Message | None:
        message = self._pop()
        if message is not None:
            self.ready_bytes -= len(message.body)
        return message

    def _pop(self) -> Message | None:
        """Next message: quorum returns first (RQ-02); then the highest non-empty level."""
        if self.kind == QUORUM and self._returns:
            return self._returns.popleft()
        for level in self._levels:
            message = self._lanes[level].pop()
            if message is not None:
                return message
        return None

    def head(self) -> Message | None:
        """What `pop` would return, left in place (the message TTL-03 expires first)."""
        if self.kind == QUORUM and self._returns:
            return self._returns[0]
        for level in self._levels:
            message = self._lanes[level].peek()
            if message is not None:
                return message
        return None

    def remove(self, message: Message) -> None:
        """Take a ready message out wherever it is (used only by the late-ack fault)."""
        if message in self._returns:
            self._returns.remove(message)
            self.ready_bytes -= len(message.body)
            return
        for lane in self._lanes.values():
            if lane.remove(message):
                self.ready_bytes -= len(message.body)
                return

    def purge(self) -> int:
        count = self.ready_count()
        self.ready_bytes = 0
        self._lanes.clear()
        self._levels.clear()
        self._returns.clear()
        return count

    def ready_messages(self) -> list[Message]:
        """In delivery order."""
        lanes = [sorted(self._lanes[level].messages(), key=lambda m: m.seq) for level in self._levels]
        return [*self._returns, *(m for lane in lanes for m in lane)]

    def append_to_log(self, message: Message, now_ms: int) -> None:
        """A stream's message goes at the end of its log: its offset is its position."""
        message.seq = len(self.log)
        message.written_at = now_ms
        self.log.append(message)

    # -- consumers -------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers[consumer.key] = consumer
        self.rotation.append(consumer.key)
        self.had_consumer = True

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.consumers.pop(consumer.key, None) is not None:
            self.rotation.remove(consumer.key)


@dataclass(slots=True, eq=False)
class Binding:
    destination: str
    is_exchange: bool
    routing_key: str
    arguments: dict[str, Any]

    def key(self) -> tuple[str, bool, str, tuple[tuple[str, str], ...]]:
        return (self.destination, self.is_exchange, self.routing_key,
                tuple(sorted((k, repr(v)) for k, v in self.arguments.items())))


@dataclass(slots=True, eq=False)
class Exchange:
    name: str
    kind: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)
    bindings: list[Binding] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class PendingPublish:
    """A publish inside a transaction, held until the commit (TX-02); `queues`: where it was
    routed when published (TX-06), None when the commit routes it."""

    exchange: str
    routing_key: str
    mandatory: bool
    properties: BasicProperties
    body: bytes
    queues: list[Queue] | None = None


@dataclass(slots=True, eq=False)
class Channel:
    conn: int
    number: int
    closing: bool = False
    next_tag: int = 1
    unacked: dict[int, Unacked] = field(default_factory=dict)
    consumers: dict[str, Consumer] = field(default_factory=dict)
    prefetch_count: int = 0  # for consumers created later (QOS-02)
    global_prefetch: int = 0  # channel-wide limit when global qos is honoured (QOS-03)
    confirm: bool = False
    publish_seqno: int = 1  # next seqno (PC-02)
    confirms_ready: list[int] = field(default_factory=list)  # acks awaiting the flush (PC-04)
    nacks_ready: list[int] = field(default_factory=list)
    confirms_waiting: list[tuple[int, int]] = field(default_factory=list)  # (store position, seqno)
    commit_waiting: int = 0  # store position a tx.commit-ok waits for (0: none)
    tx: bool = False
    tx_publishes: list[PendingPublish] = field(default_factory=list)
    tx_settles: list[tuple[str, int, bool, bool]] = field(default_factory=list)  # (kind, tag, multiple, requeue)
    tx_held: dict[int, Unacked] = field(default_factory=dict)  # settled in the open tx (ACK-08)
    last_queue: str | None = None  # for an empty queue name (ERR-04 "no previously declared queue")
    timeout_at_open: int = 0  # legacy: the global consumer_timeout read at channel.open (TMO-3x-4)
    tx_rejected: bool = False  # a publish in the open tx was refused by a queue (PC-11)
    reply_tag: str | None = None  # direct reply-to consumer (amq.rabbitmq.reply-to)
    consumer_seq: int = 0

    def global_capacity(self) -> bool:
        if not self.global_prefetch:
            return True
        return sum(1 for u in self.unacked.values() if not u.timed_out) < self.global_prefetch


@dataclass(slots=True, eq=False)
class Connection:
    id: int
    vhost: str
    user: str
    cancel_notify: bool
    channel_max: int
    client_properties: dict[str, Any]
    channels: dict[int, Channel] = field(default_factory=dict)
    name: str = ""
    writable: bool = True  # false while the transport's write buffer is over its high mark
    blocked: bool = False  # blocked by a resource alarm: not read from (core/alarms.py)
    blocked_sent: bool = False  # connection.blocked sent: connection.unblocked owed


@dataclass(slots=True, eq=False)
class VHost:
    name: str
    exchanges: dict[str, Exchange] = field(default_factory=dict)
    queues: dict[str, Queue] = field(default_factory=dict)
