"""The node-stop step of the consuming machines when the run names a cluster (CLU-01/02/05).

Responsibility: `ClusterConsuming`, a mixin for the ack, requeue and prefetch machines
(`ConsumingMachine` subclasses): a durable classic queue `remote` declared on node 2 joins the
queue pool, quorum queues are declared on node 2 too (so their leader is there), and the step
`stop_and_start_node_2` stops node 2 and starts it again; the model (conformance.model.cluster)
says what that does. Without a cluster the machines are not these classes: their rules and
examples stay as they were (run_machine's factory seeds them).
Rules:
- A classic queue lives on the node that declares it, a quorum queue's leader too (RabbitMQ 4.x,
  the reference broker); the machine's connections are on node 1, so stopping node 2 never
  closes them.
- The queue pool starts with the queues on node 2 (`start` consumes from the first).
- The step runs only when its outcome is settled and shows something: a consumer of `remote`,
  or an unacked delivery from `remote` or from a quorum queue (CLU-01/02 and CLU-05 as in
  conformance.model.cluster); and at most `MAX_STOPS` times per example (a stop and a start of
  a RabbitMQ node take 5-8 s each).
- A queue declared on node 2 is used through node 1 only once node 1 knows it: a passive declare
  through node 1 answers declare-ok (`visible_on_node_1`, bounded by the run's timeout; the cancel
  machine's q3 too). With
  Khepri (RabbitMQ 4.2+ by default), node 2's declare-ok means the queue's record is committed
  on a majority, not applied on every member; node 1 routes and answers a passive declare from
  its own projections, which its member fills when it applies the command (rabbit_db_queue
  v4.3.5: `get_targets` reads `rabbit_khepri_queue_target`, `get` reads `rabbit_khepri_queue`, both
  local ETS projections of one applied command). A publish to a queue node 1 does not know yet is
  unroutable there and dropped: seen on a loaded machine (grid of 2026-11-26, the requeue and
  prefetch machines: `remote` held 0 of the 4 messages published right after its declare-ok).
- Every node stopped is started again at the example's cleanup (`Cluster.restore`), bounded.
- A machine test run with a cluster claims the CLU rules its node stop can break (`cluster_for`
  adds them to its rules marker at run time); without a cluster it claims none of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import pytest
from hypothesis.stateful import rule

from codec import QueueDeclare, QueueDeclareOk
from codec.constants import ReplyCode
from conformance.catalogue.rules import REQUIRED
from conformance.drivers.raw import ChannelClosed, Recorder
from conformance.plugin.cluster import STOPPED_NODES, Cluster
from conformance.plugin.session import Target, harness
from conformance.run.nodes import ClusterSpec
from conformance.suite.steps.machine_base import MachineTarget, step
from conformance.suite.steps.machine_consuming import ConsumingMachine

NODE = 2  # the node the step stops: it hosts `remote` and leads the quorum queues
REMOTE = "remote"
MAX_STOPS = 1  # node stops per example (a RabbitMQ node's stop and start take 5-8 s each)
VISIBLE_WITHIN = 5.0  # s (scaled): node 1 knows a queue node 2 declared (module rules)


@dataclass(frozen=True)
class MachineCluster:
    """What a machine test hands its machines: the run's cluster and the test's record of the
    nodes its examples stopped (each once: the report's `stopped_nodes`)."""

    spec: ClusterSpec
    stopped: list[int]

    def cluster(self, scale: float, recorder: Recorder) -> Cluster:
        return Cluster(self.spec, scale, recorder)

    def stop(self, cluster: Cluster, index: int) -> None:
        if index not in self.stopped:
            self.stopped.append(index)
        cluster.stop(index)


def cluster_for(target: Target, request: pytest.FixtureRequest, *rules: str) -> MachineCluster | None:
    """The run's cluster when a machine can stop node 2 in it and the profile requires `rules` (where
    they were measured); the test then also claims `rules`: its rules marker gets them at run time,
    so a run without a cluster never lists them as tested."""
    spec = harness(request.config).cluster
    if spec is None or len(spec.urls) < NODE or any(target.base_profile.expect(r) != REQUIRED for r in rules):
        return None
    marker = request.node.get_closest_marker("rules")
    request.node.add_marker(pytest.mark.rules(*(marker.args if marker else ()), *rules), append=False)
    stopped: list[int] = []
    request.node.stash[STOPPED_NODES] = stopped
    return MachineCluster(spec, stopped)


def visible_on_node_1(cluster: Cluster, queue: str, scale: float) -> None:
    """Return once node 1 answers a passive declare of `queue` (module rules); its 404 until then
    closes only the asking channel. Bounded by the run's timeout: past it, the 404 is raised."""
    probe = cluster.connect(1)
    deadline = time.monotonic() + VISIBLE_WITHIN * scale
    pause = 0.01
    try:
        while True:
            try:
                probe.rpc(probe.channel(), QueueDeclare(queue=queue, passive=True), QueueDeclareOk)
                return
            except ChannelClosed as exc:
                if exc.code != ReplyCode.NOT_FOUND or time.monotonic() > deadline:
                    raise
            time.sleep(pause)  # the next ask's spacing; the answer is the synchronisation
            pause = min(pause * 2, 0.2)
    finally:
        probe.close()


class ClusterConsuming(ConsumingMachine):
    """Mixin (first base) for a `ConsumingMachine` subclass: the remote queue and the node stop."""

    ADAPTIVE_HURRY: ClassVar[bool] = False  # a node's stop and start are slower than any settle before them
    REPLAY_REDUCTION: ClassVar[bool] = False  # each replay would wait on that clock again (machine_base)
    PIPELINED_SETUP: ClassVar[bool] = False  # some queues are declared on node 2, over another connection

    def __init__(self, target: MachineTarget, cluster: MachineCluster) -> None:
        self.nodes = cluster
        self.cluster: Cluster | None = None
        self.stops = 0
        self.on_node: dict[str, str] = {}  # logical queue on node 2 -> its kind
        super().__init__(target)

    def setup_queues(self) -> tuple[str, ...]:
        self.cluster = self.nodes.cluster(self.target.timeout_scale, self.recorder)
        pool = super().setup_queues()
        self.declare(REMOTE, durable=True)  # a durable classic queue on node 2 (`declare_on_broker`)
        # the queues on node 2 first: `start` consumes from the first, so most examples hold
        # something the stop changes (a quorum queue first: the remote one is consumed by rules)
        quorum = [q for q in pool if self.on_node.get(q) == "quorum"]
        return (*quorum, REMOTE, *(q for q in pool if q not in quorum))

    def declare_on_broker(self, declare: QueueDeclare) -> None:
        logical = declare.queue.removeprefix(f"{self.prefix}.")
        kind = declare.arguments.get("x-queue-type", "classic")
        if logical != REMOTE and kind != "quorum":
            super().declare_on_broker(declare)
            return
        if logical == REMOTE:
            declare = QueueDeclare(queue=declare.queue, durable=True,
                                   arguments={**declare.arguments, "x-queue-type": "classic"})
        assert self.cluster is not None
        home = self.cluster.connect(NODE)  # it lives (a quorum queue: leads) where it is declared
        home.rpc(home.channel(), declare, QueueDeclareOk)
        home.close()
        visible_on_node_1(self.cluster, declare.queue, self.target.timeout_scale)
        self.on_node[logical] = kind

    def node_stop_matters(self) -> bool:
        if any(self.model.consumer_queue(ch, tag) == REMOTE for ch, tag in self.consumers()):
            return True
        held = [u.queue for channel in self.model.state.channels.values() for u in channel.unacked.values()]
        return any(q == REMOTE or self.on_node.get(q or "") == "quorum" for q in held)

    @rule()
    @step
    def stop_and_start_node_2(self) -> None:
        """Node 2 stops and starts again: `remote` loses its consumers (CLU-01, basic.cancel where
        consumer_cancel_notify is on) and its transient messages and comes back (CLU-02); the
        quorum queues fail over with everything kept (CLU-05)."""
        if self.cluster is None or self.stops >= MAX_STOPS or not self.node_stop_matters():
            return
        self.stops += 1
        self.nodes.stop(self.cluster, NODE)
        self.cluster.start(NODE)
        self.model.node_stopped_and_started([q for q, k in self.on_node.items() if k == "classic"],
                                            [q for q, k in self.on_node.items() if k == "quorum"])

    def cleanup(self) -> None:
        if self.cluster is not None:
            self.cluster.restore()
        super().cleanup()
