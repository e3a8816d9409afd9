"""A Jepsen-style total-queue checker: what a crash test's history says about a broker's queue.

Pure (no I/O, no clock): it takes what the publisher and the consumer observed and returns a
`TotalQueueReport`. The runner (tests/reliability/crash.py) records the history; this module only
judges it.

Inputs
- `published`: every message id the publisher tried to send (sent once each, never republished).
- `confirmed`: ids the broker confirmed with basic.ack (publisher confirms); `nacked`: ids it
  refused with basic.nack. Every other published id is unconfirmed (its connection died first).
- `deliveries`: the consumer's log in the order it received them, each a `Delivery(id,
  redelivered, acked, epoch)`; `acked` = the consumer sent basic.ack for it (sending is all a
  consumer can know: AMQP has no confirm for consumer acks); `epoch` = which broker incarnation
  (process lifetime between two kills) the delivery arrived from.
- `drain`: the deliveries of the final drain (after the last restart, until the queue is empty),
  in order, with the same fields; they follow `deliveries` in time.

Definitions (the history = `deliveries` then `drain`)
- lost: a confirmed id that the history never settles, i.e. no delivery of it was acked: it was
  never delivered, or every delivery of it went unacked and it is not in the final drain. A
  confirm is the broker taking responsibility (RabbitMQ: for a persistent message to a durable
  queue, sent only once it is on disk), and an unacked delivery is requeued when its channel or
  connection goes, so neither a kill nor a lost connection excuses its absence. An unconfirmed
  id that never shows up is not lost: the broker never took responsibility for it.
- duplicated: a delivery of an id that was delivered before (its first delivery is not counted)
  and is not a legal redelivery. Legal redelivery: every earlier delivery of the id went unacked
  and this one carries redelivered=true (requeue on channel/connection loss, or recovery after a
  restart). So a message acked once and later delivered again is a duplicate, and so is any
  repeat with redelivered=false. Each duplicate is one of
  - "not flagged": a repeat with redelivered=false (0-9-1: the flag says the message "may have
    been previously delivered"; RabbitMQ sets it on every redelivery) -- illegal;
  - "after ack, same epoch": delivered again by the broker incarnation that was sent the ack,
    on a connection that stayed open -- illegal;
  - "after ack, lost in a kill": redelivered=true, and every ack of it was sent to an earlier
    incarnation that was then killed. The ack may not have reached the broker or its disk before
    the kill (nothing confirms consumer acks), so this is at-least-once delivery: reported, legal.
- unexpected: a delivered id that was never published.
- confirmed_and_nacked: an id both acked and nacked by the publisher confirms (RabbitMQ: "no
  message will be both confirmed and nack'd").
- Allowed and counted: unconfirmed ids that were delivered (the confirm died with the
  connection), nacked ids that were delivered, first deliveries already flagged redelivered (an
  earlier delivery went to a connection that died before the consumer read it).

The verdict `ok` holds when nothing is lost, unexpected, illegally duplicated, or both confirmed
and nacked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

NOT_FLAGGED = "not flagged"
AFTER_ACK_SAME_EPOCH = "after ack, same epoch"
AFTER_ACK_LOST_IN_KILL = "after ack, lost in a kill"
ILLEGAL_KINDS = frozenset({NOT_FLAGGED, AFTER_ACK_SAME_EPOCH})


@dataclass(frozen=True, slots=True)
class Delivery:
    """One basic.deliver (or basic.get-ok) the consumer received."""

    id: str
    redelivered: bool
    acked: bool
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A delivery that is not a legal first delivery or redelivery; `index` is its position in
    the history (`deliveries` then `drain`)."""

    id: str
    index: int
    kind: str  # NOT_FLAGGED | AFTER_ACK_SAME_EPOCH | AFTER_ACK_LOST_IN_KILL

    @property
    def illegal(self) -> bool:
        return self.kind in ILLEGAL_KINDS


