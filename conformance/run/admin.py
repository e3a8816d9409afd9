"""Admin adapters (docs/design.md decision 6): control of the broker outside AMQP.

Responsibility: one interface, `AdminAdapter` (queues, exchanges, connections, policies and
global application settings such as `consumer_timeout`), with three implementations chosen by
`--broker-admin` (and users, vhosts, permissions and topic permissions for the access area,
resource alarms for the alarms area):
`ManagementApi` (the RabbitMQ management HTTP API; the reference broker
serves the same paths), `Rabbitmqctl` (the CLI, each call under a timeout) and `NoAdmin`.
`conformance.run.restoring.RestoringAdmin` wraps an adapter for one test and undoes every
change at teardown. The interface and `NoAdmin` live in `admin_base`, `Rabbitmqctl` in `admin_ctl`;
this module holds `ManagementApi` and `parse_admin` and re-exports the rest (import from here).

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

from http import HTTPStatus
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx

from conformance.drivers.raw import BrokerAddress
from conformance.run.admin_base import (
    ALARM_FIELDS,
    NEEDS_ADMIN,
    AdminAdapter,
    AdminError,
    ConnectionInfo,
    GlobalValue,
    NoAdmin,
    Policy,
    QueueInfo,
    Unavailable,
    _resource,
)
from conformance.run.admin_ctl import Rabbitmqctl

HEALTH_ALARMS = "/api/health/checks/alarms"
HEALTH_RESOURCES = {"memory": "memory", "disk space": "disk"}  # rabbit_alarm:format_as_map's resource -> ours

__all__ = ["ALARM_FIELDS", "NEEDS_ADMIN", "AdminAdapter", "AdminError", "ConnectionInfo", "GlobalValue",
           "ManagementApi", "NoAdmin", "Policy", "QueueInfo", "Rabbitmqctl", "Unavailable", "parse_admin",
           "policies_path"]


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

    def _send(self, verb: str, path: str, body: Any = None, accept: tuple[int, ...] = (),
              **headers: str) -> httpx.Response:
        """The response to one request; AdminError for a transport error or an HTTP error status
        other than those in `accept` (which the caller reads itself)."""
        try:
            response = self._http.request(verb, path, json=body, headers=headers or None)
        except httpx.HTTPError as exc:
            raise AdminError(f"management API {verb} {path}: {exc}") from None
        if response.status_code >= HTTPStatus.BAD_REQUEST and response.status_code not in accept:
            raise AdminError(f"management API {verb} {path}: HTTP {response.status_code} {response.text[:200]}")
        return response

    def _call(self, verb: str, path: str, body: Any = None, missing_ok: bool = False, **headers: str) -> Any:
        response = self._send(verb, path, body, (HTTPStatus.NOT_FOUND,) if missing_ok else (), **headers)
        if response.status_code == HTTPStatus.NOT_FOUND:
            return None
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
        """GET /api/health/checks/alarms (RabbitMQ 3.8.10 on): `rabbit_alarm:get_alarms()` read when
        asked, 200 with none, 503 with {"alarms": [{"resource": "memory" | "disk space", "node"}]}.
        Not /api/nodes' `mem_alarm`: that is what rabbit_mgmt_external_stats emitted last, once
        every `collect_statistics_interval` (5 s by default), so an alarm cleared just before still
        shows there. Where the health check is missing (404: 3.8.0 to 3.8.9) /api/nodes is read."""
        response = self._send("GET", HEALTH_ALARMS, accept=(HTTPStatus.NOT_FOUND, HTTPStatus.SERVICE_UNAVAILABLE))
        if response.status_code == HTTPStatus.NOT_FOUND:
            nodes = self._call("GET", "/api/nodes") or []
            return frozenset(resource for n in nodes for resource, key in ALARM_FIELDS.items() if n.get(key))
        if response.status_code not in (HTTPStatus.OK, HTTPStatus.SERVICE_UNAVAILABLE):
            raise AdminError(f"management API GET {HEALTH_ALARMS}: HTTP {response.status_code} {response.text[:200]}")
        body = response.json() if response.content else {}
        found = {HEALTH_RESOURCES.get(str(a.get("resource"))) for a in body.get("alarms") or [] if isinstance(a, dict)}
        if response.status_code == HTTPStatus.SERVICE_UNAVAILABLE and not body.get("alarms"):
            raise AdminError(f"management API GET {HEALTH_ALARMS}: HTTP 503 without alarms: {response.text[:200]}")
        return frozenset(r for r in found if r is not None)

    def node_names(self) -> list[str]:
        return [str(n.get("name")) for n in self._call("GET", "/api/nodes") or []]

    def set_alarm(self, resource: str, on: bool) -> None:
        """The reference broker's extension (PUT/DELETE /api/alarms/<resource>); RabbitMQ's API
        has no way to raise an alarm (its 405, or a 404, means Unavailable)."""
        path = f"/api/alarms/{_resource(resource)}"
        response = self._send("PUT" if on else "DELETE", path,
                              accept=(HTTPStatus.NOT_FOUND, HTTPStatus.METHOD_NOT_ALLOWED))  # RabbitMQ: 405
        if response.status_code in (HTTPStatus.NOT_FOUND, HTTPStatus.METHOD_NOT_ALLOWED):
            raise Unavailable("the management API cannot raise or clear a resource alarm; use --broker-admin "
                              "rabbitmqctl (rabbit_alarm:set_alarm and clear_alarm through `rabbitmqctl eval`)")

    def close(self) -> None:
        self._http.close()


def _q(segment: str) -> str:
    return quote(segment, safe="")


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
