"""pytest-xdist support for the plugin: one run, one record set and one summary across workers.

Responsibility: when pytest-xdist distributes the suite (`-n N`, `amqp-conformance run
--jobs N`), make the workers and the controller behave as one harness session.

Rules:
- The controller hands its run id to every worker (`pytest_configure_node`), so all workers
  write their test and frame records under one run (each worker's part files carry their own
  token); only the controller writes the run record.
- Each worker reaches the broker on its own (the `target` session fixture runs per worker:
  with `--broker-url` they share that broker; without it, each starts its own embedded one).
  A worker's first connection may come after another worker's test wedged the broker: that
  worker's broker tests then end `broken` (the broker is down, exit 3); it never ends its
  session early, which would lose its tests.
- Workers send back, in `workeroutput`, what the controller's run record and exit status need:
  the broker's product, version and profile, whether the broker went down, and how many test
  records they wrote.
- The controller counts verdicts from the workers' teardown reports (their `evidence`
  attribute), so the terminal summary and exit statuses 2 (broken) and 3 (broker down) are
  the same as in a single process.
- A test that changes a broker-wide setting (the global consumer timeout, the channel tick)
  runs alone across workers: every broker test holds a shared lock, and a test turns it into
  an exclusive one when it first changes such a setting (`BrokerLock.upgrade`, through
  `fixtures.admin`; flock on files in a directory the controller creates; writers are not
  starved); a test marked `beside_broker_wide` holds none (`conformance.plugin.schedule`). A
  broker-wide test makes its hold exclusive before it has deliveries in flight, so waiting for the lock delays no
  timer the test measures. A test whose remaining steps no longer read its broker-wide
  settings may end its claim (`BrokerLock.hold`'s `release`, through
  `RestoringAdmin.end_broker_wide`): it puts them back and lets go of the lock entirely, so
  the next test runs at once; it never waits for the lock again, so no timer of its own is
  delayed. Policies a test puts on its own queues are not broker-wide: their
  pattern matches that queue's name only, and RabbitMQ leaves every queue whose matching
  policy did not change untouched (rabbit_policy `update_matched_objects` → `no_change`:
  v3.10.8 l.478/498, v4.0.5 l.426/448, v4.3.5 l.443/465). Without `fcntl` (Windows) there
  is no lock.
- In xdist's `load` mode the controller's scheduler starts the long tests first, spread over
  the workers, hands out the rest one at a time and keeps the broker-wide tests for the end;
  the workers tell it each test's rank (`conformance.plugin.schedule`).
- Nothing here is active without pytest-xdist; the hooks are optional hooks.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from conformance.drivers.raw import DriverError, RawClient
from conformance.plugin import evidence, schedule, start_gate
from conformance.plugin.session import Harness
from conformance.results.verdicts import Verdict
from conformance.run.config import RunConfig

RUN_ID_KEY = "amqpc_run_id"
LOCK_KEY = "amqpc_lock_dir"
CONFIG_KEY = "amqpc_run_config"
OUTPUT_KEY = "amqpc"
EXCLUSIVE = pytest.StashKey[Callable[[], None]]()  # a test's way to make its shared hold exclusive
RELEASE = pytest.StashKey[Callable[[], None]]()  # a test's way to let go of its hold before its end
LOCK_WAIT = pytest.StashKey[float]()  # seconds the test waited for that (left out of its duration)


def worker_run_id(config: pytest.Config) -> str | None:
    """The run id the controller gave this worker, or None outside a worker."""
    workerinput = getattr(config, "workerinput", None)
    return str(workerinput[RUN_ID_KEY]) if workerinput and RUN_ID_KEY in workerinput else None


def worker_config(config: pytest.Config) -> dict[str, Any] | None:
    """In a pytest-xdist worker: the run configuration the controller handed it (plain types)."""
    workerinput = getattr(config, "workerinput", None)
    value = workerinput.get(CONFIG_KEY) if workerinput else None
    return dict(value) if isinstance(value, dict) else None


def probed(run: RunConfig) -> RunConfig:
    """The run with the broker's server-properties, or as it was when the broker does not answer
    (then each worker's own first connection finds that out and says so)."""
    try:
        with RawClient(str(run.broker_url), timeout=run.timeout(5.0)) as client:
            return run.probed(client.server_properties)
    except (OSError, DriverError):
        return run


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def register(config: pytest.Config, state: Harness) -> None:
    """Register the controller or worker half when pytest-xdist is active."""
    if is_worker(config):
        lock_dir = config.workerinput.get(LOCK_KEY)  # type: ignore[attr-defined]
        config.pluginmanager.register(WorkerSide(state, lock_dir), "amqpc-xdist-worker")
    elif config.pluginmanager.has_plugin("xdist") and getattr(config.option, "dist", "no") != "no":
        config.pluginmanager.register(ControllerSide(state, config), "amqpc-xdist-controller")


class BrokerLock:
    """A readers-writer lock shared by the worker processes (flock on two files)."""

    def __init__(self, directory: Path) -> None:
        self._turnstile: IO[str] = open(directory / "turnstile", "a+")  # noqa: SIM115 - held for the session
        self._main: IO[str] = open(directory / "main", "a+")  # noqa: SIM115

    @contextlib.contextmanager
    def hold(self, exclusive: bool = False) -> Iterator[tuple[Callable[[], None], Callable[[], None]]]:
        """Hold the lock (shared unless `exclusive`); yields (`upgrade`, `release`): `upgrade`
        makes a shared hold exclusive (it lets go first, then queues as a writer: two upgrades
        never deadlock); `release` lets go for good (an upgrade after it is an error)."""
        import fcntl

        held = {"exclusive": exclusive, "released": False}

        def upgrade() -> None:
            if held["released"]:
                raise RuntimeError("the broker lock was released: a test cannot take it again")
            if held["exclusive"]:
                return
            fcntl.flock(self._main, fcntl.LOCK_UN)
            self._take(exclusive=True)
            held["exclusive"] = True

        def release() -> None:
            held["released"] = True
            fcntl.flock(self._main, fcntl.LOCK_UN)

        self._take(exclusive)
        try:
            yield upgrade, release
        finally:
            fcntl.flock(self._main, fcntl.LOCK_UN)

    def _take(self, exclusive: bool) -> None:
        import fcntl

        fcntl.flock(self._turnstile, fcntl.LOCK_EX)  # a waiting writer blocks new readers here
        if exclusive:
            fcntl.flock(self._main, fcntl.LOCK_EX)
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        else:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)
            fcntl.flock(self._main, fcntl.LOCK_SH)

    def close(self) -> None:
        self._turnstile.close()
        self._main.close()


