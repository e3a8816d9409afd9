"""What a run changes on a broker is undone: by each test's teardown (RestoringAdmin) and, when
the run is killed, by the run's janitor (conformance.run.janitor).

- The bookkeeping of alarms in RestoringAdmin, against an adapter that only records calls.
- A run killed with SIGKILL while it holds a user, a vhost and both alarms on the embedded
  reference broker: its janitor undoes all of it.
- `rabbitmq43`: `amqp-conformance run` of the access and alarms areas on RabbitMQ 4.3.6, killed
  (its whole process group, SIGKILL) once it holds a change: afterwards the broker has no user,
  vhost, policy or alarm the run made.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conformance.embedded import EmbeddedBroker
from conformance.run.admin import ManagementApi, NoAdmin, Unavailable
from conformance.run.restoring import Ledger, RestoringAdmin, Undo
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
RMQ43_URL = os.environ.get("AMQPC_RMQ43_URL", "amqp://guest:guest@127.0.0.1:5743/")
RMQ43_MANAGEMENT = os.environ.get("AMQPC_RMQ43_ADMIN", "http://guest:guest@127.0.0.1:15743")


class Alarms(NoAdmin):
    """An adapter with alarms only, recording each change."""

    def __init__(self, raised: set[str] | None = None, refuse: bool = False) -> None:
        self.raised, self.refuse = set(raised or ()), refuse
        self.calls: list[tuple[str, bool]] = []

    def describe(self) -> str:
        return "alarms only"

    def alarms(self) -> frozenset[str]:
        return frozenset(self.raised)

    def set_alarm(self, resource: str, on: bool) -> None:
        if self.refuse:
            raise Unavailable("cannot raise alarms")
        self.calls.append((resource, on))
        (self.raised.add if on else self.raised.discard)(resource)


def test_alarms_raised_by_a_test_are_cleared_at_restore_and_a_cleared_one_is_not_cleared_twice(
        tmp_path: Path) -> None:
    adapter = Alarms()
    ledger = Ledger(tmp_path / "ledger-1.jsonl")
    view = RestoringAdmin(adapter, ledger=ledger)
    view.set_alarm("memory", True)
    view.set_alarm("disk", True)
    view.set_alarm("memory", False)  # back as it was: nothing left to undo for memory
    assert Ledger.pending(ledger.path) == [Undo("alarm", {"resource": "disk", "previous": False})]
    view.restore()
    assert adapter.calls == [("memory", True), ("disk", True), ("memory", False), ("disk", False)]
    assert adapter.raised == set() and Ledger.pending(ledger.path) == []


def test_an_alarm_the_broker_already_had_is_left_raised(tmp_path: Path) -> None:
    adapter = Alarms({"disk"})
    view = RestoringAdmin(adapter, ledger=Ledger(tmp_path / "ledger-1.jsonl"))
    view.set_alarm("disk", True)  # already raised: no change, nothing to undo
    view.set_alarm("disk", False)
    view.restore()
    assert adapter.calls == [("disk", False), ("disk", True)] and adapter.raised == {"disk"}


def test_an_adapter_that_cannot_raise_alarms_leaves_nothing_to_undo(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger-1.jsonl")
    view = RestoringAdmin(Alarms(refuse=True), ledger=ledger)
    with pytest.raises(Unavailable):
        view.set_alarm("memory", True)
    view.restore()  # no "could not restore": the alarm was never raised
    assert Ledger.pending(ledger.path) == []


def test_a_torn_ledger_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "ledger-7.jsonl"
    path.write_text('{"n": 1, "kind": "user", "fields": {"name": "u"}}\n{"n": 2, "kind": "vh', encoding="utf-8")
    assert Ledger.pending(path) == [Undo("user", {"name": "u"})]


KILLED_RUN = """
import sys
from conformance.run import janitor
from conformance.run.admin import parse_admin
from conformance.run.restoring import Ledger, RestoringAdmin
admin, url = sys.argv[1], sys.argv[2]
handle = janitor.start(admin, url, "killed-run")
view = RestoringAdmin(parse_admin(admin, url), ledger=Ledger.for_process())
view.put_user("amqpc.killed.user", "secret")
view.put_vhost("amqpc.killed.vhost")
view.set_alarm("memory", True)
view.set_alarm("disk", True)
print(handle.process.pid, flush=True)
sys.stdin.read()  # until killed
"""


def wait_for_exit(pid: int, timeout: float) -> bool:
    """Wait for a process that is not our child (the janitor) to end; False on timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def test_the_janitor_undoes_what_a_killed_run_left_on_the_reference_broker(tmp_path: Path) -> None:
    with EmbeddedBroker(management_port=0) as broker:
        admin, url = broker.management_url, broker.url
        assert admin is not None
        run = subprocess.Popen([sys.executable, "-c", KILLED_RUN, admin, url], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
        assert run.stdout is not None
        janitor_pid = int(run.stdout.readline() or 0)
        api = ManagementApi(admin)
        try:
            assert janitor_pid and api.alarms() == {"memory", "disk"}, "the run did not get as far as its changes"
            run.kill()
            run.wait(10)
            assert wait_for_exit(janitor_pid, 60), "the janitor did not end within 60 s of the run's death"
            assert api.alarms() == frozenset(), "an alarm the killed run raised is still raised"
            users = [u["name"] for u in api._call("GET", "/api/users")]
            vhosts = [v["name"] for v in api._call("GET", "/api/vhosts")]
            assert "amqpc.killed.user" not in users and "amqpc.killed.vhost" not in vhosts, (users, vhosts)
            said = "".join(p.read_text() for p in tmp_path.glob("amqpc-ledger-*.log"))
            assert said.count("amqp-conformance janitor: undid") == 4, said  # what it did, in its log
        finally:
            api.close()
            if run.poll() is None:
                run.kill()


@pytest.mark.rabbitmq43
def test_a_run_killed_mid_area_leaves_nothing_on_rabbitmq_43(tmp_path: Path) -> None:
    """The run (access and alarms, through rabbitmqctl in the 4.3.6 chroot) is SIGKILLed with its
    process group as soon as a test holds a change (a pending ledger record); its janitor, in a
    session of its own, undoes it."""
    api = ManagementApi(RMQ43_MANAGEMENT)
    try:
        before = _broker_state(api)
    except Exception as exc:
        require(False, f"RabbitMQ 4.3.6's management API at 127.0.0.1:15743 (scripts/rabbitmq4.sh up 4.3): {exc}")
    env = {**os.environ, "TMPDIR": str(tmp_path), "AMQPC_RABBITMQCTL": f"{ROOT}/scripts/rabbitmq4.sh ctl 4.3"}
    run = subprocess.Popen([sys.executable, "-m", "conformance.cli", "run", "--broker-url", RMQ43_URL,
                            "--broker-admin", "rabbitmqctl", "--select", "access,alarms", "--jobs", "1",
                            "--out", str(tmp_path / "out")], cwd=ROOT, env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        held = _first_pending_change(tmp_path, run, deadline=time.monotonic() + 180)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(10)
        janitors = [p for p in _janitor_pids(tmp_path)]
        for pid in janitors:
            assert wait_for_exit(pid, 90), f"the janitor (pid {pid}) did not end within 90 s of the run's death"
        after = _broker_state(api)
        assert after == before, (f"the killed run held {held}; the broker before the run: {before}; after the "
                                 f"janitor: {after}")
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        api.close()


def _broker_state(api: ManagementApi) -> dict[str, Any]:
    return {"users": sorted(u["name"] for u in api._call("GET", "/api/users")),
            "vhosts": sorted(v["name"] for v in api._call("GET", "/api/vhosts")),
            "policies": sorted(p["name"] for p in api._call("GET", "/api/policies")),
            "alarms": sorted(api.alarms())}


def _ledgers(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("amqpc-ledger-*/ledger-*.jsonl"))


def _janitor_pids(tmp_path: Path) -> list[int]:
    """The janitors of runs under tmp_path, from /proc (their command line names the ledger dir)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"conformance.run.janitor" in cmdline and any(str(tmp_path).encode() in a for a in cmdline):
            pids.append(int(proc.name))
    return pids


def _first_pending_change(tmp_path: Path, run: subprocess.Popen[bytes], deadline: float) -> list[Undo]:
    """Watch the run's ledgers until a change is held (bounded; the run must still be running)."""
    while time.monotonic() < deadline:
        assert run.poll() is None, "the run ended before any test held a change"
        held = [u for path in _ledgers(tmp_path) for u in Ledger.pending(path)]
        if held:
            return held
        select.select([], [], [], 0.05)  # a condition polled until the deadline (no file notification in the stdlib)
    raise AssertionError("no test of the run held a change within 180 s")
