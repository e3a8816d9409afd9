"""Model-vs-broker machines for acknowledgements and requeueing (issue 4).

AckMachine: basic.ack / nack / reject with any tag (0, unknown, double, multiple with a settled
tag), basic.get and consumers sharing one tag counter, recover (both requeue values), cancel
leaving deliveries, channel close. RequeueMachine: where requeued messages go back and their
redelivered flag, on a classic and a quorum queue, through reject, nack, recover and channel
close. Steps read like a client program; the model (conformance.model) says what the broker
must answer; machine_base settles and compares after every step.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from conformance.plugin import Target
from conformance.suite import machine_steps as do
from conformance.suite.machine_base import MachineTarget, ModelMachine, run_machine, step

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


class AckMachine(ConsumingMachine):
    """ACK-01..07, ACK-09, ACK-10, RQ-03 on one classic queue."""

    @rule(ch=CHANNELS, how=HOW, tag=st.integers(0, 8), multiple=st.booleans(), requeue=st.booleans())
    @step
    def settle_any_tag(self, ch: int, how: str, tag: int, multiple: bool, requeue: bool) -> None:
        do.settle(self, ch, how, tag, multiple and how != "reject", requeue)  # ACK-03..06

    @rule(delivery=DELIVERY, how=HOW)
    @step
    def settle_twice(self, delivery: tuple[int, int] | None, how: str) -> None:
        if delivery is None:
            return
        ch, tag = delivery
        do.settle(self, ch, how, tag, False, False)
        do.settle(self, ch, how, tag, False, False)  # ACK-04: the second one is unknown

    @rule(ch=CHANNELS)
    @step
    def recover_without_requeue(self, ch: int) -> None:
        do.recover(self, ch, requeue=False)  # ACK-09: connection.close 540, then RQ-03


class RequeueMachine(ConsumingMachine):
    """RQ-01..04 on a classic and a quorum queue (returns via reject, nack, recover, close)."""

    def setup_queues(self) -> tuple[str, ...]:
        self.declare("classic")
        if not self.model.traits.quorum_queues:
            return ("classic",)
        self.declare("quorum", "quorum")
        return ("classic", "quorum")

    @rule(delivery=DELIVERY, how=st.sampled_from(["nack", "reject"]))
    @step
    def requeue(self, delivery: tuple[int, int] | None, how: str) -> None:
        if delivery is None:
            return
        ch, tag = delivery
        do.settle(self, ch, how, tag, False, True)  # ACK-07, RQ-01/RQ-02


ACK_RULES = ("ACK-01", "ACK-03", "ACK-04", "ACK-05", "ACK-06", "ACK-07", "ACK-09", "ACK-10", "RQ-03")
REQUEUE_RULES = ("RQ-01", "RQ-02", "RQ-03", "RQ-04", "ACK-07", "ACK-09")


@pytest.mark.rules(*ACK_RULES)
def test_acknowledgements_match_the_model(target: Target) -> None:
    run_machine(AckMachine, machine_target(target), examples=40, steps=30)


@pytest.mark.rules(*REQUEUE_RULES)
def test_requeue_order_and_redelivered_match_the_model(target: Target) -> None:
    run_machine(RequeueMachine, machine_target(target), examples=40, steps=30)
