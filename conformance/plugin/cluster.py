"""The `cluster` fixture and its options: a test's view of the broker's cluster.

Rules:
- The options are `--cluster-node` and `--node-control` (`conformance.run.nodes` says what
  they mean and validates them).
- The `cluster` fixture hands a test its `Cluster`; without a cluster the test is `needs-cluster`
  (not run, out of the score). Every node the test stopped is started again at teardown, each
  start bounded; a node that does not come back makes the test `broken` with its index and the
  command's output, and the run goes on.
- A node command that fails (non-zero exit, or no return within `CONTROL_SECONDS` times the timeout
  scale) is a `HarnessError`: the test is `broken`, never `failed`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from conformance.drivers.raw import DriverError, RawClient, Recorder
from conformance.plugin.session import Names, Target, harness
from conformance.plugin.verdicts import needs_cluster
from conformance.results.verdicts import HarnessError
from conformance.run.nodes import ClusterSpec, run_node_control, wait_until_answering

CONTROL_SECONDS = 120.0  # one stop or start (RabbitMQ 4.3.6 via rabbitmqctl: 5-8 s measured)
ANSWER_SECONDS = 30.0  # after a start: until the node accepts an AMQP connection
STOPPED_NODES = pytest.StashKey[list[int]]()  # on the test item: the nodes its `Cluster` stopped, in order


@dataclass
class Cluster:
    """A test's view of the cluster: node URLs, connections to a node, stop and start."""

    spec: ClusterSpec
    scale: float
    recorder: Recorder
    stopped: list[int] = field(default_factory=list)  # down now, stopped by this test
    history: list[int] = field(default_factory=list)  # every node the test stopped, in order
    clients: list[RawClient] = field(default_factory=list)

    @property
    def urls(self) -> tuple[str, ...]:
        return self.spec.urls

    def require(self, nodes: int) -> None:
        if len(self.urls) < nodes:
            needs_cluster(f"the test needs {nodes} nodes; the run names {len(self.urls)} "
                          "(--broker-url and --cluster-node)")

    def url(self, index: int) -> str:
        return self.urls[index - 1]

    def connect(self, index: int, **kwargs: Any) -> RawClient:
        """A connected `RawClient` to node `index`, recorded with the test's frames, closed at teardown."""
        kwargs.setdefault("timeout", 5.0 * self.scale)
        client = RawClient(self.url(index), recorder=self.recorder, **kwargs)
        self.clients.append(client)
        return client.connect()

    def stop(self, index: int) -> None:
        self.stopped.append(index)
        self.history.append(index)
        self._control(index, "stop")

    def kill(self, index: int) -> None:
        """The node dies at once (SIGKILL, `docker kill`): its connections are lost without a close,
        so to the other nodes its processes are unreachable, not gone (Erlang's `noconnection`)."""
        self.stopped.append(index)
        self.history.append(index)
        self._control(index, "kill")

    def start(self, index: int) -> None:
        self._control(index, "start")
        with contextlib.suppress(ValueError):
            self.stopped.remove(index)

    def _control(self, index: int, action: str) -> None:
        failure = run_node_control(self.spec, index, action, CONTROL_SECONDS * self.scale)
        if failure is None and action == "start":
            failure = wait_until_answering(self.url(index), ANSWER_SECONDS * self.scale)
        if failure is not None:
            raise HarnessError(f"node control: {action} node {index}: {failure}")

    def restore(self) -> list[str]:
        """Close the test's connections and start every node it stopped; what did not come back."""
        for client in self.clients:
            with contextlib.suppress(OSError, DriverError):
                client.close()
        problems = []
        for index in dict.fromkeys(reversed(self.stopped)):
            try:
                self.start(index)
            except HarnessError as exc:
                problems.append(str(exc))
        return problems


@pytest.fixture
def cluster(target: Target, names: Names, recorder: Recorder, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """The broker's cluster for one test (needs-cluster without one); every node the test stopped
    is started again at teardown (before `names` deletes the test's queues)."""
    spec = harness(request.config).cluster
    if spec is None:
        needs_cluster("needs the broker's other nodes and a node control: --cluster-node URL (repeat) and "
                      "--node-control 'COMMAND {index} {action}'")
    made = Cluster(spec, target.timeout_scale, recorder)
    request.node.stash[STOPPED_NODES] = made.history  # the test's record names them (`stopped_nodes`)
    yield made
    problems = made.restore()
    if problems:
        raise HarnessError("; ".join(problems) + " (the node stays down: later cluster tests may be broken)")
