"""The message-lifecycle model: classic queues with a TTL and a dead-letter target, on a clock that
the machine advances (TTL-03, TTL-04, DLX-01, DLX-02, DLX-04).

Responsibility: given queue.declare's arguments and the client's steps (publish with or without a
per-message TTL, basic.get, ack, reject with or without requeue), which messages each queue holds,
in which order, which were dead-lettered where, and the x-death entries each carries.

Rules (RabbitMQ's, v3.10.8 to v4.3.5; the sources are in the rules' catalogue entries):
- Time is coarse: a TTL is SHORT (it has passed once the step that enqueued the message is over:
  the machine waits for it) or long (never passes within a run). A message's TTL is the lower of
  the queue's x-message-ttl and its own expiration; a dead-lettered message loses its expiration,
  so in its new queue only that queue's TTL counts (DLX-02).
- A classic queue removes expired messages from its head only (rabbit_amqqueue_process
  drop_expired_msgs, run by the head's timer, after a fetch and after a requeue): an expired
  message behind a live one stays, counted, until it reaches the head (TTL-03).
- A requeued message goes back to its place (by enqueue order) keeping its enqueue time: past its
  TTL it expires at once (TTL-04).
- A message that dies (expired, or rejected without requeue) goes to the queue's dead-letter
  target when it has one, with its death recorded: an x-death entry per (queue, reason), newest
  first, the count of an existing entry incremented and the entry moved to the front (DLX-02).
  Before 3.13 (`legacy`) the header is first regrouped per (queue, reason), which reverses a list
  of two or more (rabbit_dead_letter group_by_queue_and_reason).
- A message that expired into a queue its deaths already name, with no rejection among the deaths
  from the most recent through that queue's latest, is dropped: a cycle (DLX-04). A rejected message
  is never checked for a cycle (rabbit_dead_letter detect_cycles(rejected, ...), mc is_death_cycle).
  The deaths are taken in the order they happened (`recent`), whatever order the header shows:
  RabbitMQ 3.10.8 judges the regrouped header, whose reversals can keep a rejection between a queue
  and its newest death, and then loops an expiry cycle for ever (seen live: x-death counts 20 and
  19 after 2 s); that is the bug the rule catches there, not a variant.
- A queue's x-max-length counts its ready messages (expired ones behind a live head included):
  drop-head takes a publish, a dead-lettered message or a requeue and drops from the head, each
  dropped message dead-lettered with reason maxlen (LEN-02, LEN-03); reject-publish refuses a
  publish to a full queue (basic.nack) and a dead-lettered message (lost: classic queues
  dead-letter at most once), and keeps a requeue over the limit (rabbit_amqqueue_process
  maybe_drop_head acts for drop-head only) (LEN-04).
- Each transition is written down with its rule (`events`), so a mismatch names the rule the
  model applied where the broker differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Death = tuple[str, str, int]  # (queue, reason, count)
MAX_CHAIN = 50  # a cycle ends within two turns (DLX-04): more hops in one step is the model's own error


@dataclass(frozen=True)
class QueueSpec:
    short_ttl: bool  # x-message-ttl SHORT (else none)
    target: str | None  # the logical queue its dead letters go to (None: no dead-letter exchange)
    max_length: int | None = None  # x-max-length (at least 1)
    overflow: str = "drop-head"  # x-overflow: drop-head or reject-publish


@dataclass
class Message:
    body: str
    seq: int  # the enqueue order in its queue: a requeue puts it back by it
    short: bool  # its TTL passes within the step that enqueued it
    deaths: list[Death] = field(default_factory=list)  # the x-death header: newest first (regrouped before 3.13)
    recent: list[Death] = field(default_factory=list)  # the same deaths, most recent first: what a cycle is judged on


@dataclass
class Event:
    rule: str
    text: str
    queues: tuple[str, ...]
    fewer: str | None = None  # the queue this transition leaves with one message fewer than the broker may show
    more: str | None = None  # the queue it leaves with one more


class LifecycleModel:
    def __init__(self, specs: dict[str, QueueSpec], legacy: bool) -> None:
        self.specs, self.legacy = specs, legacy
        self.ready: dict[str, list[Message]] = {q: [] for q in specs}
        self.held: dict[int, tuple[str, Message]] = {}  # delivery tag -> (queue, message)
        self.seqs = 0
        self.events: list[Event] = []  # of the current step
        self.hops = 0  # dead-letterings into a SHORT queue in the current step: TTLs that must pass
        self.hops_total = 0  # dead-letterings in the current step

    # -- steps ----------------------------------------------------------------------------------
    def begin_step(self) -> None:
        self.events, self.hops, self.hops_total = [], 0, 0

    def publish(self, queue: str, body: str, short_expiration: bool) -> bool:
        """A confirmed publish; False when the queue refused it (reject-publish: basic.nack)."""
        short = self.specs[queue].short_ttl or short_expiration
        accepted = self._admit(queue, Message(body, self._seq(), short))
        if short and accepted:
            self.hops = max(self.hops, 1)
        self._strip_head(queue)
        return accepted

    def get(self, queue: str, tag: int) -> Message | None:
        """basic.get (acknowledged): the head, which is never expired between steps."""
        ready = self.ready[queue]
        if not ready:
            return None
        message = ready.pop(0)
        self.held[tag] = (queue, message)
        self._strip_head(queue)  # the fetch exposes the next head (rabbit_amqqueue_process fetch/2)
        return message

    def ack(self, tag: int) -> None:
        self.held.pop(tag)

    def reject(self, tag: int, requeue: bool) -> None:
        queue, message = self.held.pop(tag)
        if requeue:
            self._enqueue(queue, message)
            if message.short:
                self.events.append(Event("TTL-04", f"{message.body} came back to {queue} past its TTL and expired",
                                         (queue,)))
            self._trim(queue)  # a requeue over the limit drops from the head (LEN-02)
            self._strip_head(queue)
        else:
            self._die(queue, message, "rejected")

    # -- what the broker must show ----------------------------------------------------------------
    def count(self, queue: str) -> int:
        return len(self.ready[queue])

    def bodies(self, queue: str) -> list[str]:
        return [m.body for m in self.ready[queue]]

    def held_tags(self) -> list[int]:
        return sorted(self.held)

    def rules_for(self, queue: str, broker_more: bool | None = None) -> list[str]:
        """The rule of this step's last transition that explains a difference in `queue`: the broker
        shows more (`broker_more`) where the model took a message out or kept it out, fewer where the
        model put one in; else the last that touched `queue` (the failure lists them all)."""
        side = [e.rule for e in self.events if (e.fewer if broker_more else e.more) == queue] \
            if broker_more is not None else []
        return side[-1:] or [e.rule for e in self.events if queue in e.queues][-1:]

    # -- transitions ------------------------------------------------------------------------------
    def _seq(self) -> int:
        self.seqs += 1
        return self.seqs

    def _enqueue(self, queue: str, message: Message) -> None:
        ready = self.ready[queue]
        ready.append(message)
        ready.sort(key=lambda m: m.seq)

    def _admit(self, queue: str, message: Message) -> bool:
        """Enqueue `message` as the queue's length limit allows: a full reject-publish queue refuses
        it (LEN-04), a drop-head queue takes it and drops from its head (LEN-02, dead-lettered: LEN-03)."""
        spec = self.specs[queue]
        if spec.overflow == "reject-publish" and spec.max_length is not None and self.count(queue) >= spec.max_length:
            self.events.append(Event("LEN-04", f"{message.body} refused by {queue}, full at x-max-length "
                                               f"{spec.max_length} (reject-publish)", (queue,), fewer=queue))
            return False
        self._enqueue(queue, message)
        self._trim(queue)
        return True

    def _trim(self, queue: str) -> None:
        spec, ready = self.specs[queue], self.ready[queue]
        while spec.overflow == "drop-head" and spec.max_length is not None and len(ready) > spec.max_length:
            head = ready.pop(0)
            self.events.append(Event("LEN-02", f"{head.body} dropped from the head of {queue}, over x-max-length "
                                               f"{spec.max_length}", (queue,), fewer=queue))
            self._die(queue, head, "maxlen")

    def _strip_head(self, queue: str) -> None:
        ready = self.ready[queue]
        while ready and ready[0].short:
            message = ready.pop(0)
            self.events.append(Event("TTL-03", f"{message.body} expired at the head of {queue}", (queue,), fewer=queue))
            self._die(queue, message, "expired")

    def _die(self, queue: str, message: Message, reason: str) -> None:
        target = self.specs[queue].target
        if target is None:  # dropped: the step's own rule (TTL-03 for an expiry) says it left `queue`
            return
        deaths = self._record(message.deaths, queue, reason, self.legacy)
        recent = self._record(message.recent, queue, reason, False)
        if reason != "rejected" and self._is_cycle(target, recent):
            self.events.append(Event("DLX-04", f"{message.body} {reason} from {queue} into {target}, which its "
                                               f"deaths {recent} already name with no rejection since: a cycle, "
                                               "dropped", (queue, target), fewer=target))
            return
        self.hops_total += 1
        assert self.hops_total < MAX_CHAIN, f"model: a dead-letter chain of {MAX_CHAIN} hops within one step"
        spec = self.specs[target]
        moved = Message(message.body, self._seq(), spec.short_ttl, deaths, recent)  # expiration gone (DLX-02)
        self.events.append(Event("LEN-03" if reason == "maxlen" else "DLX-01",
                                 f"{message.body} {reason} from {queue}, dead-lettered to {target} "
                                 f"with x-death {deaths}", (queue, target), more=target))
        if self._admit(target, moved) and spec.short_ttl:  # refused by a full target: lost (at most once)
            self.hops += 1
        self._strip_head(target)

    @staticmethod
    def _record(before: list[Death], queue: str, reason: str, legacy: bool) -> list[Death]:
        deaths = list(reversed(before)) if legacy and len(before) > 1 else list(before)
        same = next((d for d in deaths if d[:2] == (queue, reason)), None)
        if same is None:
            return [(queue, reason, 1), *deaths]
        deaths.remove(same)
        return [(queue, reason, same[2] + 1), *deaths]

    @staticmethod
    def _is_cycle(target: str, deaths: list[Death]) -> bool:
        for i, (queue, _, _) in enumerate(deaths):
            if queue == target:
                return all(reason != "rejected" for _, reason, _ in deaths[: i + 1])
        return False
