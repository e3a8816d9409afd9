"""`bench/pipeline.py --quick` runs to completion and ends with its JSON line (keys only; timings
are never asserted). It starts its own Spark JVM, hence the `spark` marker."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "pipeline.py"
KEYS = {"frames", "runs", "channels", "tests", "single_audit_s", "spark_local2_audit_s", "spark_local1_audit_s",
        "audit_spark_x_single", "scaling_local2_x_local1", "single_rows_per_s", "spark_local2_rows_per_s",
        "spark_local1_rows_per_s", "matrix_local2_s", "matrix_local1_s"}


@pytest.mark.spark
def test_quick_run_ends_with_json_line() -> None:
    require(shutil.which("java"), "Java (>= 17) for Spark")
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result) >= KEYS
    for key, value in result.items():
        assert isinstance(value, int | float) and value > 0, (key, value)
