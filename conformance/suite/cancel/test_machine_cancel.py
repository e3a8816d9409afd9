"""Model-vs-broker machine for consumer cancel notification.

CancelMachine: connection A advertises consumer_cancel_notify, connection B does not. Both
consume (no-ack) from two classic queues that steps delete and declare again; clients cancel
live, already cancelled, broker-cancelled and never-used tags, sometimes racing a queue
deletion. The model (consumers.py) says which broker basic.cancel must come (CCN-02), which
may come (a client cancel raced it, CCN-03), and that nothing is delivered to a consumer after
its cancel-ok (CCN-04).

ClusterCancelMachine (a run with a cluster): the same machine and a durable classic
queue q3 declared on node 2 (the connections are on node 1); a step stops node 2 while a
consumer consumes from q3 and starts it again (conformance.model.cluster: CLU-01/02, its consumers
are cancelled, basic.cancel where consumer_cancel_notify is on, owed as CLU-01, and stay gone; its
transient messages are lost). Without a cluster the machine is CancelMachine, unchanged, so its
examples (seeded by run_machine's factory) are the same; with one the test also claims CLU-01/02.
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from codec import BasicCancel, BasicCancelOk, QueueDeclare, QueueDeclareOk, QueueDelete, QueueDeleteOk
from conformance.drivers.raw import DriverError
from conformance.model import OK
from conformance.plugin.session import Target
from conformance.suite.steps import machine_steps as do
from conformance.suite.steps.machine_base import (
    CONTROL,
    MachineTarget,
    ModelMachine,
    from_machine,
    run_machine,
    step,
)
from conformance.suite.steps.machine_cluster import MachineCluster, cluster_for, visible_on_node_1
from conformance.suite.steps.machine_consuming import machine_target

CONNECTIONS = st.sampled_from(["A", "B"])  # A: consumer_cancel_notify, B: without it
QUEUES = st.sampled_from(["q1", "q2"])
DECLARED = from_machine(lambda m: m.model.queues())
CONSUMER = from_machine(lambda m: m.live_consumers())
ANY_TAG = from_machine(lambda m: m.all_tags())


class CancelMachine(ModelMachine):
    """CCN-02, CCN-03, CCN-04 and CCN-07 over two connections."""

    def __init__(self, target: MachineTarget) -> None:
        super().__init__(target)
        self.tag_ids = itertools.count(1)
        self.used_tags: dict[str, list[str]] = {"A": [], "B": []}
        self.connect("A", consumer_cancel_notify=True)
        self.connect("B", consumer_cancel_notify=False)
        self.open("A", "A", 1)
        self.open("B", "B", 1)
        with self.pipelined():
            for queue in ("q1", "q2"):
                self.declare(queue)

    def live_consumers(self) -> list[tuple[str, str]]:
        return [(ch, tag) for ch in ("A", "B") for tag in self.model.consumer_tags(ch)]

    def all_tags(self) -> list[tuple[str, str]]:
        return [(ch, tag) for ch in ("A", "B") for tag in [*self.used_tags[ch], "never-used"]]

    @rule(queue=QUEUES)
    @step
    def declare_queue(self, queue: str) -> None:
        self.declare(queue)

    @rule(queue=QUEUES)
    @step
    def delete_queue(self, queue: str) -> None:
        if not self.model.has_queue(queue):
            return
        control = self.clients[self.control_conn]
        reply = control.rpc(CONTROL, QueueDelete(queue=self.real[queue]), QueueDeleteOk)
        assert isinstance(reply.method, QueueDeleteOk), f"queue.delete: {reply.method} (CCN-02)"
        count = self.model.delete_queue(queue)  # CCN-02: A's consumers get basic.cancel
        assert reply.method.message_count == count, \
            f"queue.delete-ok says {reply.method.message_count}, model {count} (CCN-02: deleting the queue cancels)"

    @rule(ch=CONNECTIONS, queue=DECLARED)
    @step
    def consume(self, ch: str, queue: str | None) -> None:
        if queue is not None:
            self.consume_from(ch, queue)

    @rule(ch=CONNECTIONS, queue=QUEUES)
    @step
    def consume_any(self, ch: str, queue: str) -> None:
        self.consume_from(ch, queue)  # CCN-07: 404 when the queue is gone

    def consume_from(self, ch: str, queue: str) -> None:
        tag = f"c{next(self.tag_ids)}"
        self.used_tags[ch].append(tag)
        do.consume(self, ch, queue, tag, no_ack=True)

    @rule(consumer=CONSUMER)
    @step
    def reuse_tag(self, consumer: tuple[str, str] | None) -> None:
        if consumer is None or not self.model.may_reuse_tag(*consumer):
            return
        ch, tag = consumer
        do.consume(self, ch, self.model.consumer_queue(ch, tag), tag, no_ack=True)  # CCN-07: 530

    @rule(consumer=ANY_TAG)
    @step
    def cancel(self, consumer: tuple[str, str]) -> None:
        do.cancel(self, *consumer)  # CCN-03: cancel-ok for any tag

    @rule(queue=QUEUES, count=st.integers(1, 3))
    @step
    def publish(self, queue: str, count: int) -> None:
        for _ in range(count):
            do.publish(self, "A", "", queue)  # CCN-04: only live consumers may receive

    @rule(queue=QUEUES, consumer=CONSUMER)
    @step
    def delete_racing_cancel(self, queue: str, consumer: tuple[str, str] | None) -> None:
        """queue.delete and, before its reply, basic.cancel of one of its consumers (CCN-03)."""
        if consumer is None or not self.model.has_queue(queue):
            return
        ch, tag = consumer
        control = self.clients[self.control_conn]
        client, number = self.client(ch)
        control.send(CONTROL, QueueDelete(queue=self.real[queue]))
        client.send(number, BasicCancel(consumer_tag=tag))
        control.expect(CONTROL, QueueDeleteOk, timeout=self.target.timeout(self.SETTLE_SECONDS))
        self.expect_cancel_ok(ch, tag)
        self.model.delete_queue(queue)
        self.drain_channel(ch, [])  # deliveries and notifications that came before cancel-ok
        self.expect_outcome(f"basic.cancel {tag}", OK, self.model.cancel(ch, tag))

    def expect_cancel_ok(self, ch: Any, tag: str) -> None:
        client, number = self.client(ch)
        try:
            reply = client.expect(number, BasicCancelOk, timeout=self.target.timeout(self.SETTLE_SECONDS))
        except DriverError as exc:
            raise AssertionError(f"basic.cancel {tag} on {ch}: {exc} (CCN-03: cancel-ok always)") from None
        assert isinstance(reply.method, BasicCancelOk) and reply.method.consumer_tag == tag, \
            f"basic.cancel-ok names {reply.method.fields()}, not {tag!r}"


class ClusterCancelMachine(CancelMachine):
    """CancelMachine with a classic queue on node 2 whose node a step stops and starts (CLU-01/02)."""

    REMOTE = "q3"  # on node 2
    ADAPTIVE_HURRY: ClassVar[bool] = False  # a node's stop and start are slower than any settle before them
    REPLAY_REDUCTION: ClassVar[bool] = False  # each replay would wait on that clock again (machine_base)
    NODE = 2

    def __init__(self, target: MachineTarget, cluster: MachineCluster) -> None:
        super().__init__(target)
        self.nodes = cluster
        self.cluster = cluster.cluster(target.timeout_scale, self.recorder)
        real = self.real.setdefault(self.REMOTE, f"{self.prefix}.{self.REMOTE}")
        self.declared[self.REMOTE] = ("classic", True, {})
        home = self.cluster.connect(self.NODE)  # a classic queue lives on the node that declares it
        home.rpc(home.channel(), QueueDeclare(queue=real, durable=True, arguments={"x-queue-type": "classic"}),
                 QueueDeclareOk)
        home.close()
        visible_on_node_1(self.cluster, real, target.timeout_scale)  # node 1 routes to it (Khepri lag)
        self.model.declare_queue(self.REMOTE)

    @rule()
    @step
    def stop_the_remote_queues_node(self) -> None:
        if not any(self.model.consumer_queue(*c) == self.REMOTE for c in self.live_consumers()):
            return
        self.nodes.stop(self.cluster, self.NODE)
        self.cluster.start(self.NODE)
        self.model.node_stopped_and_started([self.REMOTE], [])  # CLU-01: cancelled; CLU-02: back without them

    def cleanup(self) -> None:
        self.cluster.restore()
        super().cleanup()


CANCEL_RULES = ("CCN-02", "CCN-03", "CCN-04", "CCN-07")


@pytest.mark.rules(*CANCEL_RULES)
def test_cancel_notification_matches_the_model(target: Target, request: pytest.FixtureRequest) -> None:
    machine = machine_target(target)
    cluster = cluster_for(target, request, "CLU-01", "CLU-02")
    if cluster is None:
        run_machine(CancelMachine, machine, examples=120, steps=10)
    else:  # with a cluster: node stops too
        run_machine(ClusterCancelMachine, machine, examples=120, steps=10, cluster=cluster)
