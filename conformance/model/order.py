"""The requeue-order state of one recorded channel lifetime (the data of `recorded_queue_order`).

Responsibility: plain data only: per queue, the model's ready lists of requeued messages
(`queues.ClassicReady` and `queues.QuorumReady`: the queue type is not recorded), the requeues
not yet known to have landed, and the deliveries that overtook what the model expected; per
channel, which queue each delivery tag came from and each consumer's deliveries and
settlements (its credit). The rules that use it are in `conformance.model.recorded_queue_order`.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from conformance.model.queues import ClassicReady, Message, QuorumReady, Ready

Arriving = tuple[str, int, bool, int, int]  # a delivery: queue, requeues known landed, never delivered, tag, seq


@dataclass(slots=True)
class Requeue:
    """One requeue operation as it reaches one queue."""

    index: int  # the channel's requeue counter: handled in this order
    groups: list[list[Message]]
    racing: bool  # QOS-03: it races a channel limiter's resume (queues.py)
    settled: dict[str, int]  # per consumer: settlements sent before it
    acked: dict[str, int]  # per consumer: the acks among them (acks may overtake it, see recorded_queue_order)


@dataclass(slots=True)
class Overtaking:
    """A delivery no queue type allowed yet: a finding once a message it overtook comes."""

    seq: int
    what: str
    expected: dict[str, set[str]]  # queue type -> digests its model expected instead
    proven: set[str] = field(default_factory=set)  # the queue types a later delivery proved wrong


@dataclass(slots=True)
class QueueOrder:
    models: tuple[Ready, Ready] = field(default_factory=lambda: (ClassicReady(), QuorumReady()))
    messages: dict[str, Message] = field(default_factory=dict)  # digest -> unsettled or requeued message
    next_seq: int = 0  # first-seen order: the original position (RQ-01)
    pending: deque[Requeue] = field(default_factory=deque)  # requeues not known to have landed
    requeued_in: dict[str, int] = field(default_factory=dict)  # digest -> index of its pending requeue
    ready: set[str] = field(default_factory=set)  # digests in the models (landed or landing)
    overtakings: list[Overtaking] = field(default_factory=list)
    kinds: tuple[str, ...] = ("classic", "quorum")  # the queue types it may be (index = models')
    unjudged: str | None = None  # why this queue's order is not judged


@dataclass(slots=True)
class RequeueOrder:
    """One channel lifetime's view of the order of its queues."""

    queues: dict[str, QueueOrder] = field(default_factory=dict)
    queue_of: dict[int, str] = field(default_factory=dict)  # unsettled delivery tag -> its queue
    delivered: Counter[str] = field(default_factory=Counter)  # per consumer: deliveries received
    settled: Counter[str] = field(default_factory=Counter)  # per consumer: settlements sent
    acked: Counter[str] = field(default_factory=Counter)  # per consumer: the acks among them
    requeues: int = 0
    get_known: int = 0  # requeues sent before the last basic.get
    arriving: Arriving | None = None
    priorities: bool = False  # a delivered message had a priority above 0
