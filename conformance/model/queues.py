"""Queues: ready messages, where a requeued message goes back, and which message may come next.

Responsibility: the ready part of a queue per queue type, as plain data with small methods.
Rules:
- RQ-01 (classic): a requeued message goes back to its original position (ordered by the
  order in which the queue accepted it).
- RQ-02 (quorum): returned messages go to a returns FIFO that is served before the main
  queue, in the order they were returned. One client operation that returns several
  messages at once (basic.nack multiple, basic.recover, a channel closing, RQ-03) returns them
  as one batch whose inner order the rule does not fix: any message of the first batch may
  come next.
- RQ-04: `redelivered` is true once a message has been delivered before (classic, and quorum
  from 4.0 "acquired"); quorum ≤3.13: once it has been returned. `Message` counts both.
- PC-08 overflow: `x-max-length` with `reject-publish` refuses a publish while the ready
  count is at the limit; the default `drop-head` drops the oldest ready message.
Candidates are returned as a tuple in a stable order so the machines' messages are stable.
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

    def __lt__(self, other: Message) -> bool:
        return self.seq < other.seq

    def __repr__(self) -> str:
        return f"Message({self.body!r}, seq={self.seq}, delivered={self.delivered}, returned={self.returned})"


@dataclass(slots=True)
class ClassicReady:
    """RQ-01: ready messages ordered by their original position."""

    messages: list[Message] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.messages)

    def push(self, message: Message) -> None:
        self.messages.append(message)  # new messages have the highest seq

    def requeue(self, batch: list[Message]) -> None:
        for message in batch:
            bisect.insort(self.messages, message)

    def candidates(self) -> tuple[Message, ...]:
        return tuple(self.messages[:1])

    def take(self, message: Message) -> None:
        self.messages.remove(message)

    def drop_head(self) -> None:
        del self.messages[0]

    def clear(self) -> int:
        count = len(self.messages)
        self.messages.clear()
        return count

    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


@dataclass(slots=True)
class QuorumReady:
    """RQ-02: a returns FIFO of batches served before the main FIFO."""

    returns: deque[list[Message]] = field(default_factory=deque)
    main: deque[Message] = field(default_factory=deque)

    def __len__(self) -> int:
        return len(self.main) + sum(len(b) for b in self.returns)

    def push(self, message: Message) -> None:
        self.main.append(message)

    def requeue(self, batch: list[Message]) -> None:
        if batch:
            self.returns.append(sorted(batch))

    def candidates(self) -> tuple[Message, ...]:
        if self.returns:
            return tuple(self.returns[0])
        return tuple(list(self.main)[:1])

    def take(self, message: Message) -> None:
        if self.returns:
            first = self.returns[0]
            first.remove(message)
            if not first:
                self.returns.popleft()
            return
        self.main.remove(message)

    def drop_head(self) -> None:
        self.take(self.candidates()[0])

    def clear(self) -> int:
        count = len(self)
        self.returns.clear()
        self.main.clear()
        return count

    def bodies(self) -> list[bytes]:
        return [m.body for b in self.returns for m in b] + [m.body for m in self.main]


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
        if self.kind == "quorum" and on_return_only:
            return message.returned > 0
        return message.delivered > 0
