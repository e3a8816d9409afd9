"""The start gate of a distributed run (conformance/plugin/start_gate.py): workers other than the
first wait, when the plugin is imported, until the controller opens the gate, at most a bounded
time; nothing else waits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.plugin import start_gate

IMPORT = "import time; t = time.monotonic(); import conformance.plugin; print(round(time.monotonic() - t, 2))"
DEADLINE = ("import os, time; import conformance.plugin.start_gate as g; os.environ['PYTEST_XDIST_WORKER'] = 'gw1'; "
            "t = time.monotonic(); print(g.wait_turn(0.5), round(time.monotonic() - t, 2))")


def child(code: str, worker: str | None, gate: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    env[start_gate.ENV_GATE] = gate
    if worker is not None:
        env["PYTEST_XDIST_WORKER"] = worker
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)


@pytest.fixture
def gate(tmp_path: Path):  # type: ignore[no-untyped-def]
    saved = os.environ.get(start_gate.ENV_GATE)
    held = start_gate.close_gate(tmp_path)
    named = os.environ[start_gate.ENV_GATE]
    yield held, named
    start_gate.open_gate(held)
    start_gate.forget_gate()
    if saved is not None:
        os.environ[start_gate.ENV_GATE] = saved


def test_a_later_worker_waits_until_the_gate_opens(gate) -> None:  # type: ignore[no-untyped-def]
    held, named = gate
    assert named == f"{os.getpid()}:{held.name}"
    waiting = child(IMPORT, "gw3", named)
    with pytest.raises(subprocess.TimeoutExpired):
        waiting.wait(timeout=1.5)  # still at the gate (an import takes a fraction of this)
    start_gate.open_gate(held)
    out, _ = waiting.communicate(timeout=20)
    assert waiting.returncode == 0 and float(out) >= 1.0  # it waited for the gate, not for its import


def test_the_first_worker_a_stranger_and_a_plain_process_do_not_wait(gate) -> None:  # type: ignore[no-untyped-def]
    _, named = gate
    stranger = named.replace(f"{os.getpid()}:", f"{os.getpid() + 100000}:")  # a gate made by another process
    for worker, env in (("gw0", named), ("gw3", stranger), (None, named)):
        started = child(IMPORT, worker, env)
        started.communicate(timeout=20)  # at the gate it would stay until the fixture's end
        assert started.returncode == 0, (worker, env)


def test_a_gate_that_stays_shut_is_waited_for_only_until_the_deadline(gate) -> None:  # type: ignore[no-untyped-def]
    _, named = gate
    waiting = child(DEADLINE, None, named)
    out, _ = waiting.communicate(timeout=20)
    opened, seconds = out.split()
    assert opened == "False" and 0.4 <= float(seconds) < 5


def test_opening_twice_and_forgetting_are_harmless(tmp_path: Path) -> None:
    saved = os.environ.get(start_gate.ENV_GATE)
    held = start_gate.close_gate(tmp_path)
    start_gate.open_gate(held)
    start_gate.open_gate(held)
    start_gate.forget_gate()
    assert start_gate.ENV_GATE not in os.environ
    if saved is not None:
        os.environ[start_gate.ENV_GATE] = saved
