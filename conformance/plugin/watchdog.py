"""The harness's watchdog: no rule test and no session runs past its budget (docs/design.md decision 8).

Responsibility: a daemon thread that watches the running rule test's deadline (`--test-timeout`)
and the session's (`--run-timeout`; `--session-timeout` belongs to pytest-timeout) and ends an
overrun, so a run against a broker that is wedged or too slow ends with verdicts instead of
hanging.

Rules:
- Budgets are seconds multiplied by `--timeout-scale`. Defaults: a rule test gets
  `TEST_BUDGET` for its setup, call and teardown together; the session gets `SESSION_BASE`
  plus `SESSION_PER_TEST` per collected test. 0 turns a budget off. Only rule tests (marker
  `rules`) are ever interrupted; a session budget that runs out elsewhere fires when the next
  rule test starts.
- On expiry: (1) one line saying what overran, then the stack of every thread, go to the real
  stderr (fd 2 as it was at configure, which pytest's capture does not swallow);
  (2) `on_expiry(reason, session)` tells the plugin; (3) the thread running the test is
  interrupted with `WatchdogExpired`, a BaseException (neither `except Exception` in a test
  nor Hypothesis catches it), so the running test ends `broken`. The main thread is reached
  with a signal (`SIGNAL`, which also breaks a blocking socket call); another thread with an
  asynchronous exception.
- Time a test spends waiting for another test (the exclusive lock of a broker-wide change,
  conformance.plugin.distributed) is not the broker's: `extend` moves the test's deadline.
- A rule test that overran (`session` false) is one stuck test, not yet a dead broker: the
  plugin probes the broker with a fresh connection once the test has ended, and only when
  that probe fails is the broker down (exit 3). Once the interrupted test has ended
  (`disarm`), the watchdog is ready for the next test. A session that overran (`session`
  true) ends the run: the plugin marks the broker down, every later broker test is `broken`.
- If the interrupted test has not ended `GRACE` (scaled) after the interrupt, the process
  exits with status 3 (`os._exit`) after a last line on stderr: a hang the interrupt cannot
  break (a blocked C call, a test that swallows BaseException) still ends.
- The thread reads only the monotonic clock and waits on a condition; it never touches
  sockets, pytest's objects or the terminal.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from conformance.results.verdicts import EXIT_UNREACHABLE
from conformance.run.config import RunConfig
from conformance.run.options import SESSION_BASE, SESSION_PER_TEST, TEST_BUDGET

GRACE = 30.0  # s between the interrupt and the hard exit, before --timeout-scale
EXIT_STATUS = EXIT_UNREACHABLE  # docs/design.md decision 8: the broker is unreachable or wedged
SIGNAL = signal.SIGUSR2  # not SIGALRM: pytest-timeout's


class WatchdogExpired(BaseException):
    """A rule test or the session overran its budget; the run is being ended."""


@dataclass(frozen=True)
class Budgets:
    test: float  # 0 = none
    session: float | None  # None: derived from the number of tests; 0 = none
    scale: float

    @classmethod
    def from_run(cls, run: RunConfig) -> Budgets:
        """The budgets of a run (its values were checked where its configuration was built)."""
        test, scale = run.test_timeout, run.timeout_scale
        return cls(TEST_BUDGET * scale if test is None else test, run.run_timeout, scale)

    def session_for(self, tests: int) -> float:
        if self.session is not None:
            return self.session
        return (SESSION_BASE + SESSION_PER_TEST * tests) * self.scale

    @property
    def grace(self) -> float:
        return GRACE * self.scale


class Watchdog:
    """Deadlines of the running rule test and of the session; see the module rules."""

    def __init__(self, budgets: Budgets, on_expiry: Callable[[str, bool], None]) -> None:
        self.budgets, self.on_expiry = budgets, on_expiry
        self.expired: str | None = None  # why the running test is being interrupted, once it is
        self._session_over = False  # the session overran: no later test is watched again
        self._cond = threading.Condition()
        self._session_due: float | None = None
        self._session_budget = 0.0
        self._test: tuple[str, float | None, int] | None = None  # nodeid, deadline, thread ident
        self._hard_due: float | None = None
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._stderr = _dup_stderr()
        self._previous_handler: Any = None
        self._handler_installed = False

    def start_session(self, tests: int) -> None:
        budget = self.budgets.session_for(tests)
        with self._cond:
            self._session_due = time.monotonic() + budget if budget > 0 else None
            self._session_budget = budget

    def arm(self, nodeid: str) -> None:
        """A rule test starts (in the thread that runs it)."""
        if self.budgets.test <= 0 and self._session_due is None:
            return
        self._install_handler()
        deadline = time.monotonic() + self.budgets.test if self.budgets.test > 0 else None
        with self._cond:
            self._test = (nodeid, deadline, threading.get_ident())
            self._cond.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="amqpc-watchdog", daemon=True)
            self._thread.start()

    def extend(self, seconds: float) -> None:
        """The running test waited `seconds` for something that is not the broker (the exclusive
        lock of a broker-wide change): its deadline moves by as much."""
        with self._cond:
            if self._test is not None:
                nodeid, deadline, ident = self._test
                if deadline is not None:
                    self._test = (nodeid, deadline + seconds, ident)
                    self._cond.notify()

    def disarm(self) -> None:
        """The rule test ended; after a test overrun, the watchdog is ready for the next one."""
        with self._cond:
            self._test = None
            if self.expired is not None and not self._session_over:
                self.expired, self._hard_due = None, None

    def stop(self) -> None:
        """The run is over: no expiry, no hard exit; the signal handler is restored."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(1.0)
        if self._handler_installed and threading.current_thread() is threading.main_thread():
            signal.signal(SIGNAL, self._previous_handler)
            self._handler_installed = False
        if self._stderr is not None:
            os.close(self._stderr)
            self._stderr = None

    # -- the thread ------------------------------------------------------------------------
    def _watch(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                if self._hard_due is not None and now >= self._hard_due:
                    self._hard_exit()
                reason = self._overrun(now) if self.expired is None else None
                if reason is not None:
                    self._fire(reason, now)
                    continue
                due = [d for d in (self._hard_due, *self._deadlines()) if d is not None]
                self._cond.wait(max(min(due) - now, 0.001) if due else None)

    def _deadlines(self) -> tuple[float | None, float | None]:
        """(test deadline, session deadline) while a rule test runs, else none."""
        if self._test is None or self.expired is not None:
            return None, None
        return self._test[1], self._session_due

    def _overrun(self, now: float) -> str | None:
        test_due, session_due = self._deadlines()
        if self._test is None:
            return None
        nodeid = self._test[0]
        if session_due is not None and now >= session_due:
            self._session_over = True
            return f"the session did not end within {self._session_budget:g} s (--run-timeout); {nodeid} was running"
        if test_due is not None and now >= test_due:
            return f"{nodeid} did not end within {self.budgets.test:g} s (--test-timeout)"
        return None

    def _fire(self, reason: str, now: float) -> None:
        assert self._test is not None
        self.expired = reason
        self._hard_due = now + self.budgets.grace
        then = (f"ending the run (exit status {EXIT_STATUS})" if self._session_over
                else "interrupting it; a fresh connection then tells a stuck test from a dead broker")
        self._write(f"\namqp-conformance watchdog: {reason}; {then}. Stacks of all threads:\n")
        if self._stderr is not None:
            faulthandler.dump_traceback(self._stderr, all_threads=True)
        try:
            self.on_expiry(reason, self._session_over)
        finally:
            self._interrupt(self._test[2])

    def _interrupt(self, ident: int) -> None:
        if ident == threading.main_thread().ident and self._handler_installed:
            signal.pthread_kill(ident, SIGNAL)
        else:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(WatchdogExpired))

    def _hard_exit(self) -> None:
        self._write(f"amqp-conformance watchdog: the run did not end {self.budgets.grace:g} s after: {self.expired}; "
                    f"exiting with status {EXIT_STATUS}\n")
        os._exit(EXIT_STATUS)

    def _write(self, text: str) -> None:
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                os.write(self._stderr, text.encode("utf-8", "replace"))

    # -- the main thread's end of the interrupt ----------------------------------------------
    def _install_handler(self) -> None:
        if self._handler_installed or threading.current_thread() is not threading.main_thread():
            return
        self._previous_handler = signal.signal(SIGNAL, self._on_signal)
        self._handler_installed = True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._test is not None and self.expired is not None:  # no lock: this runs between bytecodes
            raise WatchdogExpired(self.expired)


def _dup_stderr() -> int | None:
    try:
        return os.dup(2)
    except OSError:
        return None
