"""bench/relay.py end to end on a small load against RabbitMQ (timings are never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "relay.py"


@pytest.mark.rabbitmq
@pytest.mark.usefixtures("rabbitmq")  # tests/record/conftest.py: skipped (or strict failure) without RabbitMQ 3.10.8
def test_relay_bench_prints_the_ratio() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--messages", "300", "--repeat", "1"], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"direct_s", "relay_s", "relay_x_direct", "frames_recorded", "relay_cpu_s"} <= set(result)
    assert result["frames_recorded"] > 2 * 300 * 3  # both runs of each path, every frame recorded
