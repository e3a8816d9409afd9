"""A broker that goes down during a run, for the grid's tests: the reference broker behind a
`HostileProxy` that stops answering everything, on every connection, once a suite test declares its
first queue (`wedge=True`), as GarageMQ does under the suite.

    python -m tests.conformance.wedging_broker up PORT DIR    start one on 127.0.0.1:PORT in the background
                                                            (its pid in DIR); returns once it listens
    python -m tests.conformance.wedging_broker down PORT DIR  stop it (TERM, then KILL)
    python -m tests.conformance.wedging_broker serve PORT     the broker process itself

Every wait is bounded: `up` by START_SECONDS, `down` by STOP_SECONDS, a broker lives at most
LIFETIME_SECONDS.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from reference_broker.server import EmbeddedBroker
from tests.conformance.hostile import HostileProxy, Mode, Plan, declares_queue

START_SECONDS = 30.0
STOP_SECONDS = 10.0
LIFETIME_SECONDS = 900.0
READY = "ready"


def _pidfile(port: str, directory: str) -> Path:
    return Path(directory) / f"wedging-broker-{port}.pid"


def serve(port: int) -> int:
    broker = EmbeddedBroker().start()
    proxy = HostileProxy((broker.host, broker.port), Plan(Mode.BLACKHOLE, on_request=declares_queue(), wedge=True))
    proxy.start(port)
    ended = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: ended.set())
    print(READY, flush=True)
    ended.wait(LIFETIME_SECONDS)
    proxy.close()
    broker.stop()
    return 0


def up(port: str, directory: str) -> int:
    log = (Path(directory) / f"wedging-broker-{port}.log").open("a")
    # nothing of the caller's: a command runner waits for its pipes to close, the broker outlives this
    process = subprocess.Popen([sys.executable, "-m", "tests.conformance.wedging_broker", "serve", port],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True,
                               start_new_session=True)
    log.close()
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.append(process.stdout.readline() if process.stdout else ""),
                              daemon=True)
    reader.start()
    reader.join(START_SECONDS)
    if not said or said[0].strip() != READY:
        process.kill()
        print(f"the wedging broker did not start on port {port} within {START_SECONDS:.0f} s", file=sys.stderr)
        return 1
    _pidfile(port, directory).write_text(str(process.pid))
    return 0


def down(port: str, directory: str) -> int:
    pidfile = _pidfile(port, directory)
    if not pidfile.exists():
        return 0
    pid = int(pidfile.read_text())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + STOP_SECONDS
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)  # polling a process this one did not start: no other way to wait for it
        if not Path(f"/proc/{pid}").exists():
            break
    pidfile.unlink(missing_ok=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"] and len(argv) == 2:
        return serve(int(argv[1]))
    if argv[:1] in (["up"], ["down"]) and len(argv) == 3:
        return (up if argv[0] == "up" else down)(argv[1], argv[2])
    print(__doc__, file=sys.stderr)
    return 4


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
