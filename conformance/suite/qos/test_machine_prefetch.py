"""Model-vs-broker machine for prefetch (basic.qos), per consumer and per channel.

PrefetchMachine: consumers on two classic queues and two channels under changing basic.qos
limits, with acks, nacks, rejects, recover and basic.get interleaved. The model (prefetch.py)
says which consumer may receive how much; a delivery beyond a limit, or a missing delivery a
limit allows, fails the run. `global=true` is channel-wide where the profile honours it
(rabbitmq-3.10/3.12/4.0) and per consumer on rabbitmq-4.3 (QOS-03); a limit changed while
deliveries are in flight may be overshot briefly (QOS-09).
ClusterPrefetchMachine (a run with a cluster): the same and a classic queue on node 2
whose node a step stops and starts (machine_cluster: CLU-01/02, its consumers' credit goes with
them); without a cluster PrefetchMachine, unchanged.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from conformance.plugin.session import Target
from conformance.suite.steps import machine_steps as do
from conformance.suite.steps.machine_base import run_machine, step
from conformance.suite.steps.machine_cluster import ClusterConsuming, cluster_for
from conformance.suite.steps.machine_consuming import CHANNELS, QUEUE, ConsumingMachine, machine_target


class PrefetchMachine(ConsumingMachine):
    """QOS-02..09 on two classic queues."""

    def setup_queues(self) -> tuple[str, ...]:
        self.declare("q1")
        self.declare("q2")
        return ("q1", "q2")

    @rule(ch=CHANNELS, prefetch=st.integers(0, 3), global_=st.booleans())
    @step
    def qos(self, ch: int, prefetch: int, global_: bool) -> None:
        do.qos(self, ch, prefetch, global_)  # QOS-02/03/04/05

    @rule(ch=CHANNELS, queue=QUEUE, no_ack=st.booleans())
    @step
    def consume(self, ch: int, queue: str, no_ack: bool) -> None:
        # the channel's qos stays as it is: the consumer takes its prefetch now (QOS-02),
        # no-ack consumers are not limited per consumer (QOS-08)
        do.consume(self, ch, queue, f"c{next(self.consumer_ids)}", no_ack=no_ack)

    @rule(ch=CHANNELS, queue=QUEUE, count=st.integers(1, 3), qos_ch=CHANNELS,
          prefetch=st.integers(0, 3), global_=st.booleans())
    @step
    def publish_then_qos(self, ch: int, queue: str, count: int, qos_ch: int, prefetch: int, global_: bool) -> None:
        for _ in range(count):
            do.publish(self, ch, "", queue)
        do.qos(self, qos_ch, prefetch, global_)  # QOS-09: the change races the deliveries


class ClusterPrefetchMachine(ClusterConsuming, PrefetchMachine):
    """PrefetchMachine and the node stop (CLU-01/02)."""


PREFETCH_RULES = ("QOS-02", "QOS-03", "QOS-04", "QOS-05", "QOS-07", "QOS-08", "QOS-09", "ACK-01")


@pytest.mark.rules(*PREFETCH_RULES)
def test_prefetch_limits_match_the_model(target: Target, request: pytest.FixtureRequest) -> None:
    machine = machine_target(target)
    cluster = cluster_for(target, request, "CLU-01", "CLU-02")
    if cluster is None:
        run_machine(PrefetchMachine, machine, examples=120, steps=10)
    else:  # with a cluster: node stops too
        run_machine(ClusterPrefetchMachine, machine, examples=120, steps=10, cluster=cluster)
