"""Queues: ready messages, where a requeued message goes back, and which message may come next.

Responsibility: the ready part of a queue per queue type, as plain data with small methods.
Rules:
- RQ-01 (classic): a requeued message goes back to its original position (ordered by the
  order in which the queue accepted it).
- RQ-02 (quorum): returned messages go to a returns FIFO that is served before the main
  queue, in the order they were returned. Messages returned by one queue operation form one
  batch whose inner order the rule does not fix: any message of the first batch may come next.
- One client operation may reach a queue as several operations: basic.nack/reject with
  multiple and basic.recover settle per (queue, consumer tag) and each basic.get delivery on
  its own (rabbit_channel:foreach_per_queue), and the queue may deliver between them; another
  broker may requeue them as one batch. The rules fix neither, so such a requeue is a set of
  "landing" groups: one of them (any) lands before the next delivery, the others whenever,
  alone or joining the batch of the first (quorum). A channel closing (RQ-03) is one group.
- With a channel-wide limit (rabbitmq ≤4.2, QOS-03) a requeue that frees the reached limiter
  races the limiter's "resume" (another process), so even its first group may land after
  deliveries of other ready messages (seen live on 3.10.8: recover after a reached global
  limit of 2 delivered m3 before m1 in 17 of 60 runs).
- RQ-04: `redelivered` is true once a message has been delivered before (classic, and quorum
  from 4.0 "acquired"); quorum ≤3.13: once it has been returned. `Message` counts both.
- PC-08 overflow: `x-max-length` with `reject-publish` refuses a publish while the ready
  count is at the limit; the default `drop-head` drops the oldest ready message.
- queue.declare-ok consumer_count (TMO-4.3-4, `declared_consumer_count`): a quorum queue counts
  its consumer records (rabbit_fifo:query_stat/1): registered consumers, a cancelled consumer
  until its deliveries are settled, and one record per unsettled basic.get delivery (live 4.0.5
  and 4.3.6); a classic queue counts registered consumers only.
Candidates are returned in a stable order so the machines' messages are stable.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class Message:
    """One message in one queue (a fanout copy is a separate Message)."""

    body: bytes
    seq: int  # the queue's acceptance order: the classic requeue position (RQ-01)
    delivered: int = 0  # times handed to a consumer or basic.get (acquired)
    returned: int = 0  # times requeued (delivery_count of quorum queues ≤3.13)
    failed_over: bool = False  # unacked when a node stop moved its quorum queue's leader (CLU-05), until taken again
    requeued_by: str = ""  # the method that last requeued it ("basic.recover", ...), for a failure's wording
    maybe_sent: bool = False  # RQ-04: maybe sent behind a channel.close the broker raised (settlement.py)

    def __lt__(self, other: Message) -> bool:
        return self.seq < other.seq

    def __repr__(self) -> str:
        return f"Message({self.body!r}, seq={self.seq}, delivered={self.delivered}, returned={self.returned})"


def _sorted(messages: set[Message]) -> tuple[Message, ...]:
    return tuple(sorted(messages))


@dataclass(slots=True)
class ClassicReady:
    """RQ-01: ready messages ordered by their original position."""

    messages: list[Message] = field(default_factory=list)
    landing: list[list[Message]] = field(default_factory=list)  # groups of one requeue, not landed
    first_landed: bool = True  # a group of that requeue has landed (or none had to: a race)

    def __len__(self) -> int:
        return len(self.messages) + sum(len(g) for g in self.landing)

    def push(self, message: Message) -> None:
        self.messages.append(message)  # new messages have the highest seq

    def requeue(self, groups: list[list[Message]], racing: bool = False) -> None:
        self.land()
        groups = [g for g in groups if g]
        if len(groups) == 1 and not racing:
            self._land_group(groups[0])
        elif groups:
            self.landing, self.first_landed = groups, racing

    def _land_group(self, group: list[Message]) -> None:
        for message in group:
            bisect.insort(self.messages, message)

    def land(self) -> None:
        for group in self.landing:
            self._land_group(group)
        self.landing, self.first_landed = [], True

    def candidates(self) -> tuple[Message, ...]:
        head = self.messages[0] if self.messages else None
        options = {min(m for m in (head, min(g)) if m is not None) for g in self.landing}
        if head is not None and self.first_landed:
            options.add(head)
        return _sorted(options)

    def take(self, message: Message) -> None:
        for group in self.landing:
            if message in group:
                self.landing.remove(group)
                self._land_group(group)
                break
        # taking the head before any group: one landed behind it, which one does not matter
        self.first_landed = True
        self.messages.remove(message)

    def in_order(self) -> list[Message]:
        """Every ready message, the next to be served first (landing groups by position)."""
        return sorted([*self.messages, *(m for g in self.landing for m in g)])

    def fresh_may_come(self) -> bool:
        """Whether a message never delivered (behind every requeued one) may come next."""
        return not self.messages and self.first_landed

    def discard(self, message: Message) -> None:
        """The message leaves out of turn (dropped: TTL, a length limit; or taken against the rules)."""
        if message in self.messages:
            self.messages.remove(message)
        for group in self.landing:
            if message in group:
                group.remove(message)
        self.landing = [g for g in self.landing if g]

    def drop_head(self) -> None:
        self.land()
        del self.messages[0]

    def clear(self) -> int:
        self.land()
        count = len(self.messages)
        self.messages.clear()
        return count

    def bodies(self) -> list[bytes]:
        return [m.body for m in self.all()]

    def all(self) -> list[Message]:
        return sorted([*self.messages, *(m for g in self.landing for m in g)])


@dataclass(slots=True)
class QuorumReady:
    """RQ-02: a returns FIFO of batches served before the main FIFO."""

    returns: deque[list[Message]] = field(default_factory=deque)
    main: deque[Message] = field(default_factory=deque)
    landing: list[list[Message]] = field(default_factory=list)  # groups of one requeue, not landed
    first_landed: bool = True
    batch: list[Message] | None = None  # the returns batch that groups of that requeue may join

    def __len__(self) -> int:
        return len(self.main) + sum(len(b) for b in self.returns) + sum(len(g) for g in self.landing)

    def push(self, message: Message) -> None:
        self.main.append(message)

    def requeue(self, groups: list[list[Message]], racing: bool = False) -> None:
        self.land()
        groups = [list(g) for g in groups if g]
        if len(groups) == 1 and not racing:
            self.returns.append(groups[0])
        elif groups:
            self.landing, self.first_landed, self.batch = groups, racing, None

    def _joinable(self) -> bool:
        return bool(self.returns) and self.batch is not None and self.returns[0] is self.batch

    def _land_group(self, group: list[Message]) -> None:
        self.landing.remove(group)
        self.first_landed = True
        if self.batch is not None and any(b is self.batch for b in self.returns):
            self.batch.extend(group)  # landed together with earlier groups: one batch
        else:
            self.batch = list(group)
            self.returns.append(self.batch)

    def land(self) -> None:
        while self.landing:
            self._land_group(self.landing[0])
        self.batch = None

    def in_order(self) -> list[Message]:
        """Every ready message, the next to be served first (returns, then landing groups, then main)."""
        return [*(m for b in self.returns for m in b), *(m for g in self.landing for m in g), *self.main]

    def candidates(self) -> tuple[Message, ...]:
        landing = {m for g in self.landing for m in g}
        if self.returns:
            return _sorted(set(self.returns[0]) | (landing if self._joinable() else set()))
        options = set(landing)
        if self.main and self.first_landed:
            options.add(self.main[0])
        return _sorted(options)

    def take(self, message: Message) -> None:
        group = next((g for g in self.landing if message in g), None)
        if group is not None:
            self._land_group(group)
        if self.returns and message in self.returns[0]:
            first = self.returns[0]
            first.remove(message)
            if not first:
                self.returns.popleft()
            return
        self.first_landed = True
        self.main.remove(message)

    def fresh_may_come(self) -> bool:
        """Whether a message never delivered (in the main FIFO, behind the returns) may come next."""
        return not self.returns and self.first_landed

    def discard(self, message: Message) -> None:
        """The message leaves out of turn (dropped, or taken against the rules)."""
        for batch in [*self.returns, *self.landing]:
            if message in batch:
                batch.remove(message)
        self.returns = deque(b for b in self.returns if b)
        self.landing = [g for g in self.landing if g]
        if message in self.main:
            self.main.remove(message)

    def drop_head(self) -> None:
        self.land()
        self.take(self.candidates()[0])

    def clear(self) -> int:
        count = len(self)
        self.landing, self.first_landed, self.batch = [], True, None
        self.returns.clear()
        self.main.clear()
        return count

    def bodies(self) -> list[bytes]:
        return [m.body for m in self.all()]

    def all(self) -> list[Message]:
        return [*(m for b in self.returns for m in b), *(m for g in self.landing for m in g), *self.main]


Ready = ClassicReady | QuorumReady


@dataclass(slots=True)
class QueueState:
    """A declared queue: its type, limits and ready messages."""

    name: str
    kind: str  # "classic" | "quorum"
    ready: Ready
    max_length: int | None = None
    overflow: str = "drop-head"  # or "reject-publish" (PC-08)
    next_seq: int = 1

    @classmethod
    def new(cls, name: str, kind: str, max_length: int | None = None, overflow: str = "drop-head") -> QueueState:
        if kind not in ("classic", "quorum"):
            raise ValueError(f"unknown queue type {kind!r}")
        ready: Ready = ClassicReady() if kind == "classic" else QuorumReady()
        return cls(name, kind, ready, max_length, overflow)

    def enqueue(self, body: bytes) -> bool:
        """Accept a published message; False when overflow=reject-publish refuses it (PC-08)."""
        if self.max_length is not None and len(self.ready) >= self.max_length:
            if self.overflow == "reject-publish":
                return False
            if self.max_length == 0:
                return True  # accepted and dropped at once (drop-head of a 0-length queue)
            self.ready.drop_head()
        self.ready.push(Message(body, self.next_seq))
        self.next_seq += 1
        return True

    def redelivered(self, message: Message, on_return_only: bool) -> bool:
        """RQ-04: the redelivered flag this message carries when taken now."""
        return redelivered_flag(self.kind, message.delivered, message.returned, on_return_only)


def redelivered_flag(kind: str | None, delivered: int, returned: int, on_return_only: bool) -> bool:
    """RQ-04: the flag of a message taken now, delivered and returned that many times before.

    Classic queues (and quorum from 4.0): delivered before; quorum ≤3.13 (`on_return_only`):
    returned before. `kind` None (the queue type is unknown, as in a recording): true only when
    every queue type agrees it is true.
    """
    if kind is None:
        return delivered > 0 and (returned > 0 or not on_return_only)
    if kind == "quorum" and on_return_only:
        return returned > 0
    return delivered > 0


def declared_consumer_count(kind: str, registered: int, *, cancelled_holding: int = 0, gets_held: int = 0) -> int:
    """queue.declare-ok's consumer_count: on a quorum queue, `registered` consumers plus the
    cancelled ones still holding deliveries plus the unsettled basic.get deliveries."""
    return registered + cancelled_holding + gets_held if kind == "quorum" else registered
