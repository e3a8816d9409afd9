"""The stream queue's fault `streams_time_out` (TMO-4.3-1: a 4.3 broker timing out stream consumers
as it does quorum ones), through the shipped suite: the stream check fails as its rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.results.parts import read_table
from conformance.suite import SUITE_DIR
from reference_broker.server import EmbeddedBroker

FAULT = "streams_time_out"
NODE = "timeout/test_timeout_quorum.py::test_classic_queues_and_streams_never_time_out[stream]"


@pytest.mark.timeout(300)
def test_through_the_suite_streams_timing_out_fail_tmo_4_3_1(tmp_path: Path) -> None:
    """The stream check alone, through the pytest plugin, against an embedded broker with the fault
    and its management API (the test sets a consumer-timeout policy). Without the fault the check
    passes in every gate run of the reference broker (`make test-gates`)."""
    with EmbeddedBroker(faults=[FAULT], management_port=0) as broker:
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                              "-o", "addopts=", "--broker-url", broker.url, "--broker-admin", str(broker.management_url),
                              "--results-dir", str(tmp_path), "--run-id", "streams", f"{SUITE_DIR}/{NODE}"],
                             capture_output=True, text=True, timeout=240, check=False)
    assert run.returncode == 1, run.stdout[-3000:]
    (row,) = read_table(tmp_path, "tests", "streams").to_pylist()
    assert (row["verdict"], list(row["failed_rules"])) == ("failed", ["TMO-4.3-1"]), row["message"]
    assert "unexpected basic.cancel" in row["message"], row["message"]
