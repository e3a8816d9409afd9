"""The machine base for steps whose effects a client library reports on its own.

Responsibility: `ClientEventsMachine`: after every step it takes the library's events
(deliveries to a consumer callback, the broker-cancel callback, and what a subclass adds in
`on_event`: confirms, returns), checks each against the model, waits for what the model says
must still come (`waiting_for`, `still_owed`), then makes a round trip on both channels and
checks what the broker wrote before it, so every run notices a frame at the same step.

Rules: the library reports events in arrival order across channels; a delivery the model does
not allow yet is held while another channel may still deliver first (as machine_base does),
and judged when nothing else can come (for a library whose hello says
"deliveries-ordered-per-consumer", also while its own channel may still deliver first). Every wait is bounded (`SETTLE_SECONDS`). A close the
client made itself (no reply code) is not an event the machine judges; a broker close is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

from hypothesis import note

from conformance.drivers.interface import (
    BrokerCancelled,
    ChannelClosedEvent,
    ClientDriver,
    ClientFailure,
    Delivered,
    Event,
    Recorder,
)
from conformance.model import Deliver, ServerCancel, Violation, outcomes
from conformance.suite.steps.machine_budget import Budget
from conformance.suite.through_clients.machine_clients import ClientMachine

# a library whose consumers each get their deliveries apart (amqp091-go: a Go channel per consumer),
# so that deliveries to two consumers of one channel reach the application in either order
PER_CONSUMER_ORDER = "deliveries-ordered-per-consumer"


class ClientEventsMachine(ClientMachine):
    """Channels 1 and 2 whose library reports events; they are checked after every step."""

    SETTLE_SECONDS: ClassVar[float] = 2.0

    def __init__(self, make: Callable[[], ClientDriver], profile: str, *, recorder: Recorder,
                 budget: Budget | None = None) -> None:
        self.held: list[tuple[int, Deliver]] = []
        super().__init__(make, profile, recorder=recorder, budget=budget)

    def key_of(self, number: int) -> int:
        return next(key for key, n in self.numbers.items() if n == number)

    # -- the library's events --------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        """Check one event the library reported (subclasses add confirms and returns)."""
        if isinstance(event, Delivered):
            d = event.delivery
            key = self.key_of(d.channel)
            self.held.append((key, Deliver(d.consumer_tag or "", d.delivery_tag, d.redelivered, d.body)))
        elif isinstance(event, BrokerCancelled):
            note(f"the library reports a broker basic.cancel of {event.consumer_tag} on channel {event.channel}")
            self.model.server_cancel(self.key_of(event.channel), ServerCancel(event.consumer_tag))
        elif isinstance(event, ChannelClosedEvent) and event.code in self.closes_seen:
            self.closes_seen.remove(event.code)  # a close a step has met and compared already
        elif isinstance(event, ChannelClosedEvent) and (not event.code or event.channel not in self.numbers.values()):
            pass  # a close the client made itself (no reply code), or of a channel the machine closed
        elif isinstance(event, ClientFailure):
            raise AssertionError(f"the client library failed: {event.type}: {event.text} ({event.where})")
        else:
            raise AssertionError(f"the library reported {event}, which no step of this machine expects")

    def admit_held(self, late: bool) -> None:
        """Deliver to the model what it allows now, then judge the first held delivery (raises
        the Violation) unless another channel may still deliver first and it is not `late`."""
        progress = True
        while progress:
            progress = False
            for item in list(self.held):
                key, delivery = item
                if delivery in self.model.deliveries(key):
                    note(f"delivered on channel {key}: {delivery}")
                    self.model.deliver(key, delivery)
                    self.held.remove(item)
                    progress = True
        if self.held:
            key, delivery = self.held[0]
            # a library that orders deliveries per consumer only may still report an earlier one of this channel
            per_consumer = PER_CONSUMER_ORDER in self.features
            if late or not any(self.model.due(k) for k in (1, 2) if k != key or per_consumer):
                try:
                    self.model.deliver(key, delivery)
                except Violation as exc:
                    raise AssertionError(f"{self.unexpected(key, delivery)}: {exc}") from None

    def unexpected(self, key: int, delivery: Deliver) -> str:
        """The rule an unexpected delivery breaks, as far as the model's state shows it."""
        if any(delivery.body in self._held(k) for k in (1, 2)):
            return f"ACK-10: {delivery.body!r} is still unacked (cancelling a consumer leaves its deliveries)"
        consumer = self.model.state.channels[key].consumers.get(delivery.consumer_tag)
        if consumer is None:
            return f"CCN-04: a delivery to {delivery.consumer_tag}, which is not (or no longer) a consumer"
        if consumer.prefetch and not consumer.no_ack and consumer.outstanding >= consumer.prefetch:
            return (f"QOS-02: {consumer.tag} already holds {consumer.outstanding} unacked deliveries, its prefetch "
                    f"is {consumer.prefetch}")
        same = [a for a in self.model.deliveries(key) if a.body == delivery.body]
        if same and all(a.delivery_tag != delivery.delivery_tag for a in same):
            return "ACK-01: the channel's delivery tag"
        return "RQ-04: the redelivered flag" if same else "RQ-01: the queue's order"

    def waiting_for(self) -> str | None:
        due = self.model.due_consumers()
        if due:
            rule = "QOS-08: no-ack consumers are not limited" if all(no_ack for _k, _t, no_ack in due) else \
                "QOS-02: the consumers' prefetch leaves room"
            return f"no delivery to {sorted(tag for _k, tag, _n in due)}, which the rules require ({rule})"
        owed = self.model.owed_cancels()
        if owed:
            return f"the library reported no broker basic.cancel for {dict(owed)} (CCN-02)"
        return None

    def settle_events(self) -> None:
        """Check what the library reported, wait for what must come, then a round trip on each
        channel and check what came before it (module rules)."""
        deadline = time.monotonic() + self.SETTLE_SECONDS
        flushed = False
        while True:
            while self.early_events:
                self.on_event(self.early_events.pop(0))
            while (event := self.driver.next_event(0.0)) is not None:
                self.on_event(event)
            self.admit_held(late=time.monotonic() > deadline)
            waiting = self.waiting_for() or self.still_owed()
            if waiting is None and not self.held:
                if flushed:
                    break
                for key in (1, 2):  # each queue: a publish on this channel has reached it (RabbitMQ asks the queue)
                    for logical in list(self.real):
                        self._compare(f"round trip on {logical}", key, self._sync(key, logical), outcomes.OK)
                flushed = True
                continue
            if time.monotonic() > deadline:
                self.admit_held(late=True)
                raise AssertionError(f"after {self.SETTLE_SECONDS:.1f} s: {waiting or self.held}")
            event = self.driver.next_event(0.05)
            if event is not None:
                self.on_event(event)
        self.model.quiesce()

    def still_owed(self) -> str | None:
        """Hook: what else must still come (confirms, returns)."""
        return None

    def after_step(self) -> None:
        self.settle_events()

    def final_check(self) -> None:
        """Cancel every consumer first (a channel closing requeues what it held, and a consumer
        on the other channel would take it at a moment the model cannot know), then close."""
        for key in (1, 2):
            for tag in self.model.consumer_tags(key):
                self.driver.cancel(self.numbers[key], tag)
                self.model.cancel(key, tag)
        self.settle_events()
        super().final_check()
