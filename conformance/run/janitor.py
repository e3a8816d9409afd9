"""The janitor: undoes on the broker what a run that was killed left there.

Rules:
- A run with an admin adapter (`--broker-admin`) starts one janitor from its controller process
  (`start`): a Python process in its own session (a signal to the run's process group does not
  reach it), reading a pipe whose write end only the controller holds, and a ledger directory
  named to the run's processes by `AMQPC_LEDGER_DIR` (conformance.run.restoring: each process
  appends its undo records there before each change and marks them done once undone).
- When the pipe ends (the controller exited, whatever the way: a normal end, an exception,
  SIGTERM, SIGKILL), the janitor waits up to `WRITERS_SECONDS` for every other ledger's writer
  to end (a pytest-xdist worker may still be finishing a test), then undoes each pending record, newest
  first, through an adapter built from the same `--broker-admin` value, and removes the
  directory. A run that ended normally left nothing pending: the directory just goes.
- The admin value and the broker URL travel in the environment, never in argv (a URL may hold
  a password). What the janitor undid, or failed to, goes to `<directory>.log` beside it (removed when empty).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conformance.run.admin import AdminError, Unavailable, parse_admin
from conformance.run.restoring import LEDGER_DIR, Ledger

ADMIN_ENV, URL_ENV, PARENT_ENV = "AMQPC_JANITOR_ADMIN", "AMQPC_JANITOR_URL", "AMQPC_JANITOR_PARENT"
WRITERS_SECONDS = 30.0


class Janitor:
    """The controller's handle: the pipe's write end (closing it lets the janitor work)."""

    def __init__(self, process: subprocess.Popen[bytes], directory: Path, previous: str | None) -> None:
        self.process, self.directory = process, directory
        self._previous = previous  # AMQPC_LEDGER_DIR before the run (an outer run's, in a nested session)

    def finish(self, timeout: float = 60.0) -> int | None:
        """End of a run: point this process back at the ledger it had, close the pipe and wait
        (bounded) for the janitor's sweep."""
        if self._previous is None:
            os.environ.pop(LEDGER_DIR, None)
        else:
            os.environ[LEDGER_DIR] = self._previous
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def start(admin: str, broker_url: str, run_id: str) -> Janitor:
    """Start the janitor for this run and point this process (and those it starts) at its ledger."""
    directory = Path(tempfile.mkdtemp(prefix=f"amqpc-ledger-{run_id[:8]}-"))
    env = {**os.environ, ADMIN_ENV: admin, URL_ENV: broker_url, PARENT_ENV: str(os.getpid())}
    with (directory.parent / f"{directory.name}.log").open("ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "conformance.run.janitor", str(directory)],
                                   stdin=subprocess.PIPE, stdout=log, stderr=log, env=env,
                                   start_new_session=True, close_fds=True)
    previous = os.environ.get(LEDGER_DIR)
    os.environ[LEDGER_DIR] = str(directory)
    return Janitor(process, directory, previous)


def _wait_for_exit(pid: int, timeout: float) -> None:
    """Wait (bounded) for a process that is not our child to end: its pidfd turns readable."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return  # gone already (or no pidfd here: nothing to wait on)
    try:
        select.select([fd], [], [], max(0.0, timeout))
    finally:
        os.close(fd)


def _writer(path: Path) -> int | None:
    stem = path.stem.removeprefix("ledger-")
    return int(stem) if stem.isdigit() else None


def sweep(directory: Path, admin: str, broker_url: str, log: list[str]) -> int:
    """Undo every pending record of the directory's ledgers (newest first); the count undone."""
    ledgers = sorted(directory.glob("ledger-*.jsonl"))
    deadline = time.monotonic() + WRITERS_SECONDS
    for path in ledgers:
        pid = _writer(path)
        if pid is not None and str(pid) != os.environ.get(PARENT_ENV):  # the controller closed the pipe
            _wait_for_exit(pid, deadline - time.monotonic())
    pending = [(path, undo) for path in ledgers for undo in Ledger.pending(path)]
    if not pending:
        return 0
    adapter = parse_admin(admin, broker_url)
    undone = 0
    try:
        for path, undo in reversed(pending):
            try:
                undo.apply(adapter)
                undone += 1
                log.append(f"undid {undo.describe()} (left by {path.name})")
            except (AdminError, Unavailable) as exc:
                log.append(f"could not undo {undo.describe()} (left by {path.name}): {exc}")
    finally:
        adapter.close()
    return undone


def main(argv: list[str]) -> int:
    directory = Path(argv[0])
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(65536):  # EOF: the controller has ended
            pass
    log: list[str] = []
    try:
        sweep(directory, os.environ.get(ADMIN_ENV, "none"), os.environ.get(URL_ENV, ""), log)
    finally:
        for line in log:
            print(f"amqp-conformance janitor: {line}", flush=True)
        shutil.rmtree(directory, ignore_errors=True)
        own_log = directory.parent / f"{directory.name}.log"
        with contextlib.suppress(OSError):
            if own_log.stat().st_size == 0:  # nothing to say: no file left behind
                own_log.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
