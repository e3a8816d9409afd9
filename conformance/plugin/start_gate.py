"""The first pytest-xdist worker starts alone; the others start once it has collected the suite.

Responsibility: let one worker be ready seconds before the rest, so the broker-wide tests, which
wait on the broker's clock and use little CPU, run on it while the other workers start (each starts
Python and collects the whole suite: about a CPU-second, all of them at once fill every core for
seconds, and no test runs until one is done). Measured on 2 cores, RabbitMQ 4.3.6: every worker
collected at 7.3 s, and the broker-wide tests kept the broker alone for the last 8 s of a 53-s
run at 10 % CPU (docs/benchmarks.md).

Rules:
- The controller makes a gate file in the run's lock directory, holds an exclusive flock on it
  before any worker starts, and names it, with its own process id, to the workers in `ENV_GATE`
  (xdist's workers are its children and start with its environment; a process the gate was not
  made for, such as a run started by a test of a run, inherits the variable but has another
  parent and does not wait). Only a run the plugin schedules makes one (`schedule.wanted`). It lets go when the first worker's collection has come
  (`distributed.ControllerSide`), when a worker goes down, or when the session ends.
- A worker other than the first (`FIRST_WORKER`) waits for a shared flock on that file as soon
  as the plugin is imported (`conformance/plugin/__init__.py`), before it imports the harness:
  at most `GATE_SECONDS`, then it starts anyway (a gate is an order, never a reason to hang: a
  first worker that cannot collect must not stop the others). The wait is bounded by an
  interval timer (SIGALRM), so the flock call ends at the deadline.
- Nothing else waits: outside an xdist worker, without the variable, without `fcntl` or
  `signal.setitimer` (Windows), or off the main thread, the import goes on at once.
- Only the standard library is imported here: the point is to wait before the harness is.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import IO

ENV_GATE = "AMQPC_START_GATE"
FIRST_WORKER = "gw0"
GATE_SECONDS = 30.0  # the longest a worker waits for the first one's collection
GATE_FILE = "start-gate"


class _Late(Exception):
    """The gate stayed shut until the deadline."""


def close_gate(lock_dir: Path) -> IO[str] | None:
    """On the controller, before the workers start: the gate held shut and named in `ENV_GATE`, or
    None without flock."""
    try:
        import fcntl
    except ImportError:
        return None
    gate = open(lock_dir / GATE_FILE, "a+")  # noqa: SIM115 - held until `open_gate`
    fcntl.flock(gate, fcntl.LOCK_EX)
    os.environ[ENV_GATE] = f"{os.getpid()}:{lock_dir / GATE_FILE}"
    return gate


def open_gate(gate: IO[str] | None) -> None:
    """Let the waiting workers start (idempotent: closing the file releases its flock)."""
    if gate is not None and not gate.closed:
        gate.close()


def forget_gate() -> None:
    """At the controller's end: the variable goes (the process may run again: `amqp-conformance run`
    calls pytest in its own process)."""
    os.environ.pop(ENV_GATE, None)


def wait_turn(seconds: float = GATE_SECONDS) -> bool:
    """In a worker other than the first: wait (at most `seconds`) until the gate opens. True when
    it waited for an open gate, False when it did not wait or the deadline came first."""
    named, worker = os.environ.get(ENV_GATE, ""), os.environ.get("PYTEST_XDIST_WORKER")
    parent, _, path = named.partition(":")
    if (not path or not worker or worker == FIRST_WORKER or parent != str(os.getppid())
            or threading.current_thread() is not threading.main_thread()):
        return False
    try:
        import fcntl
        import signal
        timer = signal.setitimer
    except (ImportError, AttributeError):
        return False
    try:
        gate = open(path)  # noqa: SIM115 - closed below
    except OSError:
        return False

    def late(signum: int, frame: object) -> None:
        raise _Late

    previous = signal.signal(signal.SIGALRM, late)
    try:
        timer(signal.ITIMER_REAL, seconds)
        try:
            fcntl.flock(gate, fcntl.LOCK_SH)
        finally:
            timer(signal.ITIMER_REAL, 0)
        return True
    except _Late:
        return False
    finally:
        signal.signal(signal.SIGALRM, previous)
        with contextlib.suppress(OSError):
            gate.close()
