"""One test's view of the admin adapter: every change recorded with its undo, undone at teardown.

Rules:
- Every change made through `RestoringAdmin` is recorded with its undo (the previous policy,
  setting or alarm state; the deletion of a user or vhost the test made) before it is made, and
  undone in reverse order at `restore()`; a failed undo is reported, not hidden.
- A record is an `Undo`: plain data (kind and fields), so another process can replay it. Where
  the run keeps a ledger (`AMQPC_LEDGER_DIR`, set by the run's janitor: conformance.run.janitor),
  each record is appended to this process's ledger file before the change and marked done once
  undone, so what a killed run leaves behind is undone by the janitor.
- Changing a global setting and raising an alarm are broker-wide changes (`claim_broker_wide`,
  before the change). A user or vhost the test makes is not: its name is the test's own, and no
  other connection sees it. `end_broker_wide` puts the test's global settings back at once and
  ends its claim (`release`), for a test whose remaining steps no longer read them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conformance.run.admin import (
    ALARM_FIELDS,
    NEEDS_ADMIN,
    AdminAdapter,
    AdminError,
    ConnectionInfo,
    GlobalValue,
    Policy,
    QueueInfo,
    Unavailable,
    policies_path,
)

LEDGER_DIR = "AMQPC_LEDGER_DIR"  # the environment variable naming the run's ledger directory


@dataclass(frozen=True)
class Undo:
    """How to undo one change: `kind` (policy, global, user, vhost, alarm) and its fields."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        f = self.fields
        if self.kind == "policy":
            return f"{policies_path(bool(f['operator']))[:-3]}y {f['name']!r} on {f['vhost']!r}"
        if self.kind == "global":
            return f"setting {f['key']}"
        if self.kind == "alarm":
            return f"the {f['resource']} alarm"
        return f"{self.kind} {f['name']!r}"

    def apply(self, adapter: AdminAdapter) -> None:
        f = self.fields
        if self.kind == "policy":
            previous = f.get("previous")
            if previous is None:
                adapter.delete_policy(f["vhost"], f["name"], operator=f["operator"])
            else:
                p = Policy(**previous)
                adapter.put_policy(p.vhost, p.name, p.pattern, p.definition, p.apply_to, p.priority,
                                   operator=f["operator"])
        elif self.kind == "global":
            adapter.set_global(f["key"], f["previous"])
        elif self.kind == "user":
            adapter.delete_user(f["name"])
        elif self.kind == "vhost":
            adapter.delete_vhost(f["name"])
        elif self.kind == "alarm":
            adapter.set_alarm(f["resource"], bool(f["previous"]))
        else:
            raise ValueError(f"no such undo: {self.kind}")


