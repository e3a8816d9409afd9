"""Consumers through a client library (issue 14): the prefetch and cancel-notification machines.

Responsibility: `ClientConsumingMachine`, the machine base for steps whose effects the library
reports on its own (deliveries to a consumer callback, the broker's basic.cancel callback):
after every step it takes the library's events and checks each against the model, waits for
what the model says must still come, and ends with a round trip on both channels so that what
the broker wrote before it is checked at this step. On it:
- `ClientPrefetchMachine` (QOS-02, QOS-07, QOS-08, ACK-01): basic.qos global=false with 0..3,
  consumers (manual ack or no-ack) on two classic queues, publishes, basic.get, ack / reject of
  an outstanding delivery. A delivery beyond a consumer's prefetch, or one missing that the
  limit allows, fails the run.
- `ClientCancelMachine` (CCN-02, CCN-04, ACK-10): consumers, client basic.cancel,
  queue.delete (and declaring it again) on a third channel the model does not see, publishes
  and acks. Every consumer of a deleted queue must reach the library's broker-cancel callback,
  and nothing may be delivered to a cancelled consumer.

What a client cannot express, left out: global qos (a channel-wide limit, QOS-03..05) and a
limit changed while deliveries are in flight (QOS-09) are timing a library does not expose
(the example tests check global qos); client cancel of an unknown tag (pika and aio-pika look
the tag up in their own table and send nothing). All three libraries advertise
consumer_cancel_notify, so the model expects the notification on every connection.

Rules: the library reports events in arrival order across channels; a delivery the model does
not allow yet is held while another channel may still deliver first (as machine_base does),
and judged when nothing else can come. Every wait is bounded (`SETTLE_SECONDS`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import ClassVar

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import rule

from conformance.drivers.interface import (
    BrokerCancelled,
    ChannelClosedEvent,
    ClientDriver,
    ClientFailure,
    Delivered,
    Event,
    attempt,
)
from conformance.model import Deliver, ServerCancel, Violation, outcomes
from conformance.suite.machine_clients import KEYS, OUTSTANDING, ClientMachine, client_step
from conformance.suite.machine_support import from_machine

PREFETCH_RULES = ("QOS-02", "QOS-07", "QOS-08", "ACK-01")
CANCEL_RULES = ("CCN-02", "CCN-04", "ACK-10")
QUEUES = from_machine(lambda m: list(m.real))
CONSUMERS = from_machine(lambda m: m.consumers())  # (channel key, consumer tag)


class ClientConsumingMachine(ClientMachine):
    """Consumers on channels 1 and 2; the library's events checked after every step."""

    SETTLE_SECONDS: ClassVar[float] = 2.0

    def __init__(self, make: Callable[[], ClientDriver], profile: str) -> None:
        self.consumer_ids = itertools.count(1)
        self.held: list[tuple[int, Deliver]] = []
        super().__init__(make, profile)

    def setup_queues(self) -> None:
        self.declare("q1")
        self.declare("q2")

    def consumers(self) -> list[tuple[int, str]]:
        return [(key, tag) for key in (1, 2) for tag in self.model.consumer_tags(key)]

    def key_of(self, number: int) -> int:
        return next(key for key, n in self.numbers.items() if n == number)

    def consume_from(self, key: int, logical: str, no_ack: bool) -> None:
        tag = f"c{next(self.consumer_ids)}"  # named by the machine, so the model knows it
        observed = attempt(lambda: self.driver.consume(self.numbers[key], self.real[logical], consumer_tag=tag,
                                                       no_ack=no_ack))
        self._compare(f"basic.consume {logical} {tag} no_ack={no_ack}", key, observed,
                      self.model.consume(key, logical, tag, no_ack=no_ack))

    def publish_to(self, logical: str, count: int) -> None:
        for _ in range(count):
            body = self.body()
            self.driver.publish(self.numbers[1], "", self.real[logical], body)
            self.model.publish(1, "", logical, body)
        self._compare(f"basic.publish x{count} to {logical}", 1, self._sync(1, logical), outcomes.OK)

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
        elif isinstance(event, ChannelClosedEvent) and event.channel not in self.numbers.values():
            pass  # a channel of the machine's own (queue.delete) that it closed itself
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
            if late or not any(self.model.due(k) for k in (1, 2) if k != key):
                try:
                    self.model.deliver(key, delivery)
                except Violation as exc:
                    raise AssertionError(f"{self.unexpected(key, delivery)}: {exc}") from None

    def unexpected(self, key: int, delivery: Deliver) -> str:
        """The rule an unexpected delivery breaks, as far as the model's state shows it."""
        consumer = self.model.state.channels[key].consumers.get(delivery.consumer_tag)
        if consumer is None:
            return f"CCN-04: a delivery to {delivery.consumer_tag}, which is not (or no longer) a consumer"
        if consumer.prefetch and not consumer.no_ack and consumer.outstanding >= consumer.prefetch:
            return (f"QOS-02: {consumer.tag} already holds {consumer.outstanding} unacked deliveries, its prefetch "
                    f"is {consumer.prefetch}")
        if any(delivery.body in self._held(k) for k in (1, 2)):
            return f"ACK-10: {delivery.body!r} is still unacked (cancelling a consumer leaves its deliveries)"
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
            while (event := self.driver.next_event(0.0)) is not None:
                self.on_event(event)
            self.admit_held(late=time.monotonic() > deadline)
            waiting = self.waiting_for() or self.still_owed()
            if waiting is None and not self.held:
                if flushed:
                    break
                for key in (1, 2):
                    self._compare("round trip", key, self._sync(key), outcomes.OK)
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
        self.settle_events()
        super().final_check()

    # -- shared rules --------------------------------------------------------------------------
    @rule(key=KEYS, queue=QUEUES, no_ack=st.booleans())
    @client_step
    def consume(self, key: int, queue: str, no_ack: bool) -> None:
        self.consume_from(key, queue, no_ack)

    @rule(queue=QUEUES, count=st.integers(1, 3))
    @client_step
    def publish(self, queue: str, count: int) -> None:
        self.publish_to(queue, count)

    @rule(delivery=OUTSTANDING, how=st.sampled_from(["ack", "reject"]), multiple=st.booleans())
    @client_step
    def settle(self, delivery: tuple[int, int] | None, how: str, multiple: bool) -> None:
        if delivery is not None:
            key, tag = delivery
            self.settle_tag(key, how, tag, multiple, True)


