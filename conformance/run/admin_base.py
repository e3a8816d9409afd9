"""The admin interface: what every admin adapter offers, and the adapter of a run without one.

Responsibility: `AdminAdapter` (the interface of conformance.run.admin's module rules), the
records it returns (`QueueInfo`, `ConnectionInfo`, `Policy`), its errors (`Unavailable`,
`AdminError`) and `NoAdmin`; the adapters themselves are `admin.ManagementApi` and
`admin_ctl.Rabbitmqctl`, and `admin.parse_admin` picks one. Importers use conformance.run.admin,
which re-exports these names.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from conformance.results.verdicts import HarnessError

GlobalValue = int | bool | None
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

    def node_names(self) -> list[str]:
        """Every node of the broker's cluster, running or not (one name for a single node)."""
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


def _resource(resource: str) -> str:
    if resource not in ALARM_FIELDS:
        raise ValueError(f"not a resource: {resource!r} (memory or disk)")
    return resource
