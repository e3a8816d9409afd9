"""Brokers judged as clusters: `--cluster-node` and `--node-control`, the `needs-cluster`
verdict, the cluster area on `reference_broker --nodes 3`, against each of its cluster faults, the
cancel machine's node stops there (with and without the fault it kills), and
on the live 3-node RabbitMQ 4.3.6 cluster of `scripts/rabbitmq4.sh cluster up 4.3 3`.

The option checks and a plain run (needs-cluster) are quick and in `make test`; the runs that stop
nodes are marked `broker_cluster` (the reference broker, its faults) and `rabbitmq43cluster` (the
live cluster: skipped when it does not answer, a failure under AMQPC_STRICT=1), both in
`make test-cluster-brokers`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.drivers.raw import DriverError, RawClient
from conformance.results.parts import read_table
from conformance.results.records import redact_url
from conformance.run.nodes import ClusterSpec, embedded_cluster, parse_cluster
from conformance.suite import SUITE_DIR
from reference_broker.faults import FAULTS
from reference_broker.server import EmbeddedBroker
from tests.conftest import cli_env, require

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`

ROOT = Path(__file__).resolve().parents[2]
LIVE = [os.environ.get(f"AMQPC_RMQ43_C{i}_URL", f"amqp://guest:guest@127.0.0.1:{5750 + i}/") for i in (1, 2, 3)]
LIVE_CONTROL = "scripts/rabbitmq4.sh node 4.3 {index} {action}"
CLUSTER_TESTS = 9
# on RabbitMQ 4.x and the reference broker (rabbitmq-4.3): CCN-06's mirrored failover is not-applicable
# (classic mirroring was removed in 4.0); every other cluster test passes
ON_4X = sorted(["passed"] * (CLUSTER_TESTS - 1) + ["not-applicable"])
# the cluster area and the two rules judged on a cluster from other areas' files (cluster/*.py)
SELECT = ("--select", "cluster", "TMO-4.3-6", "CCN-06")
# the test of each cluster fault's rule (conformance/suite/cluster)
FAULT_TESTS = {
    "cluster_no_cancel_on_node_down": "test_cluster.py::test_consumers_of_a_stopped_nodes_classic_queue_are_cancelled",
    "cluster_ack_for_stopped_queue": "test_cluster.py::test_a_stopped_nodes_classic_queue_nacks_publishes_and_answers_404",
    "cluster_failover_drops_unacked":
        "test_cluster_quorum.py::test_a_quorum_leaders_failure_keeps_consumers_and_unacked_deliveries",
    "cluster_delivers_without_majority":
        "test_cluster_quorum.py::test_a_quorum_queue_without_a_majority_neither_delivers_nor_confirms",
    "cluster_confirms_without_majority":
        "test_cluster_quorum.py::test_a_quorum_queue_without_a_majority_neither_delivers_nor_confirms",
    "cluster_restart_drops_bindings":
        "test_cluster_restart.py::test_a_restarted_nodes_durable_queue_keeps_its_bindings_and_persistent_messages",
    "disconnected_returned_at_once":
        "test_cluster_disconnected.py::test_an_unreachable_consumers_message_waits_for_the_disconnected_timeout"
        "[argument-3s]",
    "disconnected_argument_ignored":
        "test_cluster_disconnected.py::test_an_unreachable_consumers_message_waits_for_the_disconnected_timeout"
        "[argument-3s]",
}


def run(tmp: Path, *args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--out", str(tmp / "out"), *args],
                          cwd=cwd or tmp, capture_output=True, text=True, timeout=timeout, env=cli_env())


def verdicts(tmp: Path) -> list[str]:
    """The sorted verdicts of the tests under conformance/suite/cluster (a selection by rule also
    takes single-broker tests of TMO-4.3-6 and CCN-06 from their own areas)."""
    rows = read_table(tmp / "out" / "results", "tests").to_pylist()
    return sorted(row["verdict"] for row in rows if "cluster/test_cluster" in row["test_id"])


# -- options (make test) ----------------------------------------------------------------------
@pytest.mark.parametrize(("args", "says"), [
    (["--broker-url", "amqp://h/", "--cluster-node", "amqp://h2/", "--node-control", "ctl {index}"], "{action}"),
    (["--broker-url", "amqp://h/", "--cluster-node", "http://h2:15672", "--node-control", "ctl {action}"], "amqp://"),
    (["--broker-url", "amqp://h/", "--cluster-node", "amqp://h2/"], "go together"),
    (["--cluster-node", "amqp://h2/", "--node-control", "ctl {action}"], "needs --broker-url"),
    (["--broker-url", "amqp://h/", "--cluster-node", "embedded"], "without --broker-url"),
])
def test_bad_cluster_options_are_one_line_and_exit_4(tmp_path: Path, args: list[str], says: str) -> None:
    done = run(tmp_path, *args, "--select", "cluster")
    assert done.returncode == 4, done.stderr
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_node_control_template_fills_each_word() -> None:
    spec = parse_cluster("amqp://a/", ["amqp://b/"], "docker {action} 'rmq-{index}' --format '{{.Name}}' {url}")
    assert isinstance(spec, ClusterSpec)
    assert spec.command(2, "stop") == ["docker", "stop", "rmq-2", "--format", "{{.Name}}", "amqp://b/"]


def test_a_plain_run_shows_the_cluster_tests_as_needs_cluster(tmp_path: Path) -> None:
    done = run(tmp_path, *SELECT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert verdicts(tmp_path) == ["needs-cluster"] * CLUSTER_TESTS
    assert "need a cluster; rerun with --cluster-node" in done.stdout, done.stdout


# -- the reference broker as a cluster, its faults (make test-cluster-brokers) --------------------
@pytest.mark.broker_cluster
@pytest.mark.timeout(450)
def test_the_reference_broker_as_a_cluster_passes(tmp_path: Path) -> None:
    done = run(tmp_path, "--cluster-node", "embedded", *SELECT, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert verdicts(tmp_path) == ON_4X
    (record,) = read_table(tmp_path / "out" / "results", "runs").to_pylist()
    nodes = record["cluster_nodes"]  # the report's target row names them (without the password)
    assert len(nodes) == 3 and all(n.startswith("amqp://guest@127.0.0.1:") for n in nodes), nodes
    stopped = [row["stopped_nodes"] for row in read_table(tmp_path / "out" / "results", "tests").to_pylist()
               if row["verdict"] == "passed" and "cluster/test_cluster" in row["test_id"]]
    assert all(s and set(s) <= {1, 2, 3} for s in stopped), stopped  # every cluster test judged stops a node


@pytest.mark.broker_cluster
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", sorted(FAULT_TESTS))
def test_each_cluster_fault_fails_as_its_rule(tmp_path: Path, fault: str) -> None:
    (rule,) = [f.rule for f in FAULTS if f.name == fault]
    done, urls = run_on_an_embedded_cluster(tmp_path, [fault], f"cluster/{FAULT_TESTS[fault]}")
    assert done.returncode == 1, done.stdout[-3000:]
    (row,) = read_table(tmp_path, "tests", "fault").to_pylist()
    assert (row["verdict"], list(row["failed_rules"])) == ("failed", [rule]), row["message"]
    assert row["stopped_nodes"], row  # the failing test's page names the node it stopped
    assert read_table(tmp_path, "runs", "fault").to_pylist()[0]["cluster_nodes"] == [redact_url(u) for u in urls]


@pytest.mark.broker_cluster
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("faults", "verdict"), [([], "passed"), (["cluster_no_cancel_on_node_down"], "failed")])
def test_the_cancel_machine_stops_a_queues_node_with_a_cluster(tmp_path: Path, faults: list[str], verdict: str) -> None:
    """With a cluster the cancel machine also stops the node of a classic queue it consumes from:
    the consumers' basic.cancel is owed (CLU-01), so a broker that drops them silently fails."""
    done, _ = run_on_an_embedded_cluster(tmp_path, faults, "cancel/test_machine_cancel.py")
    (row,) = read_table(tmp_path, "tests", "fault").to_pylist()
    assert row["verdict"] == verdict, done.stdout[-3000:]
    if faults:
        assert list(row["failed_rules"]) == ["CLU-01"], row["message"]
        assert "stop_the_remote_queues_node()" in row["minimal_example"], row["minimal_example"]


