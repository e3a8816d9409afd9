"""The machines with a cluster: given `reference_broker --nodes 3`, the ack,
requeue, prefetch and timeout machines also stop and start node 2 as a step. Each passes on the
clean cluster and, against the fault its node stop can reveal, fails naming that CLU rule with a
minimal example that contains the stop (node stops are in the examples, and they shrink).

Marked `broker_cluster` (`make test-cluster-brokers`); each run is bounded by the machine budget
(`AMQPC_MACHINE_BUDGET`, shrinking included) and by the test's timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.results.parts import read_table
from conformance.suite import SUITE_DIR
from tests.conformance.test_cluster_brokers import run_on_an_embedded_cluster

BUDGET = {"AMQPC_MACHINE_BUDGET": "30"}  # s per machine test, shrinking included
STOP = "stop_and_start_node_2()"
# machine test -> (the fault its node stop reveals, the rule it must name, the CLU rules it claims)
MACHINES = {
    "ack/test_machine_ack.py": ("cluster_no_cancel_on_node_down", "CLU-01", ["CLU-01", "CLU-02"]),
    "qos/test_machine_prefetch.py": ("cluster_no_cancel_on_node_down", "CLU-01", ["CLU-01", "CLU-02"]),
    "requeue/test_machine_requeue.py": ("cluster_failover_drops_unacked", "CLU-05", ["CLU-01", "CLU-02", "CLU-05"]),
    "timeout/test_machine_timeout.py": ("cluster_failover_drops_unacked", "CLU-05", ["CLU-05"]),
}


def one_row(tmp_path: Path) -> dict[str, object]:
    (row,) = read_table(tmp_path, "tests", "fault").to_pylist()
    return row  # type: ignore[no-any-return]


@pytest.mark.broker_cluster
@pytest.mark.timeout(300)
@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_a_machine_with_a_cluster_passes_and_claims_the_cluster_rules(tmp_path: Path, machine: str) -> None:
    done, _ = run_on_an_embedded_cluster(tmp_path, [], machine, BUDGET)
    row = one_row(tmp_path)
    assert row["verdict"] == "passed", done.stdout[-3000:]
    assert [r for r in row["rule_ids"] if r.startswith("CLU-")] == MACHINES[machine][2]  # type: ignore[union-attr]
    assert row["stopped_nodes"] == [2], row["stopped_nodes"]  # its examples stopped node 2


@pytest.mark.broker_cluster
@pytest.mark.timeout(300)
@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_a_machine_with_a_cluster_fails_as_the_cluster_rule_with_the_stop_in_its_example(
        tmp_path: Path, machine: str) -> None:
    fault, rule, _ = MACHINES[machine]
    done, _ = run_on_an_embedded_cluster(tmp_path, [fault], machine, BUDGET)
    row = one_row(tmp_path)
    assert (row["verdict"], list(row["failed_rules"])) == ("failed", [rule]), \
        f"{row['message']}\n{done.stdout[-3000:]}"  # type: ignore[arg-type]
    example = str(row["minimal_example"])
    program = example[:example.index("frames of this run")] if "frames of this run" in example else example
    assert STOP in program, example[:3000]


def test_without_a_cluster_a_machine_claims_no_cluster_rule(tmp_path: Path) -> None:
    """A plain run (one broker) runs the machine as before and lists no CLU rule as tested."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                           "-o", "addopts=", "--results-dir", str(tmp_path), "--run-id", "plain",
                           f"{SUITE_DIR}/ack/test_machine_ack.py"], capture_output=True, text=True, timeout=240,
                          check=False, env={**os.environ, "AMQPC_MACHINE_EXAMPLES": "3", **BUDGET})
    (row,) = read_table(tmp_path, "tests", "plain").to_pylist()
    assert row["verdict"] == "passed", done.stdout[-3000:]
    assert not [r for r in row["rule_ids"] if r.startswith("CLU-")] and not row["stopped_nodes"], row


@pytest.mark.broker_cluster
@pytest.mark.timeout(300)
@pytest.mark.parametrize("machine", ["requeue/test_machine_requeue.py", "cancel/test_machine_cancel.py"])
def test_a_machine_passes_on_a_cluster_whose_node_1_learns_of_queues_late(tmp_path: Path, machine: str) -> None:
    """The slow path behind `visible_on_node_1` (conformance/suite/steps/machine_cluster.py): node 1
    of the reference cluster knows a queue node 2 declared only 0.25 s later (`metadata_lag`, what
    Khepri's projections do on a loaded RabbitMQ node: 404 and unroutable there until then). The
    requeue machine (its quorum queues and `remote` on node 2) and the cancel machine (its q3 on
    node 2), which use those queues through node 1, pass. (Each example declares its queues again,
    so every example waits out the lag: 0.25 s keeps the two runs about 50 and 100 s here.)"""
    done, _ = run_on_an_embedded_cluster(tmp_path, [], machine, BUDGET, metadata_lag=250)
    row = one_row(tmp_path)
    assert row["verdict"] == "passed", f"{row['message']}\n{done.stdout[-3000:]}"
