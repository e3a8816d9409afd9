"""Admin adapters (docs/design.md decision 6): control of the broker outside AMQP.

Responsibility: one interface, `AdminAdapter` (queues, exchanges, connections, policies and
global application settings such as `consumer_timeout`), with three implementations chosen by
`--broker-admin` (and users, vhosts, permissions and topic permissions for the access area,
resource alarms for the alarms area):
`ManagementApi` (the RabbitMQ management HTTP API; the reference broker
serves the same paths), `Rabbitmqctl` (the CLI, each call under a timeout) and `NoAdmin`.
`conformance.run.restoring.RestoringAdmin` wraps an adapter for one test and undoes every
change at teardown.

Rules:
- A capability the adapter does not have raises `Unavailable`: the plugin turns it into the
  `needs-admin` verdict ("not run: needs admin", left out of the score). A configured adapter whose call fails
  raises `AdminError`, a `HarnessError`: the verdict is `broken`, never `failed`.
- Every change made through `RestoringAdmin` is recorded with its undo (the previous policy or
  setting) and undone in reverse order at `restore()`; a failed undo is reported, not hidden.
- Global settings are Erlang application variables of `rabbit` (`consumer_timeout`,
  `channel_tick_interval`); `None` means unset. Values are integers or booleans only.
- Passwords never appear in `describe()` or error messages.
- Users and vhosts a test makes through `RestoringAdmin` are deleted at `restore()` (their
  permissions go with them); making one is a broker-wide change (`claim_broker_wide`).
"""

from __future__ import annotations

import abc
import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx

from conformance.drivers.raw import BrokerAddress
from conformance.results.verdicts import HarnessError

GlobalValue = int | bool | None
_ATOM = re.compile(r"[a-z][a-z0-9_]*")
NEEDS_ADMIN = "needs --broker-admin (a management API URL or 'rabbitmqctl')"
ALARM_FIELDS = {"memory": "mem_alarm", "disk": "disk_free_alarm"}  # resource -> GET /api/nodes field


class Unavailable(Exception):
    """The adapter cannot do this at all: the test is not run (verdict `needs-admin`)."""


class AdminError(HarnessError):
    """An admin call failed: the harness's environment is at fault (`broken`)."""


@dataclass(frozen=True)
class QueueInfo:
    name: str
    vhost: str
    messages: int | None = None
    consumers: int | None = None
    type: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConnectionInfo:
    name: str  # the identifier `close_connection` takes
    user: str | None = None
    vhost: str | None = None
    peer_port: int | None = None
    client_properties: dict[str, Any] = field(default_factory=dict)
    heartbeat: int | None = None  # the negotiated heartbeat, s (the management API's and rabbitmqctl's "timeout")


@dataclass(frozen=True)
class Policy:
    vhost: str
    name: str
    pattern: str
    definition: dict[str, Any]
    apply_to: str = "all"
    priority: int = 0