def _has_fcntl() -> bool:
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return False
    return True


class WorkerSide:
    def __init__(self, state: Harness, lock_dir: str | None) -> None:
        self.state = state
        self.lock_dir = Path(lock_dir) if lock_dir else None
        self.lock = BrokerLock(self.lock_dir) if self.lock_dir and _has_fcntl() else None

    @pytest.hookimpl(trylast=True)  # after the selection deselected what it does not run
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if self.lock_dir is not None:
            with contextlib.suppress(OSError):  # without ranks the controller ranks by file name
                schedule.write_ranks(self.lock_dir, items)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
        if (self.lock is None or "target" not in getattr(item, "fixturenames", ())
                or item.get_closest_marker(schedule.BESIDE) is not None):  # runs beside broker-wide tests
            return (yield)
        with self.lock.hold() as (upgrade, release):
            item.stash[EXCLUSIVE] = upgrade
            item.stash[RELEASE] = release
            return (yield)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        state, run = self.state, self.state.run
        output: dict[str, Any] = {
            "down": state.down,
            "tests": state.writer.tests_written if state.writer is not None else 0,
        }
        if run is not None:
            output.update(product=run.product, version=run.version, profile=run.profile, broker_url=run.broker_url,
                          cluster_nodes=run.cluster_nodes)
        elif state.target is not None:
            output["profile"] = state.target.profile.name
        session.config.workeroutput[OUTPUT_KEY] = output  # type: ignore[attr-defined]
        if self.lock is not None:
            self.lock.close()


class ControllerSide:
    def __init__(self, state: Harness, config: pytest.Config) -> None:
        self.state = state
        self.lock_dir = tempfile.mkdtemp(prefix="amqpc-lock-")
        # the first worker starts alone, so the broker-wide tests run while the others start
        self.gate = start_gate.close_gate(Path(self.lock_dir)) if schedule.wanted(config) else None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.state.config.broker_url and self.state.config.server_properties is None:
            self.state.config = probed(self.state.config)  # plain pytest: the controller probes, once
        node.workerinput[RUN_ID_KEY] = self.state.run_id
        node.workerinput[CONFIG_KEY] = self.state.config.to_plain()  # parsed and probed once, by the controller
        node.workerinput[LOCK_KEY] = self.lock_dir

    def pytest_unconfigure(self) -> None:
        self.open_gate()
        shutil.rmtree(self.lock_dir, ignore_errors=True)

    def open_gate(self) -> None:
        if self.gate is not None:
            start_gate.open_gate(self.gate)
            start_gate.forget_gate()
            self.gate = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.open_gate()  # the first worker is ready: the others start (start_gate)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own (a first-result hook)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if not schedule.wanted(config):
            return None  # xdist's own scheduler for every other mode or chunk size
        return schedule.make_scheduler(config, log, Path(self.lock_dir))  # long tests first, on different workers

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        self.open_gate()  # a worker that went down before collecting must not keep the others waiting
        output = (getattr(node, "workeroutput", None) or {}).get(OUTPUT_KEY)
        if not isinstance(output, dict):
            return
        state = self.state
        if output.get("down") and state.down is None:
            state.down = str(output["down"])
        state.remote_tests += int(output.get("tests") or 0)
        if state.run is not None:
            for key in ("product", "version", "profile", "broker_url", "cluster_nodes"):
                if output.get(key) and (key == "broker_url" or getattr(state.run, key) is None):
                    setattr(state.run, key, output[key])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = evidence.from_report(report) if report.when == "teardown" else None
        if found is None:
            return
        verdict = Verdict(found.verdict)
        self.state.counts[found.area, verdict] += 1
        if verdict is Verdict.BROKEN:
            self.state.broken.append((found.nodeid, found.message or ""))
