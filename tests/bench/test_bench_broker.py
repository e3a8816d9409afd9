"""`bench/broker.py --quick` runs to completion and ends with its JSON line of ratios.

The reference broker is started by the benchmark itself; without RabbitMQ at
127.0.0.1:5672 the ratios are null and the output says why. Timings are never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "broker.py"
KEYS = {"publish_x_rabbitmq", "consume_x_rabbitmq"}


def test_quick_run_ends_with_ratio_json() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    ratios = json.loads(lines[-1])
    assert set(ratios) == KEYS
    rabbit_absent = any(line.startswith("RabbitMQ unreachable") for line in lines)
    for key, value in ratios.items():  # only the shape: timings are never asserted
        if value is None:
            assert rabbit_absent, (key, done.stdout)
        else:
            assert isinstance(value, float) and value > 0, (key, value)


def test_quick_durable_run_ends_with_durable_ratio_json() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--durable", "--messages", "500"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ratios = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(ratios) == {f"durable_{key}" for key in KEYS}
