"""bench.cpu_split: a command's wall time and CPU-seconds, its exit status passed on."""

from __future__ import annotations

import json
import sys

import pytest

from bench import cpu_split


def test_a_command_is_run_and_its_cpu_seconds_and_exit_status_reported(capsys: pytest.CaptureFixture[str]) -> None:
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\nraise SystemExit(3)"
    assert cpu_split.main(["--", sys.executable, "-c", burn]) == 3
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(figures) == {"wall_s", "busy_cpu_s", "idle_cpu_s", "beam_cpu_s"}
    assert figures["busy_cpu_s"] >= 0.2  # the command's own 0.3 CPU-s are counted as busy
    assert figures["wall_s"] >= 0.3 and figures["beam_cpu_s"] >= 0


def test_no_command_is_a_usage_error() -> None:
    assert cpu_split.main([]) == 4
    assert cpu_split.main(["--"]) == 4
