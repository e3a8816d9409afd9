"""The consumer-side machine base shared by the ack, requeue and prefetch machines.

Responsibility: one connection with channels 1 and 2, a pool of queues, and the rules every
consuming client has: publish, basic.get, consume, cancel, ack/nack/reject an outstanding
delivery, recover, channel close. Values that depend on the run (outstanding deliveries,
consumers, the queue pool) are drawn as indices and resolved against the running machine
(`from_machine`), so the program a failure reports names exactly what each step acted on:
`settle_delivery(delivery=(1, 3), how='nack', multiple=True, requeue=True)`. At the end of every
example both channels are closed: what the broker still held unacked comes back (RQ-03) and
the queues' counts must then match the model, so a settlement the broker mis-heard (an ack
that settled more or less than the rules say) is found even when no later step touched it.
Rules: see machine_steps (ACK-01..10, QOS-02/07, RQ-03, CCN-03).
"""

from __future__ import annotations

import itertools

from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from conformance.plugin.session import Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps import machine_steps as do
from conformance.suite.steps.machine_base import MachineTarget, ModelMachine, from_machine, step

CHANNELS = st.sampled_from([1, 2])
HOW = st.sampled_from(["ack", "nack", "reject"])


QUEUE = from_machine(lambda m: m.queue_picks())
DELIVERY = from_machine(lambda m: m.outstanding())  # (channel, delivery tag)
CONSUMER = from_machine(lambda m: m.consumers())  # (channel, consumer tag)


def machine_target(target: Target) -> MachineTarget:
    """The machine's view of the pytest target; the model encodes RabbitMQ semantics, so a
    plain 0-9-1 broker is judged by the example tests instead (their variants)."""
    if not target.profile.name.startswith("rabbitmq-"):  # a claimed extension runs as its RabbitMQ profile
        not_applicable(f"the model machines encode RabbitMQ semantics, not {target.profile.name}")
    return MachineTarget(target.url, target.profile.name, target.timeout_scale, target.profile.rabbitmq)


class ConsumingMachine(ModelMachine):
    """One connection, channels 1 and 2, and the consumer-side rules shared by the machines."""

    def __init__(self, target: MachineTarget) -> None:
        super().__init__(target)
        self.consumer_ids = itertools.count(1)
        self.connect("A")
        self.open(1)
        self.open(2)
        with self.pipelined():
            self.queue_pool = self.setup_queues()

    def setup_queues(self) -> tuple[str, ...]:
        self.declare("q")
        return ("q",)

    def queue_picks(self) -> tuple[str, ...]:
        """What a QUEUE pick chooses from (counted from the end, `Pick`): the pool, as set up."""
        return self.queue_pool

    def final_check(self) -> None:
        for ch in (1, 2):
            if self.model.is_open(ch):
                self.program.add("close_channel", {"ch": ch}, teardown=True)
                do.close_channel(self, ch)
        self.sync()

    def explain_missing(self, waiting: str) -> str:
        """A missing delivery the probe traces to a multiple settle that did not settle (ACK-05)."""
        if self.model.due():
            return do.held_below_multiple(self) or waiting
        return waiting

    def outstanding(self) -> list[tuple[int, int]]:
        return [(ch, tag) for ch in (1, 2) for tag in self.model.unacked_tags(ch)]

    def consumers(self) -> list[tuple[int, str]]:
        return [(ch, tag) for ch in (1, 2) for tag in self.model.consumer_tags(ch)]

    @initialize(ch=CHANNELS, count=st.integers(2, 4), consume=st.booleans(), prefetch=st.integers(0, 3))
    @step
    def start(self, ch: int, count: int, consume: bool, prefetch: int) -> None:
        """Every example starts with messages ready in each queue and, often, a manual-ack
        consumer holding some of them: the rules that follow have something to act on."""
        for queue in self.queue_pool:
            for _ in range(count):
                do.publish(self, ch, "", queue)
        if consume:
            do.qos(self, ch, prefetch)
            do.consume(self, ch, self.queue_pool[0], f"c{next(self.consumer_ids)}")

    @rule(ch=CHANNELS, queue=QUEUE, count=st.integers(1, 4))
    @step
    def publish(self, ch: int, queue: str, count: int) -> None:
        for _ in range(count):
            do.publish(self, ch, "", queue)

    @rule(ch=CHANNELS, queue=QUEUE, no_ack=st.booleans())
    @step
    def get(self, ch: int, queue: str, no_ack: bool) -> None:
        if not self.model.ready(queue):  # a get-empty shows little: publish one first
            do.publish(self, ch, "", queue)
            self.sync()
        do.get(self, ch, queue, no_ack)

    @rule(ch=CHANNELS, queue=QUEUE, prefetch=st.integers(0, 2), no_ack=st.booleans(), count=st.integers(0, 3))
    @step
    def consume(self, ch: int, queue: str, prefetch: int, no_ack: bool, count: int) -> None:
        """basic.qos, basic.consume, then `count` publishes for it (or its neighbours)."""
        do.qos(self, ch, prefetch)
        do.consume(self, ch, queue, f"c{next(self.consumer_ids)}", no_ack=no_ack)
        for _ in range(count):
            do.publish(self, ch, "", queue)

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

    @rule(ch=CHANNELS, how=st.sampled_from(["ack", "nack"]), requeue=st.booleans())
    @step
    def settle_all(self, ch: int, how: str, requeue: bool) -> None:
        """What batching clients do: ack (or nack) the newest delivery with multiple=true (ACK-05)."""
        tags = self.model.unacked_tags(ch)
        if tags:
            do.settle(self, ch, how, max(tags), True, requeue)

    @rule(ch=CHANNELS)
    @step
    def recover(self, ch: int) -> None:
        do.recover(self, ch, requeue=True)

    @rule(ch=CHANNELS)
    @step
    def close_channel(self, ch: int) -> None:
        do.close_channel(self, ch)
