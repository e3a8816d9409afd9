"""`amqp-conformance run` against the live RabbitMQ 3.10.8 with its shipped baseline.

The gate passes with `baselines/rabbitmq-3.10.8.toml` (the whole suite, four workers) and
fails without it (the cancel area, where S002-01's 541 crash lives, is enough to show it).
Marked `rabbitmq`; skipped when RabbitMQ does not answer, a failure under AMQPC_STRICT=1. The
whole-suite run is also marked `gate` (`make test-gates`, run by .ci/run after `make test`).
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.drivers.raw import DriverError, RawClient
from tests.conftest import require

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
BASELINE = Path(__file__).resolve().parents[2] / "baselines" / "rabbitmq-3.10.8.toml"


@pytest.fixture
def rabbitmq() -> str:
    try:
        with RawClient(RABBITMQ_URL, timeout=5.0) as client:
            version = str(client.server_properties.get("version"))
    except (OSError, DriverError) as exc:
        require(False, f"RabbitMQ at {RABBITMQ_URL} ({exc})")
    require(version == "3.10.8", f"RabbitMQ 3.10.8 at {RABBITMQ_URL} (found {version})")
    return RABBITMQ_URL


def run(tmp_path: Path, *args: str) -> tuple[int, str, ET.Element | None]:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--broker-url", RABBITMQ_URL,
                           "--out", str(out), *args], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    junit = ET.parse(out / "junit.xml").getroot() if (out / "junit.xml").exists() else None
    return done.returncode, done.stdout + done.stderr, junit


def verdict(junit: ET.Element | None, name: str) -> str | None:
    for case in junit.iter("testcase") if junit is not None else ():
        if case.get("name") == name:
            return case.find("properties/property[@name='verdict']").get("value")  # type: ignore[union-attr]
    return None


@pytest.mark.rabbitmq
@pytest.mark.gate  # the whole suite: `make test-gates`
@pytest.mark.timeout(900)
def test_rabbitmq_3_10_8_passes_the_gate_with_its_baseline(rabbitmq: str, tmp_path: Path) -> None:
    status, output, junit = run(tmp_path, "--baseline", str(BASELINE), "--jobs", "4")
    assert status == 0, output
    assert verdict(junit, "S002-01 [raw]") == "expected"
    assert "exit status 0: no unexpected result" in output and "profile rabbitmq-3.10" in output
    # no --broker-admin: the admin checks are not run, said so, and suggested
    assert verdict(junit, "TMO-01 [raw]") == "needs-admin"
    assert "need --broker-admin; rerun with --broker-admin http" in output


@pytest.mark.rabbitmq
@pytest.mark.gate  # the whole suite end to end: `make test-gates` (kept out of make test's 5 minutes)
@pytest.mark.timeout(300)
def test_rabbitmq_3_10_8_fails_the_gate_without_a_baseline(rabbitmq: str, tmp_path: Path) -> None:
    status, output, junit = run(tmp_path, "--select", "cancel")
    assert status == 1, output
    assert verdict(junit, "S002-01 [raw]") == "failed"
    assert "failed: S002-01 test_cancel.py::test_cancel_pipelined_behind_consume_is_answered" in output
    assert "541" in output and "xfail" not in output  # a bug fails as itself, not as an "expected" xfail