class AdminAdapter(abc.ABC):
    """What a rule may ask of the broker outside AMQP."""

    @abc.abstractmethod
    def describe(self) -> str: ...

    @abc.abstractmethod
    def list_queues(self, vhost: str) -> list[QueueInfo]: ...

    @abc.abstractmethod
    def list_exchanges(self, vhost: str) -> list[str]: ...

    @abc.abstractmethod
    def list_connections(self) -> list[ConnectionInfo]: ...

    @abc.abstractmethod
    def close_connection(self, name: str, reason: str = "closed by amqp-conformance") -> None: ...

    # operator=True: an operator policy (RabbitMQ's operator-policies, merged with the user policy)
    @abc.abstractmethod
    def get_policy(self, vhost: str, name: str, *, operator: bool = False) -> Policy | None: ...

    @abc.abstractmethod
    def put_policy(self, vhost: str, name: str, pattern: str, definition: dict[str, Any],
                   apply_to: str = "queues", priority: int = 0, *, operator: bool = False) -> None: ...

    @abc.abstractmethod
    def delete_policy(self, vhost: str, name: str, *, operator: bool = False) -> None: ...

    @abc.abstractmethod
    def get_global(self, key: str) -> GlobalValue: ...

    @abc.abstractmethod
    def set_global(self, key: str, value: GlobalValue) -> None: ...

    # users, vhosts and permissions (the access area): not abstract, an adapter may lack them
    def put_user(self, name: str, password: str, tags: str = "") -> None:
        raise Unavailable(NEEDS_ADMIN)

    def delete_user(self, name: str) -> None:
        raise Unavailable(NEEDS_ADMIN)

    def put_vhost(self, name: str) -> None:
        raise Unavailable(NEEDS_ADMIN)

    def delete_vhost(self, name: str) -> None:
        raise Unavailable(NEEDS_ADMIN)

    def set_permissions(self, vhost: str, user: str, configure: str, write: str, read: str) -> None:
        raise Unavailable(NEEDS_ADMIN)

    def set_topic_permissions(self, vhost: str, user: str, exchange: str, write: str, read: str) -> None:
        raise Unavailable(NEEDS_ADMIN)

    def alarms(self) -> frozenset[str]:
        """The resources in alarm ("memory", "disk") on any node."""
        raise Unavailable(NEEDS_ADMIN)

    def set_alarm(self, resource: str, on: bool) -> None:
        """Raise or clear a resource alarm ("memory" or "disk"), as rabbit_alarm does."""
        raise Unavailable(NEEDS_ADMIN)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (HTTP connections); the adapter is not used afterwards."""


class NoAdmin(AdminAdapter):
    """`--broker-admin none`: every call is `Unavailable`."""

    def describe(self) -> str:
        return "none"

    def _unavailable(self, *_: Any, **__: Any) -> Any:
        raise Unavailable(NEEDS_ADMIN)

    list_queues = list_exchanges = list_connections = close_connection = _unavailable
    get_policy = put_policy = delete_policy = get_global = set_global = _unavailable


class ManagementApi(AdminAdapter):
    """The RabbitMQ management HTTP API (basic auth from the URL, else the broker's user)."""

    def __init__(self, url: str, *, user: str = "guest", password: str = "guest", timeout: float = 10.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        parts = urlsplit(url)
        user = unquote(parts.username) if parts.username else user
        password = unquote(parts.password) if parts.password else password
        port = f":{parts.port}" if parts.port else ""
        self.base = f"{parts.scheme}://{parts.hostname}{port}{parts.path.rstrip('/')}"
        self._http = httpx.Client(base_url=self.base, auth=(user, password), timeout=timeout, transport=transport)

    def describe(self) -> str:
        return self.base

    def _call(self, verb: str, path: str, body: Any = None, missing_ok: bool = False, **headers: str) -> Any:
        try:
            response = self._http.request(verb, path, json=body, headers=headers or None)
        except httpx.HTTPError as exc:
            raise AdminError(f"management API {verb} {path}: {exc}") from None
        if missing_ok and response.status_code == HTTPStatus.NOT_FOUND:
            return None
        if response.status_code >= HTTPStatus.BAD_REQUEST:
            raise AdminError(f"management API {verb} {path}: HTTP {response.status_code} {response.text[:200]}")
        return response.json() if response.content else None

    def list_queues(self, vhost: str) -> list[QueueInfo]:
        rows = self._call("GET", f"/api/queues/{_q(vhost)}") or []
        return [QueueInfo(r["name"], r.get("vhost", vhost), r.get("messages"), r.get("consumers"), r.get("type"),
                          dict(r.get("arguments") or {})) for r in rows]

    def list_exchanges(self, vhost: str) -> list[str]:
        return [r["name"] for r in self._call("GET", f"/api/exchanges/{_q(vhost)}") or []]

    def list_connections(self) -> list[ConnectionInfo]:
        rows = self._call("GET", "/api/connections") or []
        return [ConnectionInfo(r["name"], r.get("user"), r.get("vhost"), r.get("peer_port"),
                               dict(r.get("client_properties") or {}), r.get("timeout")) for r in rows]

    def close_connection(self, name: str, reason: str = "closed by amqp-conformance") -> None:
        self._call("DELETE", f"/api/connections/{_q(name)}", missing_ok=True, **{"X-Reason": reason})

    def get_policy(self, vhost: str, name: str, *, operator: bool = False) -> Policy | None:
        row = self._call("GET", f"/api/{policies_path(operator)}/{_q(vhost)}/{_q(name)}", missing_ok=True)
        if row is None:
            return None
        return Policy(vhost, name, row["pattern"], dict(row.get("definition") or {}), row.get("apply-to", "all"),
                      int(row.get("priority", 0)))

    def put_policy(self, vhost: str, name: str, pattern: str, definition: dict[str, Any],
                   apply_to: str = "queues", priority: int = 0, *, operator: bool = False) -> None:
        body = {"pattern": pattern, "definition": definition, "apply-to": apply_to, "priority": priority}
        self._call("PUT", f"/api/{policies_path(operator)}/{_q(vhost)}/{_q(name)}", body)

    def delete_policy(self, vhost: str, name: str, *, operator: bool = False) -> None:
        self._call("DELETE", f"/api/{policies_path(operator)}/{_q(vhost)}/{_q(name)}", missing_ok=True)

    def get_global(self, key: str) -> GlobalValue:
        """RabbitMQ's API cannot read `consumer_timeout`; the reference broker serves it as an
        extension at /api/global-parameters/<key> (a 404 elsewhere means Unavailable)."""
        row = self._call("GET", f"/api/global-parameters/{_q(key)}", missing_ok=True)
        if not isinstance(row, dict) or "value" not in row:
            raise Unavailable(f"the management API cannot read or change {key}; use --broker-admin rabbitmqctl")
        value = row["value"]
        return value if isinstance(value, int) else None

    def set_global(self, key: str, value: GlobalValue) -> None:
        self.get_global(key)  # Unavailable where the extension is absent
        if value is None:
            raise Unavailable(f"{key} cannot be unset through the management API")
        self._call("PUT", f"/api/global-parameters/{_q(key)}", {"name": key, "value": value})

    def put_user(self, name: str, password: str, tags: str = "") -> None:
        self._call("PUT", f"/api/users/{_q(name)}", {"password": password, "tags": tags})

    def delete_user(self, name: str) -> None:
        self._call("DELETE", f"/api/users/{_q(name)}", missing_ok=True)

    def put_vhost(self, name: str) -> None:
        self._call("PUT", f"/api/vhosts/{_q(name)}", {})

    def delete_vhost(self, name: str) -> None:
        self._call("DELETE", f"/api/vhosts/{_q(name)}", missing_ok=True)

    def set_permissions(self, vhost: str, user: str, configure: str, write: str, read: str) -> None:
        self._call("PUT", f"/api/permissions/{_q(vhost)}/{_q(user)}",
                   {"configure": configure, "write": write, "read": read})

    def set_topic_permissions(self, vhost: str, user: str, exchange: str, write: str, read: str) -> None:
        self._call("PUT", f"/api/topic-permissions/{_q(vhost)}/{_q(user)}",
                   {"exchange": exchange, "write": write, "read": read})

    def alarms(self) -> frozenset[str]:
        nodes = self._call("GET", "/api/nodes") or []
        return frozenset(resource for n in nodes for resource, key in ALARM_FIELDS.items() if n.get(key))

    def set_alarm(self, resource: str, on: bool) -> None:
        """The reference broker's extension (PUT/DELETE /api/alarms/<resource>); RabbitMQ's API
        has no way to raise an alarm (its 405, or a 404, means Unavailable)."""
        path = f"/api/alarms/{_resource(resource)}"
        try:
            response = self._http.request("PUT" if on else "DELETE", path)
        except httpx.HTTPError as exc:
            raise AdminError(f"management API {path}: {exc}") from None
        if response.status_code in (HTTPStatus.NOT_FOUND, HTTPStatus.METHOD_NOT_ALLOWED):  # RabbitMQ: 405
            raise Unavailable("the management API cannot raise or clear a resource alarm; use --broker-admin "
                              "rabbitmqctl (rabbit_alarm:set_alarm and clear_alarm through `rabbitmqctl eval`)")
        if response.status_code >= HTTPStatus.BAD_REQUEST:
            raise AdminError(f"management API {path}: HTTP {response.status_code} {response.text[:200]}")

    def close(self) -> None:
        self._http.close()


def _q(segment: str) -> str:
    return quote(segment, safe="")


class Rabbitmqctl(AdminAdapter):
    """`rabbitmqctl` on this machine (or `$AMQPC_RABBITMQCTL`, e.g. "docker exec rmq rabbitmqctl")."""

    def __init__(self, command: str | None = None, timeout: float = 30.0) -> None:
        self.command = shlex.split(command or os.environ.get("AMQPC_RABBITMQCTL", "rabbitmqctl"))
        self.timeout = timeout

    def describe(self) -> str:
        return "rabbitmqctl"

    def run(self, *args: str) -> str:
        argv = [*self.command, *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        except FileNotFoundError:
            raise AdminError(f"{self.command[0]} not found") from None
        except subprocess.TimeoutExpired:
            raise AdminError(f"rabbitmqctl {args[0]}: no answer within {self.timeout:.0f} s") from None
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise AdminError(f"rabbitmqctl {args[0]} exited {done.returncode}: {lines[-1] if lines else ''}")
        return done.stdout

    def _json(self, *args: str) -> list[dict[str, Any]]:
        out = self.run(*args, "-q", "--formatter", "json")
        return list(json.loads(out)) if out.strip() else []

    def list_queues(self, vhost: str) -> list[QueueInfo]:
        rows = self._json("list_queues", "-p", vhost, "name", "messages", "consumers", "type", "arguments")
        return [QueueInfo(r["name"], vhost, r.get("messages"), r.get("consumers"), r.get("type"),
                          _table(r.get("arguments"))) for r in rows]

    def list_exchanges(self, vhost: str) -> list[str]:
        return [r["name"] for r in self._json("list_exchanges", "-p", vhost, "name")]

    def list_connections(self) -> list[ConnectionInfo]:
        rows = self._json("list_connections", "name", "user", "vhost", "peer_port", "client_properties", "timeout")
        return [ConnectionInfo(r["name"], r.get("user"), r.get("vhost"), r.get("peer_port"),
                               _table(r.get("client_properties")), r.get("timeout")) for r in rows]

    def close_connection(self, name: str, reason: str = "closed by amqp-conformance") -> None:
        # close_connection takes the connection's pid; the JSON formatter mangles pids, the tab one doesn't
        for line in self.run("list_connections", "-q", "pid", "name").splitlines():
            pid, _, listed = line.partition("\t")
            if listed == name:
                self.run("close_connection", pid, reason)
                return

    def get_policy(self, vhost: str, name: str, *, operator: bool = False) -> Policy | None:
        for r in self._json("list_operator_policies" if operator else "list_policies", "-p", vhost):
            if r["name"] == name:
                definition = r["definition"]
                return Policy(vhost, name, r["pattern"], json.loads(definition) if isinstance(definition, str)
                              else dict(definition), r.get("apply-to", "all"), int(r.get("priority", 0)))
        return None

    def put_policy(self, vhost: str, name: str, pattern: str, definition: dict[str, Any],
                   apply_to: str = "queues", priority: int = 0, *, operator: bool = False) -> None:
        self.run("set_operator_policy" if operator else "set_policy", "-p", vhost, "--priority", str(priority),
                 "--apply-to", apply_to, name, pattern, json.dumps(definition))

    def delete_policy(self, vhost: str, name: str, *, operator: bool = False) -> None:
        try:
            self.run("clear_operator_policy" if operator else "clear_policy", "-p", vhost, name)
        except AdminError as exc:
            if "does not exist" not in str(exc):
                raise

    def get_global(self, key: str) -> GlobalValue:
        out = self.run("eval", f"application:get_env(rabbit, {_atom(key)}).").strip()
        if out == "undefined":
            return None
        match = re.fullmatch(r"\{ok,\s*(.+)\}", out)
        term = match.group(1) if match else ""
        if term in ("true", "false"):
            return term == "true"
        if re.fullmatch(r"-?\d+", term):
            return int(term)
        raise AdminError(f"rabbit.{key} = {out}: not an integer or a boolean")

    def set_global(self, key: str, value: GlobalValue) -> None:
        if value is None:
            self.run("eval", f"application:unset_env(rabbit, {_atom(key)}).")
            return
        if not isinstance(value, int):  # bool is an int
            raise TypeError(f"rabbit.{key}: an integer or a boolean, not {value!r}")
        term = str(value).lower() if isinstance(value, bool) else str(value)
        self.run("eval", f"application:set_env(rabbit, {_atom(key)}, {term}).")


    def put_user(self, name: str, password: str, tags: str = "") -> None:
        self.run("add_user", name, password)  # never in describe() nor in an error (run names args[0] only)
        if tags:
            self.run("set_user_tags", name, *tags.split(","))

    def delete_user(self, name: str) -> None:
        self._missing_ok("delete_user", name)

    def put_vhost(self, name: str) -> None:
        self.run("add_vhost", name)

    def delete_vhost(self, name: str) -> None:
        self._missing_ok("delete_vhost", name)

    def set_permissions(self, vhost: str, user: str, configure: str, write: str, read: str) -> None:
        self.run("set_permissions", "-p", vhost, user, configure, write, read)

    def set_topic_permissions(self, vhost: str, user: str, exchange: str, write: str, read: str) -> None:
        self.run("set_topic_permissions", "-p", vhost, user, exchange, write, read)

    def alarms(self) -> frozenset[str]:
        """rabbit_alarm:get_alarms() on the node rabbitmqctl reaches (alarms are cluster-wide)."""
        out = self.run("eval", "rabbit_alarm:get_alarms().")
        return frozenset(re.findall(r"resource_limit,\s*(memory|disk)", out))

    def set_alarm(self, resource: str, on: bool) -> None:
        """rabbit_alarm:set_alarm / clear_alarm, the calls the memory and disk monitors make (and
        RabbitMQ's own client test suites use): the alarm stays until cleared, whatever the
        watermarks say. Both are `gen_event:notify` (asynchronous, 3.10.8 to 4.3), so the same eval
        then calls `get_alarms()`, a `gen_event:call` queued behind the notify: when it returns, the
        handler has sent every local connection its `conserve_resources` message (rabbit_alarm
        maybe_alert -> alert_local), and a publish sent afterwards reaches each reader behind it.
        Without it a publish could beat the alarm, go through, and never be blocked."""
        alarm = f"{{resource_limit, {_resource(resource)}, node()}}"
        change = f"rabbit_alarm:set_alarm({{{alarm}, []}})" if on else f"rabbit_alarm:clear_alarm({alarm})"
        self.run("eval", f"{change}, rabbit_alarm:get_alarms().")

    def _missing_ok(self, *args: str) -> None:
        try:
            self.run(*args)
        except AdminError as exc:
            if "does not exist" not in str(exc) and "no_such" not in str(exc):
                raise


def _resource(resource: str) -> str:
    if resource not in ALARM_FIELDS:
        raise ValueError(f"not a resource: {resource!r} (memory or disk)")
    return resource


def _atom(key: str) -> str:
    if not _ATOM.fullmatch(key):
        raise ValueError(f"not a setting name: {key!r}")
    return key


def _table(value: Any) -> dict[str, Any]:
    """rabbitmqctl's JSON field table ([[key, type, value], ...]) as a dict."""
    if isinstance(value, dict):
        return value
    table: dict[str, Any] = {}
    for entry in value or []:
        if isinstance(entry, list) and len(entry) == 3:
            key, kind, item = entry
            table[str(key)] = _table(item) if kind == "table" else item
    return table


def parse_admin(spec: str, broker_url: str, timeout: float = 10.0) -> AdminAdapter:
    """The adapter for a `--broker-admin` value; ValueError (a usage error) for anything else."""
    if spec in ("", "none"):
        return NoAdmin()
    if spec == "rabbitmqctl":
        return Rabbitmqctl(timeout=max(timeout, 30.0))
    parts = urlsplit(spec)
    if parts.scheme in ("http", "https") and parts.hostname:
        broker = BrokerAddress.parse(broker_url) if broker_url else None
        user, password = (broker.user, broker.password) if broker else ("guest", "guest")
        return ManagementApi(spec, user=user, password=password, timeout=timeout)
    raise ValueError(f"--broker-admin must be 'none', 'rabbitmqctl' or an http(s):// URL, not {spec!r}")


def policies_path(operator: bool) -> str:
    """The management API's path segment (and, singular, the word) for policies or operator policies."""
    return "operator-policies" if operator else "policies"
