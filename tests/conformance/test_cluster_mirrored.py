"""CCN-06.a/b on a live cluster of RabbitMQ 3.10.8 nodes (classic mirrored queues):
`scripts/rabbitmq4.sh cluster up 3.10 2` (AMQP 5771-5772, management 15771-15772), then
`make test-cluster-brokers` (marker `rabbitmq310cluster`; skipped when the cluster does not answer,
a failure under AMQPC_STRICT=1).

The suite's failover test passes there; with a `DeviantProxy` in front of node 1 (where the
consumers are) that drops the `x-cancel-on-ha-failover` argument from basic.consume, or adds it to
every consume, the broker disagrees with the rule and the test fails as CCN-06, naming the clause.
The proxies are not in the deviation matrix: it judges one broker, where this test is needs-cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codec import BasicConsume
from conformance.drivers.raw import DriverError, RawClient
from conformance.interpose.frames import Frame
from conformance.results.parts import read_table
from tests.conformance.deviant import DeviantProxy, Deviation, Io, encode
from tests.conftest import cli_env, require

ROOT = Path(__file__).resolve().parents[2]
NODES = [os.environ.get(f"AMQPC_RMQ310_C{i}_URL", f"amqp://guest:guest@127.0.0.1:{5770 + i}/") for i in (1, 2)]
ADMIN = os.environ.get("AMQPC_RMQ310_C1_ADMIN", "http://guest:guest@127.0.0.1:15771")
CONTROL = "scripts/rabbitmq4.sh node 3.10 {index} {action}"
TEST = "test_a_mirrored_queues_failover_cancels_only_the_consumers_that_asked"
FAILOVER = "x-cancel-on-ha-failover"


class FailoverArgumentDropped(Deviation):
    name, area, rules = "failover_argument_dropped", "cancel", ("CCN-06",)
    description = "basic.consume's x-cancel-on-ha-failover is ignored: every consumer is re-registered on failover"

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicConsume) and FAILOVER in m.arguments:
            io.record(self.name)
            kept = {k: v for k, v in m.arguments.items() if k != FAILOVER}
            io.to_broker(encode(frame.channel, m._replace(arguments=kept)))
            return
        io.to_broker(frame.raw)


class FailoverArgumentForced(Deviation):
    name, area, rules = "failover_argument_forced", "cancel", ("CCN-06",)
    description = "every consumer is cancelled on failover, as if it had asked with x-cancel-on-ha-failover"

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicConsume) and FAILOVER not in m.arguments:
            io.record(self.name)
            io.to_broker(encode(frame.channel, m._replace(arguments={**m.arguments, FAILOVER: True})))
            return
        io.to_broker(frame.raw)


def _cluster_answers() -> None:
    for url in NODES:
        try:
            with RawClient(url, timeout=5.0):
                pass
        except (OSError, DriverError) as exc:
            require(False, f"RabbitMQ 3.10.8 cluster node {url} (scripts/rabbitmq4.sh cluster up 3.10 2): {exc}")


def _run(tmp: Path, first: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--out", str(tmp / "out"),
                           "--broker-url", first, "--cluster-node", NODES[1], "--node-control", CONTROL,
                           "--broker-admin", ADMIN, "--baseline", "baselines/rabbitmq-3.10.8.toml",
                           "--select", "CCN-06"], cwd=ROOT, capture_output=True, text=True, timeout=400,
                          env=cli_env())
    rows = read_table(tmp / "out" / "results", "tests").to_pylist()
    (row,) = [r for r in rows if r["test_id"].endswith(TEST)]
    return done, row


@pytest.mark.rabbitmq310cluster
@pytest.mark.timeout(450)
def test_the_live_rabbitmq_3_10_cluster_passes_the_mirrored_failover(tmp_path: Path) -> None:
    _cluster_answers()
    done, row = _run(tmp_path, NODES[0])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert row["verdict"] == "passed", row["message"]
    assert list(row["stopped_nodes"]) == [2], row


@pytest.mark.rabbitmq310cluster
@pytest.mark.timeout(450)
@pytest.mark.parametrize(("deviation", "clause"), [(FailoverArgumentDropped, "CCN-06.a"),
                                                   (FailoverArgumentForced, "CCN-06.b")])
def test_a_deviating_failover_fails_as_ccn_06(tmp_path: Path, deviation: type[Deviation], clause: str) -> None:
    _cluster_answers()
    host, port = NODES[0].split("@")[1].rstrip("/").split(":")
    with DeviantProxy((host, int(port)), deviation) as proxy:
        done, row = _run(tmp_path, f"amqp://guest:guest@127.0.0.1:{proxy.port}/")
        assert proxy.wait_for(deviation.name, timeout=1.0), "the proxy never applied its deviation"
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    assert (row["verdict"], list(row["failed_rules"])) == ("failed", ["CCN-06"]), row["message"]
    assert clause in row["message"], row["message"]
