"""Model-vs-broker machine for requeueing.

RequeueMachine: where requeued messages go back and their redelivered flag, on a classic and a
quorum queue, through reject, nack, recover and channel close. Steps read like a client program;
the model (conformance.model) says what the broker must answer; machine_base settles and compares
after every step.
ClusterRequeueMachine (a run with a cluster): the quorum queue is declared on node 2 (its
leader there), a classic queue lives there too, and a step stops and starts node 2: the quorum
queue fails over keeping its consumers and unacked deliveries (CLU-05), the classic one loses
its consumers (CLU-01/02; machine_cluster). Without a cluster RequeueMachine, unchanged.
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
    DELIVERY,
    ConsumingMachine,
    machine_target,
)


class RequeueMachine(ConsumingMachine):
    """RQ-01..04 on a classic and a quorum queue (returns via reject, nack, recover, close)."""

    def setup_queues(self) -> tuple[str, ...]:
        self.declare("classic")
        if not self.model.traits.quorum_queues:
            return ("classic",)
        self.declare("quorum", "quorum")
        return ("classic", "quorum")

    def queue_picks(self) -> tuple[str, ...]:
        """The classic queues last: pick(0), what Hypothesis shrinks a queue to, is a classic one,
        whose count `sync` calls wrong after SETTLE_SECONDS, where a quorum queue's takes
        CONSENSUS_SETTLE_SECONDS (machine_base) and a smallest failure is replayed with full waits.
        `start` still consumes from the first queue of the pool."""
        return tuple(sorted(self.queue_pool, key=lambda queue: self.declared[queue][0] == "classic"))

    @rule(delivery=DELIVERY, how=st.sampled_from(["nack", "reject"]))
    @step
    def requeue(self, delivery: tuple[int, int] | None, how: str) -> None:
        if delivery is None:
            return
        ch, tag = delivery
        do.settle(self, ch, how, tag, False, True)  # ACK-07, RQ-01/RQ-02


class ClusterRequeueMachine(ClusterConsuming, RequeueMachine):
    """RequeueMachine and the node stop (CLU-01/02, CLU-05 on the quorum queue)."""


REQUEUE_RULES = ("RQ-01", "RQ-02", "RQ-03", "RQ-04", "ACK-07", "ACK-09")


@pytest.mark.rules(*REQUEUE_RULES)
def test_requeue_order_and_redelivered_match_the_model(target: Target, request: pytest.FixtureRequest) -> None:
    machine = machine_target(target)
    cluster = cluster_for(target, request, "CLU-01", "CLU-02", "CLU-05")
    if cluster is None:
        run_machine(RequeueMachine, machine, examples=120, steps=10)
    else:  # with a cluster: node stops too
        run_machine(ClusterRequeueMachine, machine, examples=120, steps=10, cluster=cluster)
