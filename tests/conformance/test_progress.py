"""The console's closing lines say where a run's time went: the wall time, the areas and the
tests that took longest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.gate.options import (
    ENV_JOBS,
    JOBS_PER_CORE,
    LIBRARY_JOBS,
    MAX_DEFAULT_JOBS,
    TESTS_PER_JOB,
    RunOptions,
    UsageError,
    default_jobs,
    jobs_for_selection,
    prepare,
    selected_tests,
)
from conformance.gate.progress import time_lines
from conformance.plugin.evidence import build
from conformance.run.config import RunConfig

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`


def test_time_lines_name_the_slowest_areas_and_tests() -> None:
    tests = [build(f"conformance/suite/test_{area}.py::test_{n}", "passed", area, ["ACK-01"], None, None, (), seconds)
             for area, n, seconds in (("ack", 1, 1.0), ("ack", 2, 2.5), ("timeout", 1, 9.0), ("qos", 1, 0.5))]
    head, slowest = time_lines(tests, 11.4)
    assert head == "time: 11 s; slowest areas: timeout 9 s, ack 4 s, qos 0 s"
    assert slowest.split(": ", 1)[1] == "test_timeout.py::test_1 9.0 s, test_ack.py::test_2 2.5 s, test_ack.py::test_1 1.0 s"
    assert time_lines([], 3.0) == []


def test_jobs_default_to_six_per_core_except_against_a_shared_cluster_or_through_a_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_JOBS, raising=False)
    several = str(min(MAX_DEFAULT_JOBS, JOBS_PER_CORE * (os.cpu_count() or 1)))
    assert default_jobs(None) == several  # the embedded reference broker
    assert default_jobs("amqp://guest:guest@127.0.0.1:5672/") == several  # a broker the user names: the same
    assert default_jobs("amqp://h/", ("embedded",)) == "1"  # the run's one embedded cluster: its nodes are shared
    assert default_jobs("amqp://h/", ("amqp://h2/", "amqp://h3/")) == "1"  # shared nodes its tests stop
    assert default_jobs("amqp://h/", (), "bunny") == str(LIBRARY_JOBS)  # a library expresses a few dozen tests
    assert default_jobs(None, (), "raw") == several
    assert default_jobs("amqp://h/", ("embedded",), "pika") == "1"
    monkeypatch.setenv(ENV_JOBS, "3")
    assert default_jobs(None) == "3" and default_jobs("amqp://h/") == "3"
    monkeypatch.setenv(ENV_JOBS, "many")
    with pytest.raises(UsageError, match="--jobs 'many'"):
        default_jobs(None)


def test_a_selection_gets_one_worker_per_ten_of_its_tests_at_most_the_default() -> None:
    assert jobs_for_selection(8, 5) == "1" and jobs_for_selection(8, 0) == "1"
    assert jobs_for_selection(8, TESTS_PER_JOB + 1) == "2" and jobs_for_selection(8, 79) == "8"
    assert jobs_for_selection(8, 780) == "8" and jobs_for_selection(8, None) == "8"  # not counted: the default


def test_the_selection_is_counted_by_pytest_s_collection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    few, area, areas = (selected_tests(s, None) for s in (["ACK-05"], ["ack"], ["ack", "cancel"]))
    assert few is not None and area is not None and areas is not None
    assert 1 <= few < area < areas < 780, (few, area, areas)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text("import pytest\n\n@pytest.mark.rules('ACK-05')\ndef test_x(): pass\n")
    assert selected_tests(["ACK-05"], suite) == 1
    assert selected_tests(["ACK-05"], tmp_path / "missing") in (0, None)
    monkeypatch.delenv(ENV_JOBS, raising=False)
    chosen = prepare(RunOptions(RunConfig(select=("ACK-05",)), out=tmp_path / "out"))
    assert chosen.jobs == "1"  # not eight workers for five tests
    monkeypatch.setenv(ENV_JOBS, "3")
    assert prepare(RunOptions(RunConfig(select=("ACK-05",)), out=tmp_path / "out")).jobs == "3"  # asked: kept
