"""bench/pipeline.py: the JSON line's shape in-process (no JVM), and `--quick` end to end.

The `--quick` run starts Spark JVMs three times (a one-run report, local[2], local[1]), which costs 30-90 s
depending on the machine, so it is `slow` (run it with `-m slow`). Timings are never asserted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import require

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "pipeline.py"
KEYS = {"frames", "runs", "channels", "tests", "single_audit_s", "spark_local2_audit_s", "spark_local1_audit_s",
        "audit_spark_x_single", "scaling_local2_x_local1", "single_rows_per_s", "spark_local2_rows_per_s",
        "spark_local1_rows_per_s", "matrix_local2_s", "matrix_local1_s"}


def test_summary_has_the_ratios() -> None:
    from bench.pipeline import parse_args, shape_of, summary
    from reports.synthetic import LakeStats

    stats = LakeStats(runs=100, tests=1_000_000, channels=50_000, frames=10_000_000, expected=Counter())
    spark = {"local[2]": {"audit_s": 4.0, "matrix_s": 5.0}, "local[1]": {"audit_s": 8.0, "matrix_s": 6.0}}
    result = summary(stats, {"single_audit_s": 6.0}, spark)
    assert set(result) == KEYS
    assert result["audit_spark_x_single"] == 1.5 and result["scaling_local2_x_local1"] == 2.0
    shape = shape_of(parse_args([]))
    assert shape.runs * shape.channels_per_run == 50_000 and shape.runs * shape.tests_per_run == 1_000_000


def test_summary_has_linearity_and_the_one_run_report() -> None:
    from bench.pipeline import large_shape_of, parse_args, shape_of, summary
    from reports.synthetic import LakeStats

    small = LakeStats(runs=100, tests=1_000_000, channels=50_000, frames=10_000_000, expected=Counter())
    large = LakeStats(runs=100, tests=5_000_000, channels=500_000, frames=100_000_000, expected=Counter())
    spark = {"local[2]": {"audit_s": 4.0, "matrix_s": 5.0, "audit_large_s": 44.0},
             "local[1]": {"audit_s": 8.0, "matrix_s": 6.0}}
    single = {"single_audit_s": 6.0, "model_audit_cpu_s": 5.0, "legacy_audit_cpu_s": 4.5}
    result = summary(small, single, spark, large, [14.0, 12.5, 13.0])
    assert set(result) == KEYS | {"frames_large", "spark_local2_audit_large_s", "linearity_large_x_small",
                                  "one_run_report_s", "model_audit_cpu_s", "legacy_audit_cpu_s",
                                  "model_x_legacy_audit_per_core"}
    assert result["linearity_large_x_small"] == 1.1 and result["one_run_report_s"] == 12.5
    assert result["model_x_legacy_audit_per_core"] == 0.9
    args = parse_args([])
    bigger = large_shape_of(args, shape_of(args))
    assert bigger is not None and bigger.channels_per_run == 10 * shape_of(args).channels_per_run
    assert large_shape_of(parse_args(["--scale-to", "0"]), shape_of(args)) is None


@pytest.mark.slow
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


def test_the_legacy_audit_still_loads_from_git() -> None:
    """The benchmark's peer is read from an old commit; a module the redesign moved since must be
    mapped (`legacy_audit.MOVED`), or bench/pipeline.py fails before it measures anything."""
    from bench import legacy_audit

    assert callable(legacy_audit.load().audit_lake)
