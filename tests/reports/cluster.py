"""Real Spark clusters on loopback for the tests, from pyspark's own distribution.

- `standalone_cluster(workdir)`: a standalone master and two workers
  (`bin/spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`), each worker
  with one core; yields its URL `spark://127.0.0.1:PORT` and web UI port once both workers are ALIVE.
- `connect_server(workdir)`: a Spark Connect server (`sbin/start-connect-server.sh --wait`, so
  it stays our child process); yields `sc://127.0.0.1:PORT` once its gRPC port accepts connections.

Rules: every daemon binds 127.0.0.1 on free ports and runs in its own process group, with its
output in a log file under `workdir`; every wait is bounded (`START_TIMEOUT` x the machine's
load allowance), and a daemon that exits or a wait that runs out raises `ClusterError` with the
log's tail. Teardown ends the process groups this module started (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from reports.jvm import log_config_option
from reports.spark import LOG_CONFIG
from tests.conftest import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT = 180.0  # seconds: JVMs start slowly on a loaded 2-core machine
WORKERS = 2


class ClusterError(RuntimeError):
    """A daemon did not start (or died); the message carries its log's tail."""


def daemon_env(workdir: Path) -> dict[str, str]:
    """Environment for the daemons and for a driver that talks to them: loopback, quiet logs."""
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOG_DIR=str(workdir / "logs"), SPARK_PID_DIR=str(workdir / "pids"),
               SPARK_DAEMON_MEMORY="512m", SPARK_EXECUTOR_MEMORY="512m", SPARK_WORKER_DIR=str(workdir / "work"))
    env["SPARK_DAEMON_JAVA_OPTS"] = log_config_option(LOG_CONFIG)
    env.pop("SPARK_REMOTE", None)
    return env


@contextmanager
def _daemon(name: str, command: list[str], env: dict[str, str], workdir: Path) -> Iterator[Callable[[], str]]:
    """Run `command` in its own process group; yield a function that checks it is alive (-> its log)."""
    log_path = workdir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, cwd=workdir, start_new_session=True)

    def alive() -> str:
        if process.poll() is not None:
            raise ClusterError(f"{name} exited with {process.returncode}:\n{_tail(log_path)}")
        return str(log_path)

    try:
        yield alive
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        if process.poll() is not None:
            break
        try:
            os.killpg(process.pid, sig)  # the group this module created: the JVM and any executor it forked
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_until(what: str, ready: Callable[[], bool], alive: list[Callable[[], str]], timeout: float) -> None:
    """Poll `ready` until true; raise ClusterError when `timeout` runs out or a daemon died."""
    deadline = time.monotonic() + timeout
    while True:
        for check in alive:
            check()
        if ready():
            return
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {check()}\n{_tail(Path(check()))}" for check in alive)
            raise ClusterError(f"{what}: not ready after {timeout:.0f} s\n{logs}")
        time.sleep(0.5)  # polling interval of a bounded wait, not synchronisation


@dataclass(frozen=True)
class Standalone:
    url: str  # spark://127.0.0.1:PORT
    ui_port: int  # the master's web UI: /json/ tells workers and applications

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as answer:
            state: dict[str, Any] = json.load(answer)
        return state

    def alive_workers(self) -> int:
        try:
            workers = self.state().get("workers", [])
        except (OSError, ValueError):
            return 0
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def completed_apps(self) -> list[str]:
        return [app["name"] for app in self.state().get("completedapps", [])]


@contextmanager
def standalone_cluster(workdir: Path, *, timeout: float = START_TIMEOUT) -> Iterator[Standalone]:
    """A standalone master with two one-core workers on 127.0.0.1, once both workers are ALIVE."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = daemon_env(workdir)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui_port = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    cluster = Standalone(url, ui_port)
    with ExitStack() as stack:
        master = stack.enter_context(_daemon("master", [
            spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
            "--webui-port", str(ui_port)], env, workdir))
        daemons = [master]
        for n in range(WORKERS):
            work = workdir / f"worker-{n}"
            work.mkdir(parents=True, exist_ok=True)
            daemons.append(stack.enter_context(_daemon(f"worker-{n}", [
                spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", "1", "--memory", "1g",
                "--work-dir", str(work)], env, workdir)))
        wait_until(f"standalone master {url} with {WORKERS} workers", lambda: cluster.alive_workers() >= WORKERS,
                   daemons, timeout)
        yield cluster


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


@contextmanager
def connect_server(workdir: Path, *, master: str = "local[2]", timeout: float = START_TIMEOUT) -> Iterator[str]:
    """A Spark Connect server (`sbin/start-connect-server.sh --wait`) on 127.0.0.1; yields its sc:// URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = daemon_env(workdir)
    port = free_port()
    command = [str(SPARK_HOME / "sbin" / "start-connect-server.sh"), "--wait", "--master", master,
               "--conf", f"spark.connect.grpc.binding.port={port}",
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.session.timeZone=UTC",
               "--conf", f"spark.driver.extraJavaOptions={log_config_option(LOG_CONFIG)}",
               "--conf", f"spark.pyspark.python={os.environ.get('PYSPARK_PYTHON') or sys.executable}"]
    with _daemon("connect", command, env, workdir) as alive:
        wait_until(f"Spark Connect server on port {port}", lambda: _listening(port), [alive], timeout)
        yield f"sc://127.0.0.1:{port}"

