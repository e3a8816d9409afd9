"""The report shows a cluster run's nodes and the nodes a failing test stopped.

One lake holds two runs: a cluster run written by the plugin's own writer (`cluster_nodes` on the
run, `stopped_nodes` on its failed test) and a run of an older lake, written before those columns
existed (its Parquet files lack them). The report builds; the cluster target's row names its
nodes (without the password), the failing test's page the node it stopped; the older run shows
neither.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from conformance.results.parts import ResultsWriter, write_atomically
from conformance.results.records import PARTITION_KEY, SCHEMAS, RunRecord, TestRecord
from reports.model import page_for_test

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 23, 12, tzinfo=UTC)
CLUSTER_RUN, OLD_RUN = "cluster-run", "older-run"
NODES = ["amqp://guest@127.0.0.1:5672/", "amqp://guest@127.0.0.1:5673/", "amqp://guest@127.0.0.1:5674/"]
STOPPING = "conformance/suite/cluster/test_classic.py::test_consumers_of_a_stopped_node_are_cancelled"
OLD_TEST = "conformance/suite/ack/test_ack.py::test_double_ack_is_an_unknown_tag[plain]"


def _run(run_id: str, product: str, **values: Any) -> RunRecord:
    return RunRecord(run_id, "amqp://guest@127.0.0.1:5672/", "raw", "0.1.0", 1.0, T0, product=product, version="4.3",
                     profile="rabbitmq-4.3", finished=T0 + timedelta(minutes=1), exit_status=1, tests=1, **values)


def _test(run_id: str, test_id: str, rule: str, area: str, **values: Any) -> TestRecord:
    return TestRecord(run_id, test_id, [rule], area, "failed", "failed", "call", T0, 0.5, 0.5,
                      message=f"{rule} broken", failed_rules=[rule], **values)


def _write_old(root: Path, table: str, name: str, record: Any, dropped: str) -> None:
    """A record as a lake written before the column `dropped` existed stores it."""
    schema = SCHEMAS[table].remove(SCHEMAS[table].get_field_index(dropped))
    row = {key: value for key, value in asdict(record).items() if key != dropped}
    write_atomically(pa.Table.from_pylist([row], schema=schema), root / table / f"{PARTITION_KEY}={OLD_RUN}" / name)


def write_lake(root: Path) -> None:
    writer = ResultsWriter(root, CLUSTER_RUN)
    writer.write_run(_run(CLUSTER_RUN, "RabbitMQ", cluster_nodes=NODES))
    writer.add_test(_test(CLUSTER_RUN, STOPPING, "CLU-01", "cluster", stopped_nodes=[2]))
    writer.close()
    _write_old(root, "runs", "run.parquet", _run(OLD_RUN, "garagemq"), "cluster_nodes")
    _write_old(root, "tests", "part-00000-old.parquet", _test(OLD_RUN, OLD_TEST, "ACK-04", "ack"), "stopped_nodes")


@pytest.fixture(scope="module")
def built(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    from reports.build import build_report

    root = tmp_path_factory.mktemp("lake")
    write_lake(root)
    out = tmp_path_factory.mktemp("site")
    return out, build_report(spark, root, out)


def test_the_overview_names_the_cluster_nodes(built: tuple[Path, Any]) -> None:
    out, data = built
    nodes = {t.run_id: t.cluster_nodes for t in data.targets}
    assert nodes == {CLUSTER_RUN: NODES, OLD_RUN: []}
    html = (out / "index.html").read_text()
    assert html.count('class="sub cluster-nodes"') == 1
    line = html.split('class="sub cluster-nodes">', 1)[1].split("</div>", 1)[0]
    assert line.startswith("cluster of 3 nodes: ") and all(f"{i} {url}" in line for i, url in enumerate(NODES, 1))


def test_a_failing_test_page_names_the_node_it_stopped(built: tuple[Path, Any]) -> None:
    out, data = built
    assert {t.test_id: t.stopped_nodes for t in data.failing} == {STOPPING: [2], OLD_TEST: None}
    stopping = (out / "tests" / f"{page_for_test(CLUSTER_RUN, STOPPING)}.html").read_text()
    assert "stopped cluster node 2 (1 = the broker URL" in stopping
    older = (out / "tests" / f"{page_for_test(OLD_RUN, OLD_TEST)}.html").read_text()
    assert "stopped-nodes" not in older
