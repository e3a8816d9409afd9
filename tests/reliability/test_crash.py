"""The crash test (tests/reliability/crash.py) against the reference broker: SIGKILL under load,
restart on the same data dir, then the total-queue checker (tests/reliability/totalqueue.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.crash import CrashConfig, CrashResult, run_crash_test

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`


def _run(tmp_path: Path, cycles: int, seed: int, storage: bool = True) -> CrashResult:
    return run_crash_test(CrashConfig(cycles=cycles, seed=seed, storage=storage), tmp_path)


def _assert_survived(result: CrashResult) -> None:
    report = "\n".join(result.lines())
    assert result.ok, report
    assert result.report.confirmed > 0 and result.report.drained > 0, report
    assert result.reconnects["publisher"] >= 1 and result.reconnects["consumer"] >= 1, report
    assert not result.queue_missing, f"the durable queue did not survive a restart\n{report}"


def test_crash_short_nothing_confirmed_is_lost(tmp_path: Path) -> None:
    _assert_survived(_run(tmp_path, cycles=3, seed=9001))


def test_crash_in_memory_broker_is_caught_losing_messages(tmp_path: Path) -> None:
    # the harness can fail: without --data-dir a kill takes the queue and its backlog with it
    result = _run(tmp_path, cycles=2, seed=9002, storage=False)
    report = "\n".join(result.lines())
    assert not result.ok, report
    assert result.report.lost and result.queue_missing, report
    assert not result.report.unexpected and not result.report.illegal_duplicates, report


@pytest.mark.slow
def test_crash_20_cycles_nothing_confirmed_is_lost(tmp_path: Path) -> None:
    _assert_survived(_run(tmp_path, cycles=20, seed=20))
