"""The consumer-side machine base shared by the ack, requeue and prefetch machines.

Responsibility: one connection with channels 1 and 2, a pool of queues, and the rules every
consuming client has: publish, basic.get, consume, cancel, ack/nack/reject an outstanding
delivery, recover, channel close. Values that depend on the run (outstanding deliveries,
consumers, the queue pool) are drawn from the running machine, so a step names exactly what it
acts on: `settle_delivery(delivery=(1, 3), how='nack', multiple=True, requeue=True)`.
Rules: see machine_steps (ACK-01..10, QOS-02/07, RQ-03, CCN-03).
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import rule

from conformance.plugin.hooks import Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite import machine_steps as do
from conformance.suite.machine_base import MachineTarget, ModelMachine, step

CHANNELS = st.sampled_from([1, 2])
HOW = st.sampled_from(["ack", "nack", "reject"])


def from_machine(choices: Any) -> st.SearchStrategy[Any]:
    """A value drawn from the running machine's state (st.runner() is the machine), or None
    when there is none: rules then do nothing, which shrinks better than preconditions
    (a rejected precondition leaves draws behind that the shrinker struggles to delete)."""
    return st.runner().flatmap(lambda machine: st.sampled_from(choices(machine) or [None]))


QUEUE = from_machine(lambda m: m.queue_pool)
DELIVERY = from_machine(lambda m: m.outstanding())  # (channel, delivery tag)
CONSUMER = from_machine(lambda m: m.consumers())  # (channel, consumer tag)


def machine_target(target: Target) -> MachineTarget:
    """The machine's view of the pytest target; the model encodes RabbitMQ semantics, so a
    plain 0-9-1 broker is judged by the example tests instead (their variants)."""
    if not target.profile.rabbitmq:
        not_applicable(f"the model machines encode RabbitMQ semantics, not {target.profile.name}")
    return MachineTarget(target.url, target.profile.name, target.timeout_scale)


class ConsumingMachine(ModelMachine):
    """One connection, channels 1 and 2, and the consumer-side rules shared by the machines."""

    def __init__(self, target: MachineTarget) -> None:
        super().__init__(target)
        self.consumer_ids = itertools.count(1)
        self.connect("A")
        self.open(1)
        self.open(2)
        self.queue_pool = self.setup_queues()

    def setup_queues(self) -> tuple[str, ...]:
        self.declare("q")
        return ("q",)

    def outstanding(self) -> list[tuple[int, int]]:
        return [(ch, tag) for ch in (1, 2) for tag in self.model.unacked_tags(ch)]

    def consumers(self) -> list[tuple[int, str]]:
        return [(ch, tag) for ch in (1, 2) for tag in self.model.consumer_tags(ch)]

    @rule(ch=CHANNELS, queue=QUEUE, count=st.integers(1, 4))
    @step
    def publish(self, ch: int, queue: str, count: int) -> None:
        for _ in range(count):
            do.publish(self, ch, "", queue)

    @rule(ch=CHANNELS, queue=QUEUE, no_ack=st.booleans())
    @step
    def get(self, ch: int, queue: str, no_ack: bool) -> None:
        do.get(self, ch, queue, no_ack)

    @rule(ch=CHANNELS, queue=QUEUE, prefetch=st.integers(0, 2), no_ack=st.booleans())
    @step
    def consume(self, ch: int, queue: str, prefetch: int, no_ack: bool) -> None:
        do.qos(self, ch, prefetch)
        do.consume(self, ch, queue, f"c{next(self.consumer_ids)}", no_ack=no_ack)

    @rule(consumer=CONSUMER)
    @step
    def cancel(self, consumer: tuple[int, str] | None) -> None:
        if consumer is not None:
            do.cancel(self, *consumer)  # ACK-10: its deliveries stay outstanding

    @rule(delivery=DELIVERY, how=HOW, multiple=st.booleans(), requeue=st.booleans())
    @step
    def settle_delivery(self, delivery: tuple[int, int] | None, how: str, multiple: bool, requeue: bool) -> None:
        if delivery is None:
            return
        ch, tag = delivery
        do.settle(self, ch, how, tag, multiple and how != "reject", requeue)

    @rule(ch=CHANNELS)
    @step
    def recover(self, ch: int) -> None:
        do.recover(self, ch, requeue=True)

    @rule(ch=CHANNELS)
    @step
    def close_channel(self, ch: int) -> None:
        do.close_channel(self, ch)
