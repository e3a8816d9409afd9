"""Model-vs-broker machine for acknowledgements.

AckMachine: basic.ack / nack / reject with any tag (0, unknown, double, multiple with a settled
tag), basic.get and consumers sharing one tag counter, recover (both requeue values), cancel
leaving deliveries, channel close. Steps read like a client program; the model (conformance.model)
says what the broker must answer; machine_base settles and compares after every step.
ClusterAckMachine (a run with a cluster): the same and a classic queue on node 2 whose
node a step stops and starts (machine_cluster: CLU-01/02); without a cluster AckMachine, unchanged.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from conformance.plugin.session import Target
from conformance.suite.steps import machine_steps as do
from conformance.suite.steps.machine_base import run_machine, step
from conformance.suite.steps.machine_cluster import ClusterConsuming, cluster_for
from conformance.suite.steps.machine_consuming import (
    CHANNELS,
    DELIVERY,
    HOW,
    ConsumingMachine,
    machine_target,
)


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
        if any(self.model.consumer_no_ack(c, t) for c, t in self.consumers()):
            return  # RQ-03 races a no-ack consumer of the closing connection (settlement.py)
        do.recover(self, ch, requeue=False)  # ACK-09: connection.close 540, then RQ-03


class ClusterAckMachine(ClusterConsuming, AckMachine):
    """AckMachine and the node stop (CLU-01/02: cancels owed, orphaned tags still settle)."""


ACK_RULES = ("ACK-01", "ACK-03", "ACK-04", "ACK-05", "ACK-06", "ACK-07", "ACK-09", "ACK-10", "RQ-03")


@pytest.mark.rules(*ACK_RULES)
def test_acknowledgements_match_the_model(target: Target, request: pytest.FixtureRequest) -> None:
    machine = machine_target(target)
    cluster = cluster_for(target, request, "CLU-01", "CLU-02")
    if cluster is None:
        run_machine(AckMachine, machine, examples=120, steps=10)
    else:  # with a cluster: node stops too
        run_machine(ClusterAckMachine, machine, examples=120, steps=10, cluster=cluster)