class Ledger:
    """This process's ledger file: one JSON line per record ({"n", "kind", "fields"}) and one per
    undone record ({"done": n})."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._next = 0

    @classmethod
    def for_process(cls) -> Ledger | None:
        directory = os.environ.get(LEDGER_DIR)
        if not directory or not Path(directory).is_dir():  # no janitor, or its run has ended
            return None
        return cls(Path(directory) / f"ledger-{os.getpid()}.jsonl")

    def _append(self, entry: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def record(self, undo: Undo) -> int:
        self._next += 1
        self._append({"n": self._next, "kind": undo.kind, "fields": undo.fields})
        return self._next

    def done(self, n: int) -> None:
        self._append({"done": n})

    @staticmethod
    def pending(path: Path) -> list[Undo]:
        """The records of a ledger file not marked done, oldest first (a torn last line is skipped)."""
        records: dict[int, Undo] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if "done" in entry:
                records.pop(int(entry["done"]), None)
            else:
                records[int(entry["n"])] = Undo(entry["kind"], entry["fields"])
        return [records[n] for n in sorted(records)]


class RestoringAdmin(AdminAdapter):
    """One test's view of the adapter: changes are recorded and undone by `restore()`."""

    def __init__(self, adapter: AdminAdapter, vhost: str = "/", claim: Callable[[], None] | None = None,
                 ledger: Ledger | None = None, release: Callable[[], None] | None = None) -> None:
        self.adapter, self.vhost = adapter, vhost
        self._undo: list[tuple[Undo, int | None]] = []
        self._claim = claim  # called before the first broker-wide change (the plugin: the exclusive lock)
        self._release = release  # ends the claim (the plugin: lets go of the lock)
        self._ended = False
        self._ledger = ledger
        self._alarm_state: dict[str, bool] = {}  # resource -> in alarm, as last read or set
        self._alarm_undo: dict[str, tuple[Undo, int | None]] = {}  # resource -> its pending undo

    def claim_broker_wide(self) -> None:
        """Say that this test changes broker-wide settings from now on (before its deliveries are
        in flight); `set_global` says it on its own."""
        if self._ended:
            raise AdminError("a broker-wide change after end_broker_wide: the test no longer runs alone")
        if self._claim is not None:
            self._claim()

    def end_broker_wide(self) -> None:
        """Put back every global setting the test changed, now, and end its claim: from here on the
        test runs beside the others. Only for a test none of whose remaining steps reads a global
        setting or publishes (the caller's evidence); an alarm it raised must be cleared first."""
        if self._alarm_undo:
            raise AdminError(f"end_broker_wide with alarms still raised: {sorted(self._alarm_undo)}")
        failures = []
        for entry in [e for e in reversed(self._undo) if e[0].kind == "global"]:
            try:
                entry[0].apply(self.adapter)
            except (AdminError, Unavailable) as exc:
                failures.append(f"{entry[0].describe()}: {exc}")
                continue
            self._settle(entry)
        if failures:
            raise AdminError("could not restore the broker: " + "; ".join(failures))
        self._ended = True
        if self._release is not None:
            self._release()

    def _record(self, undo: Undo) -> None:
        self._undo.append((undo, self._ledger.record(undo) if self._ledger is not None else None))

    def describe(self) -> str:
        return self.adapter.describe()

    def list_queues(self, vhost: str) -> list[QueueInfo]:
        return self.adapter.list_queues(vhost)

    def list_exchanges(self, vhost: str) -> list[str]:
        return self.adapter.list_exchanges(vhost)

    def list_connections(self) -> list[ConnectionInfo]:
        return self.adapter.list_connections()

    def close_connection(self, name: str, reason: str = "closed by amqp-conformance") -> None:
        self.adapter.close_connection(name, reason)

    def get_policy(self, vhost: str, name: str, *, operator: bool = False) -> Policy | None:
        return self.adapter.get_policy(vhost, name, operator=operator)

    def _policy_undo(self, vhost: str, name: str, previous: Policy | None, operator: bool) -> Undo:
        return Undo("policy", {"vhost": vhost, "name": name, "operator": operator,
                               "previous": asdict(previous) if previous is not None else None})

    def put_policy(self, vhost: str, name: str, pattern: str, definition: dict[str, Any],
                   apply_to: str = "queues", priority: int = 0, *, operator: bool = False) -> None:
        previous = self.adapter.get_policy(vhost, name, operator=operator)
        self._record(self._policy_undo(vhost, name, previous, operator))
        self.adapter.put_policy(vhost, name, pattern, definition, apply_to, priority, operator=operator)

    def delete_policy(self, vhost: str, name: str, *, operator: bool = False) -> None:
        previous = self.adapter.get_policy(vhost, name, operator=operator)
        if previous is not None:
            self._record(self._policy_undo(vhost, name, previous, operator))
        self.adapter.delete_policy(vhost, name, operator=operator)

    def get_global(self, key: str) -> GlobalValue:
        return self.adapter.get_global(key)

    def set_global(self, key: str, value: GlobalValue) -> None:
        previous = self.adapter.get_global(key)  # Unavailable here, before any claim, without an adapter
        self.claim_broker_wide()
        self._record(Undo("global", {"key": key, "previous": previous}))
        self.adapter.set_global(key, value)

    def _require(self, method: str) -> None:
        """Unavailable before any claim or record, where the adapter lacks `method` (NoAdmin)."""
        if getattr(type(self.adapter), method) is getattr(AdminAdapter, method):
            raise Unavailable(NEEDS_ADMIN)

    def put_user(self, name: str, password: str, tags: str = "") -> None:
        """A user the test makes: deleted at `restore()` (with its permissions)."""
        self._require("put_user")
        self._record(Undo("user", {"name": name}))
        self.adapter.put_user(name, password, tags)

    def delete_user(self, name: str) -> None:
        self.adapter.delete_user(name)

    def put_vhost(self, name: str) -> None:
        """A vhost the test makes: deleted at `restore()` (with what is in it)."""
        self._require("put_vhost")
        self._record(Undo("vhost", {"name": name}))
        self.adapter.put_vhost(name)

    def delete_vhost(self, name: str) -> None:
        self.adapter.delete_vhost(name)

    def set_permissions(self, vhost: str, user: str, configure: str, write: str, read: str) -> None:
        """Only on a user or vhost the test made (their deletion undoes it)."""
        self.adapter.set_permissions(vhost, user, configure, write, read)

    def set_topic_permissions(self, vhost: str, user: str, exchange: str, write: str, read: str) -> None:
        self.adapter.set_topic_permissions(vhost, user, exchange, write, read)

    def alarms(self) -> frozenset[str]:
        raised = self.adapter.alarms()
        self._alarm_state = {r: r in raised for r in ALARM_FIELDS}  # what the broker said last
        return raised

    def set_alarm(self, resource: str, on: bool) -> None:
        """Raise or clear an alarm; its state before the test comes back at `restore()`. Setting
        it back to that state itself settles the undo (nothing left to restore)."""
        self._require("set_alarm")
        if resource not in self._alarm_state:
            self.alarms()  # Unavailable here, before any claim, where the adapter cannot read them
        if self._alarm_state.get(resource) == on:
            return
        self.claim_broker_wide()
        pending = self._alarm_undo.pop(resource, None)
        entry = None
        if pending is None:
            self._record(Undo("alarm", {"resource": resource, "previous": self._alarm_state[resource]}))
            entry = self._undo[-1]
        try:
            self.adapter.set_alarm(resource, on)
        except Unavailable:
            if entry is not None:  # nothing changed: nothing to undo
                self._settle(entry)
            raise
        self._alarm_state[resource] = on
        if entry is not None:
            self._alarm_undo[resource] = entry
        elif pending is not None:
            self._settle(pending)  # back where the test found it

    def _settle(self, entry: tuple[Undo, int | None]) -> None:
        """An undo no longer needed: out of the list, done in the ledger."""
        self._undo.remove(entry)
        if entry[1] is not None and self._ledger is not None:
            self._ledger.done(entry[1])

    def restore(self) -> None:
        """Undo every recorded change, newest first; AdminError naming what could not be undone."""
        failures = []
        while self._undo:
            undo, n = self._undo.pop()
            try:
                undo.apply(self.adapter)
            except (AdminError, Unavailable) as exc:
                failures.append(f"{undo.describe()}: {exc}")
                continue
            if n is not None and self._ledger is not None:
                self._ledger.done(n)
        if failures:
            raise AdminError("could not restore the broker: " + "; ".join(failures))
