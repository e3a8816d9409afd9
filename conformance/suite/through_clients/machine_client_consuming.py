"""Consumers through a client library: the prefetch and cancel-notification machines.

Responsibility: `ClientConsumingMachine`, consumers on channels 1 and 2 with the rules the
consuming machines share (consume, publish, ack / reject), whose deliveries and broker cancels
the library reports on its own and machine_client_events checks after every step. On it:
- `ClientPrefetchMachine` (QOS-02, QOS-08, ACK-01): basic.qos global=false with 0..3,
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

Rules: as machine_client_events (events checked after every step, bounded waits).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from hypothesis import strategies as st
from hypothesis.stateful import rule

from conformance.drivers.interface import ClientDriver, Recorder, attempt
from conformance.model import outcomes
from conformance.suite.steps.machine_budget import Budget
from conformance.suite.steps.machine_support import from_machine
from conformance.suite.through_clients.machine_client_events import ClientEventsMachine
from conformance.suite.through_clients.machine_clients import KEYS, OUTSTANDING, client_step

# QOS-07 (basic.get ignores the prefetch) is checked by the get steps but not claimed: the
# get_obeys_prefetch fault was not met within the budget
PREFETCH_RULES = ("QOS-02", "QOS-08", "ACK-01")
CANCEL_RULES = ("CCN-02", "CCN-04", "ACK-10")
QUEUES = from_machine(lambda m: list(m.real))
CONSUMERS = from_machine(lambda m: m.consumers())  # (channel key, consumer tag)


class ClientConsumingMachine(ClientEventsMachine):
    """Consumers on channels 1 and 2 and two classic queues: the shared rules."""

    def __init__(self, make: Callable[[], ClientDriver], profile: str, *, recorder: Recorder,
                 budget: Budget | None = None) -> None:
        self.consumer_ids = itertools.count(1)
        super().__init__(make, profile, recorder=recorder, budget=budget)

    def setup_queues(self) -> None:
        self.declare("q1")
        self.declare("q2")

    def consumers(self) -> list[tuple[int, str]]:
        return [(key, tag) for key in (1, 2) for tag in self.model.consumer_tags(key)]

    def consume_from(self, key: int, logical: str, no_ack: bool) -> None:
        tag = f"c{next(self.consumer_ids)}"  # named by the machine, so the model knows it
        given: list[str] = []
        observed = attempt(lambda: given.append(self.driver.consume(self.numbers[key], self.real[logical],
                                                                    consumer_tag=tag, no_ack=no_ack)))
        tag = given[0] if given else tag  # a library that names consumers itself (kombu: a prefix and a count)
        self._compare(f"basic.consume {logical} {tag} no_ack={no_ack}", key, observed,
                      self.model.consume(key, logical, tag, no_ack=no_ack))

    def publish_to(self, logical: str, count: int) -> None:
        for _ in range(count):
            body = self.body()
            self.driver.publish(self.numbers[1], "", self.real[logical], body)
            self.model.publish(1, "", logical, body)
        self._compare(f"basic.publish x{count} to {logical}", 1, self._sync(1, logical), outcomes.OK)

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
    """QOS-02, QOS-08, ACK-01 through a client library (module doc)."""

    def setup_queues(self) -> None:
        super().setup_queues()
        for key, prefetch in ((1, 1), (2, 2)):  # limits from the start: most programs meet them
            self.driver.qos(self.numbers[key], prefetch)
            self.model.qos(key, prefetch)

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

    @rule(key=KEYS)
    @client_step
    def get(self, key: int) -> None:
        self.get_from(key, "q", no_ack=False)  # what a cancelled consumer held stays out of the queue (ACK-10)

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