@dataclass(frozen=True)
class TotalQueueReport:
    published: int
    confirmed: int
    nacked: int
    delivered: int  # deliveries in the history, repeats included
    delivered_ids: int  # distinct ids delivered
    redelivered: int  # deliveries flagged redelivered=true
    drained: int  # deliveries in the final drain
    recovered: int  # ids delivered again after an unacked delivery (requeued or recovered)
    unconfirmed_delivered: int  # published, not confirmed, delivered anyway (allowed)
    nacked_delivered: int  # nacked and delivered anyway (allowed)
    lost: tuple[str, ...]
    duplicated: tuple[Duplicate, ...]
    unexpected: tuple[str, ...]
    confirmed_and_nacked: tuple[str, ...] = field(default=())

    @property
    def illegal_duplicates(self) -> tuple[Duplicate, ...]:
        return tuple(d for d in self.duplicated if d.illegal)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.unexpected or self.illegal_duplicates or self.confirmed_and_nacked)

    def summary(self) -> list[str]:
        """The report as printable lines, examples of each problem included."""
        lines = [
            f"published {self.published}  confirmed {self.confirmed}  nacked {self.nacked}  "
            f"unconfirmed-but-delivered {self.unconfirmed_delivered}",
            f"delivered {self.delivered} ({self.delivered_ids} ids)  redelivered {self.redelivered}  "
            f"recovered {self.recovered}  drained {self.drained}",
            f"lost {len(self.lost)}  duplicated {len(self.duplicated)} "
            f"(illegal {len(self.illegal_duplicates)})  unexpected {len(self.unexpected)}  "
            f"confirmed-and-nacked {len(self.confirmed_and_nacked)}",
        ]
        if self.lost:
            lines.append(f"  lost ids: {_sample(self.lost)}")
        for kind in (NOT_FLAGGED, AFTER_ACK_SAME_EPOCH, AFTER_ACK_LOST_IN_KILL):
            found = [f"{d.id}@{d.index}" for d in self.duplicated if d.kind == kind]
            if found:
                lines.append(f"  duplicates {kind}: {len(found)}: {_sample(found)}")
        if self.unexpected:
            lines.append(f"  unexpected ids: {_sample(self.unexpected)}")
        if self.confirmed_and_nacked:
            lines.append(f"  confirmed and nacked: {_sample(self.confirmed_and_nacked)}")
        lines.append("verdict: " + ("ok" if self.ok else "FAILED"))
        return lines


def _sample(items: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", ... (+{len(items) - limit})" if len(items) > limit else "")


@dataclass(slots=True)
class _IdHistory:
    """What the history showed so far for one id."""

    deliveries: int = 0
    ack_epochs: set[int] = field(default_factory=set)  # epochs in which an ack was sent
    came_back: bool = False


def _classify(seen: _IdHistory, d: Delivery) -> str | None:
    """The duplicate kind of a repeat delivery `d`, or None for a legal redelivery."""
    if not d.redelivered:
        return NOT_FLAGGED
    if not seen.ack_epochs:
        return None
    if d.epoch in seen.ack_epochs:
        return AFTER_ACK_SAME_EPOCH
    return AFTER_ACK_LOST_IN_KILL


def check_total_queue(published: Iterable[str], confirmed: Iterable[str], nacked: Iterable[str],
                      deliveries: Sequence[Delivery], drain: Sequence[Delivery] = ()) -> TotalQueueReport:
    """Judge one crash-test history (definitions in the module docstring)."""
    published_set, confirmed_set, nacked_set = set(published), set(confirmed), set(nacked)
    history = [*deliveries, *drain]
    seen: dict[str, _IdHistory] = {}
    duplicated: list[Duplicate] = []
    for index, d in enumerate(history):
        h = seen.setdefault(d.id, _IdHistory())
        if h.deliveries:
            kind = _classify(h, d)
            if kind is None:
                h.came_back = True
            else:
                duplicated.append(Duplicate(d.id, index, kind))
        h.deliveries += 1
        if d.acked:
            h.ack_epochs.add(d.epoch)
    settled = {i for i, h in seen.items() if h.ack_epochs}
    delivered_ids = set(seen)
    return TotalQueueReport(
        published=len(published_set),
        confirmed=len(confirmed_set),
        nacked=len(nacked_set),
        delivered=len(history),
        delivered_ids=len(delivered_ids),
        redelivered=sum(1 for d in history if d.redelivered),
        drained=len(drain),
        recovered=sum(1 for h in seen.values() if h.came_back),
        unconfirmed_delivered=len((delivered_ids & published_set) - confirmed_set - nacked_set),
        nacked_delivered=len(delivered_ids & nacked_set),
        lost=_ordered(confirmed_set - settled),
        duplicated=tuple(duplicated),
        unexpected=_ordered(delivered_ids - published_set),
        confirmed_and_nacked=_ordered(confirmed_set & nacked_set),
    )


def _ordered(ids: set[str]) -> tuple[str, ...]:
    """Ids sorted naturally (m2 before m10) so reports read in publish order."""
    return tuple(sorted(ids, key=lambda i: (len(i), i)))