def run_on_an_embedded_cluster(tmp_path: Path, faults: list[str], selection: str, env: dict[str, str] | None = None,
                               **config: object) -> tuple[subprocess.CompletedProcess[str], tuple[str, ...]]:
    """pytest on `selection` (under the suite) against a 3-node embedded reference broker with `faults`
    (`env`: added to the environment, e.g. a machine budget; `config`: more BrokerConfig keys)."""
    with EmbeddedBroker(faults=faults, management_port=0, nodes=3, **config) as broker:
        spec = embedded_cluster(broker)
        nodes = [arg for url in spec.urls[1:] for arg in ("--cluster-node", url)]
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                               "-o", "addopts=", "--broker-url", spec.urls[0], *nodes, "--node-control", spec.control,
                               "--results-dir", str(tmp_path), "--run-id", "fault", f"{SUITE_DIR}/{selection}"],
                              capture_output=True, text=True, timeout=240, check=False,
                              env={**os.environ, **(env or {})})
    return done, spec.urls


def test_every_cluster_fault_has_its_test() -> None:
    assert sorted(FAULT_TESTS) == sorted(f.name for f in FAULTS if f.area == "cluster" or f.needs_cluster)


# -- the live 3-node RabbitMQ 4.3.6 cluster (make test-cluster-brokers) ----------------------------
@pytest.mark.rabbitmq43cluster
@pytest.mark.timeout(600)
def test_the_live_rabbitmq_4_3_cluster_passes(tmp_path: Path) -> None:
    for url in LIVE:
        try:
            with RawClient(url, timeout=5.0):
                pass
        except (OSError, DriverError) as exc:
            require(False, f"RabbitMQ 4.3.6 cluster node {url} (scripts/rabbitmq4.sh cluster up 4.3 3): {exc}")
    nodes = [arg for url in LIVE[1:] for arg in ("--cluster-node", url)]
    done = run(tmp_path, "--broker-url", LIVE[0], *nodes, "--node-control", LIVE_CONTROL, *SELECT,
               cwd=ROOT, timeout=580)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert verdicts(tmp_path) == ON_4X