class ClientPrefetchMachine(ClientConsumingMachine):
    """QOS-02, QOS-07, QOS-08, ACK-01 through a client library (module doc)."""

    @rule(key=KEYS, prefetch=st.integers(0, 3))
    @client_step
    def qos(self, key: int, prefetch: int) -> None:
        observed = attempt(lambda: self.driver.qos(self.numbers[key], prefetch))
        self._compare(f"basic.qos prefetch_count={prefetch}", key, observed, self.model.qos(key, prefetch))

    @rule(key=KEYS, queue=QUEUES)
    @client_step
    def get(self, key: int, queue: str) -> None:
        self.get_from(key, queue, no_ack=False)  # QOS-07: basic.get ignores the prefetch


class ClientCancelMachine(ClientConsumingMachine):
    """CCN-02, CCN-04, ACK-10 through a client library (module doc)."""

    def setup_queues(self) -> None:
        self.declare("q")  # one queue: every deletion meets every consumer there is

    @rule(consumer=CONSUMERS)
    @client_step
    def cancel(self, consumer: tuple[int, str] | None) -> None:
        if consumer is not None:
            key, tag = consumer
            observed = attempt(lambda: self.driver.cancel(self.numbers[key], tag))
            self._compare(f"basic.cancel {tag}", key, observed, self.model.cancel(key, tag))

    @rule(queue=QUEUES)
    @client_step
    def delete_and_declare(self, queue: str) -> None:
        """queue.delete on a channel of its own: the broker cancels the queue's consumers (CCN-02)."""
        control = self.driver.open_channel()
        self.driver.delete_queue(control, self.real[queue])
        self.model.delete_queue(queue)
        self.driver.declare_queue(control, self.real[queue])
        self.model.declare_queue(queue)
        self.driver.close_channel(control)
