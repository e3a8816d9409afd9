"""Per-channel state as plain data, and the per-channel rules as pure functions.

Responsibility: what one channel holds (delivery tags, unacked deliveries, consumers, qos,
confirm sequence) and the pure decisions over it. The functions take and return plain values
(tag lists, dicts), so a trace audit can run them over recorded frames without a broker.
Rules:
- ACK-01: one tag counter per channel from 1, shared by basic.deliver and basic.get-ok,
  no-ack deliveries included.
- ACK-03/04/05/06: `settle_tags` - which outstanding tags an ack/nack/reject settles; None
  means "unknown delivery tag" (406, nothing settled).
- PC-02: `publish_seqno` starts at 1 and advances only in confirm mode.
- PC-04/05: `confirm_tags` - which pending seqnos a broker ack/nack settles; a seqno is
  settled exactly once, and the tag named by a (multiple) confirm must itself be pending.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Hashable
from dataclasses import dataclass, field

from conformance.model.queues import Message

ChannelKey = Hashable


def settle_tags(outstanding: Collection[int], tag: int, multiple: bool) -> list[int] | None:
    """The tags basic.ack/nack (or reject, multiple=False) settles; None: unknown tag (ACK-03).

    - tag 0 with multiple=true settles everything outstanding, even nothing (ACK-06);
    - the named tag must be outstanding, also with multiple=true (ACK-05), so a double ack
      (ACK-04), tag 0 with multiple=false and a tag of another channel are unknown.
    `outstanding` in ascending order (a dict keyed by tag keeps it); membership is one lookup,
    so the trace audit judges an ack in constant time.
    """
    if tag == 0 and multiple:
        return list(outstanding)
    if tag not in outstanding:
        return None
    return [t for t in outstanding if t <= tag] if multiple else [tag]


def confirm_tags(pending: Collection[int], tag: int, multiple: bool) -> list[int] | None:
    """The pending seqnos a broker basic.ack/nack settles; None: it settles none it may (PC-05).

    The named seqno must be pending: a lone confirm names it, and a coalesced
    `multiple=true` confirm names the highest seqno of its flush (PC-04); everything pending
    at or below it is settled with it.
    """
    if tag not in pending:
        return None
    return sorted(s for s in pending if s <= tag) if multiple else [tag]


@dataclass(slots=True)
class Unacked:
    """An outstanding delivery: which queue, which message, and how it was delivered."""

    tag: int
    queue: str | None  # None once the queue is deleted (nothing to requeue into)
    message: Message
    consumer: str | None  # None: basic.get (ACK-01 shared counter; QOS-05/07)


@dataclass(slots=True)
class Consumer:
    tag: str
    queue: str
    no_ack: bool
    prefetch: int  # QOS-02: the channel's consumer prefetch when the consumer was created
    outstanding: int = 0  # its unacked deliveries


@dataclass(slots=True)
class PendingConfirm:
    """A published seqno the broker must settle exactly once (PC-05)."""

    seqno: int
    nack: bool  # PC-08: a queue refused it, so the broker nacks
    needs_return: bool  # PC-06: mandatory and unroutable, basic.return must come first
    returned: bool = False


@dataclass(slots=True)
class ExpectedReturn:
    seqno: int | None
    exchange: str
    routing_key: str
    body: bytes


@dataclass(frozen=True, slots=True)
class HeldPublish:
    """A publish of the open transaction (TX-02): routed when published (TX-06), enqueued at commit."""

    exchange: str
    routing_key: str
    body: bytes
    mandatory: bool
    targets: tuple[str, ...]


@dataclass(slots=True)
class ChannelState:
    """One open channel."""

    key: ChannelKey
    connection: Hashable
    next_tag: int = 1  # ACK-01
    unacked: dict[int, Unacked] = field(default_factory=dict)  # in tag order
    consumers: dict[str, Consumer] = field(default_factory=dict)
    consumer_prefetch: int = 0  # QOS-02, QOS-10: unlimited by default
    global_limit: int = 0  # QOS-03: the channel's limiter (0: inactive)
    volume: int = 0  # QOS-05: what the limiter counts as outstanding
    volume_low: int = 0  # QOS-09: the volume if in-flight deliveries went uncounted
    uncounted: int = 0  # QOS-09: in-flight deliveries the limiter may never have counted
    confirm: bool = False  # PC-01
    tx: bool = False  # PC-03
    publish_seqno: int = 1  # PC-02
    pending: dict[int, PendingConfirm] = field(default_factory=dict)
    settled: set[int] = field(default_factory=set)
    returns: deque[ExpectedReturn] = field(default_factory=deque)
    held: list[HeldPublish] = field(default_factory=list)  # TX-02: the open transaction's publishes

    def take_tag(self) -> int:
        tag = self.next_tag
        self.next_tag += 1
        return tag

    def unacked_tags(self) -> tuple[int, ...]:
        return tuple(self.unacked)
