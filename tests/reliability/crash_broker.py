"""The reference broker as a subprocess for the crash test: started on a fixed port with a
data directory, SIGKILLed and restarted (tests/reliability/crash.py).

Rules: every start waits, bounded by `ready_timeout`, until the port accepts; a broker that
exits or never listens raises `CrashTestFailed` with the tail of its log.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class CrashTestFailed(Exception):
    """The environment or the broker failed in a way the history cannot show (no restart, no
    reconnect within the bound, a drain that never empties)."""


def broker_supports_data_dir() -> bool:
    out = subprocess.run([sys.executable, "-m", "reference_broker", "--help"], capture_output=True,
                         text=True, timeout=30, cwd=ROOT)
    return "--data-dir" in out.stdout


class BrokerProcess:
    """The reference broker as a subprocess that can be SIGKILLed and restarted."""

    command: tuple[str, ...] = (sys.executable, "-m", "reference_broker")  # a wrapper may replace it

    def __init__(self, port: int, data_dir: Path | None, log_path: Path, ready_timeout: float) -> None:
        self.port, self.data_dir, self.log_path, self.ready_timeout = port, data_dir, log_path, ready_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> float:
        """Start and wait (bounded) until the port accepts; the seconds it took."""
        cmd = [*self.command, "--port", str(self.port), "--log-level", "WARNING"]
        if self.data_dir is not None:
            cmd += ["--data-dir", str(self.data_dir)]
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"--- start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        began = time.monotonic()
        while time.monotonic() - began < self.ready_timeout:
            if self.proc.poll() is not None:
                raise CrashTestFailed(f"broker start #{self.starts} exited with {self.proc.returncode}: "
                                      f"{self._log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return time.monotonic() - began
            except OSError:
                time.sleep(0.02)
        self.kill()
        raise CrashTestFailed(f"broker start #{self.starts} did not accept on port {self.port} within "
                              f"{self.ready_timeout:.0f} s: {self._log_tail()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()

    def _log_tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])
