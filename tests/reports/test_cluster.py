"""The report and its trace audit on real Spark clusters give the same site as local[*].

One standalone cluster (a master and two one-core workers) and one Spark Connect server per
test session, both started from pyspark's own distribution on 127.0.0.1 (`tests.reports.cluster`).
The report runs as the CLI does (`python -m reports.cli ... --spark-master spark://...`, or with
`SPARK_REMOTE=sc://...`), in a subprocess since a process holds one Spark driver; its site must
equal, file for file and row for row, the one the `site` fixture built on local[2] from the same
lake (the generated timestamp aside). Without Java the tests skip, except under AMQPC_STRICT=1;
a cluster that does not start is an error, never a skip.
"""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from tests.conformance import deviations
from tests.conftest import require
from tests.record import edge_programs
from tests.record.conftest import rabbitmq  # noqa: F401 (a fixture)
from tests.record.test_audit_edges import findings, record
from tests.reports.cluster import Standalone, connect_server, daemon_env, standalone_cluster
from tests.reports.conftest import Lake, Site

REPORT_TIMEOUT = 600  # seconds: a cold driver and executors on a loaded 2-core machine
# its own pytest-xdist group: the cluster's daemons start while the other Spark tests run (this
# worker builds its own local site to compare with)
pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.xdist_group("spark-cluster"), pytest.mark.timeout(3 * REPORT_TIMEOUT)]


@dataclass
class Clusters:
    standalone: Standalone
    connect: str  # sc://127.0.0.1:PORT
    workdir: Path


@pytest.fixture(scope="session")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    """Both clusters, started at once (their JVMs start in parallel), stopped at the session's end."""
    require(shutil.which("java"), "Java (>= 17) for the Spark daemons")
    workdir = tmp_path_factory.mktemp("spark-cluster")
    with ExitStack() as stack, ThreadPoolExecutor(max_workers=1) as pool:
        connect = pool.submit(stack.enter_context, connect_server(workdir / "connect"))
        try:
            standalone = stack.enter_context(standalone_cluster(workdir / "standalone"))
        finally:
            url = connect.result()  # entered (and so stopped by the stack) even when the other failed
        yield Clusters(standalone, url, workdir)


def run_report(results: Path, out: Path, workdir: Path, *, master: str | None = None,
               remote: str | None = None) -> str:
    env = daemon_env(workdir)
    command = [sys.executable, "-m", "reports.cli", str(results), "--out", str(out)]
    if master:
        command += ["--spark-master", master]
    if remote:
        env["SPARK_REMOTE"] = remote
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=REPORT_TIMEOUT, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return done.stdout


def site_files(root: Path) -> dict[str, str]:
    """Every generated file of a site, its text with the generation time masked."""
    generated = json.loads((root / "summary.json").read_text())["generated"]
    masks = (generated, datetime.fromisoformat(generated).strftime("%Y-%m-%d %H:%M UTC"))
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            for mask in masks:
                text = text.replace(mask, "<generated>")
            files[str(path.relative_to(root))] = text
    return files


def assert_same_site(expected: Path, actual: Path) -> None:
    want, got = site_files(expected), site_files(actual)
    assert sorted(got) == sorted(want)
    for name, text in want.items():
        if got[name] != text:
            diff = difflib.unified_diff(text.splitlines(), got[name].splitlines(), "local[2]", "cluster", lineterm="",
                                        n=1)
            pytest.fail(f"{name} differs from the local[2] report:\n" + "\n".join(list(diff)[:60]))


def test_standalone_cluster_report_equals_local(site: Site, lake: Lake, clusters: Clusters, tmp_path: Path) -> None:
    cluster = clusters.standalone
    output = run_report(lake.root, tmp_path / "site", clusters.workdir, master=cluster.url)
    assert f"on {cluster.url})" in output
    assert "amqp-conformance report" in cluster.completed_apps()  # it ran on this cluster's executors
    assert_same_site(site.root, tmp_path / "site")
    assert len(site.data.violations) == sum(lake.stats.expected.values())  # the audit's findings are in it


def test_spark_connect_report_equals_local(site: Site, lake: Lake, clusters: Clusters, tmp_path: Path) -> None:
    output = run_report(lake.root, tmp_path / "site", clusters.workdir, remote=clusters.connect)
    assert f"on Spark Connect {clusters.connect})" in output
    assert_same_site(site.root, tmp_path / "site")


@pytest.mark.rabbitmq
@pytest.mark.usefixtures("rabbitmq")
def test_recorded_traffic_audited_on_the_cluster(clusters: Clusters, tmp_path: Path) -> None:
    """End to end: recorded RabbitMQ 3.10.8 traffic, some through deviations, audited by
    the standalone cluster's executors: the audit page holds what the in-process audit finds."""
    lake = tmp_path / "lake"
    record(lake, edge_programs.requeue_order, deviations.RequeueToTail)
    record(lake, edge_programs.global_prefetch, deviations.PrefetchPlusOne)
    record(lake, edge_programs.nowait_program)
    record(lake, edge_programs.unknown_method)
    expected = findings(lake)
    assert {("requeue-order", "RQ-01"), ("global-prefetch-exceeded", "QOS-03"), ("unjudged-gap", "-")} <= set(expected)
    output = run_report(lake, tmp_path / "site", clusters.workdir, master=clusters.standalone.url)
    assert f"on {clusters.standalone.url})" in output
    summary = json.loads((tmp_path / "site" / "summary.json").read_text())["violations"]
    unjudged = sum(n for (kind, _), n in expected.items() if kind.startswith("unjudged"))
    assert summary["unjudged"] == unjudged and summary["errors"] + summary["warnings"] == expected.total() - unjudged
    page = (tmp_path / "site" / "audit.html").read_text()
    for kind, _ in expected:
        assert f"<td>{kind}</td>" in page
