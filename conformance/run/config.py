"""A run's configuration, typed, validated once and shared by every process of the run.

Responsibility: `RunConfig` holds what a run is asked to do (the values of `conformance.run.options`)
with the broker URL parsed, the admin, cluster and selection checked, and, once the run's one probe
of the broker answered, the broker's server-properties. `from_values` builds it from any source of
option values (the front door's argparse namespace, the pytest plugin's own options); `to_plain` and
`from_plain` carry it to pytest-xdist workers without parsing anything again.

Rules:
- Every bad value is a `ConfigError` with one line naming the option (a usage error, exit status 4),
  found before the broker or pytest starts: a bad URL, profile, capability, client, admin, selector,
  timeout scale, budget, run id, cluster node or node control.
- The URL is parsed once, here (`address`); the run's processes take the parsed address.
- The broker is probed once per run, by whoever starts the run (the gate, or the pytest plugin's
  controller); `probed` records what it answered, and `judged_by` resolves the profile from it.
- Nothing here imports pytest or connects anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from typing import Any

from conformance.catalogue.profiles import NEWEST, Profile, ProfileError, check_choice, resolve
from conformance.catalogue.selection import Selection, parse_selection
from conformance.drivers.address import BrokerAddress
from conformance.drivers.registry import suite_clients
from conformance.run.admin import parse_admin
from conformance.run.nodes import ClusterSpec, parse_cluster, wants_embedded
from conformance.run.options import RUN_OPTIONS

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class ConfigError(ValueError):
    """A bad option value: one line, a usage error."""


@dataclass(frozen=True)
class RunConfig:
    broker_url: str | None = None  # None: the embedded reference broker
    profile: str = "auto"
    capability: tuple[str, ...] = ()  # declared beyond what the broker advertises
    extension_profile: str = NEWEST
    client: str = "raw"
    broker_admin: str | None = None  # None: none (the embedded broker's own API when it is the target)
    select: tuple[str, ...] = ()
    timeout_scale: float = 1.0
    test_timeout: float | None = None  # None: the watchdog's default
    run_timeout: float | None = None
    run_id: str | None = None
    cluster_node: tuple[str, ...] = ()  # the other nodes, or ("embedded",)
    node_control: str | None = None
    address: BrokerAddress | None = None  # broker_url, parsed
    server_properties: Mapping[str, Any] | None = None  # the broker's answer to the run's one probe

    @cached_property
    def selection(self) -> Selection:
        return parse_selection(self.select)

    @cached_property
    def cluster(self) -> ClusterSpec | None:
        return parse_cluster(self.broker_url, self.cluster_node, self.node_control)

    @property
    def embedded_cluster(self) -> bool:
        return wants_embedded(self.cluster_node)

    def timeout(self, seconds: float) -> float:
        return seconds * self.timeout_scale

    def targeting(self, url: str, admin: str | None, cluster: ClusterSpec | None) -> RunConfig:
        """The same run aimed at a broker the run started itself (the embedded one): its URL, admin, nodes."""
        nodes, control = ((tuple(cluster.urls[1:]), cluster.control) if cluster is not None
                          else (self.cluster_node if not self.embedded_cluster else (), self.node_control))
        return replace(self, broker_url=url, address=BrokerAddress.parse(url), broker_admin=admin,
                       cluster_node=nodes, node_control=control)

    def probed(self, server_properties: Mapping[str, Any]) -> RunConfig:
        return replace(self, server_properties=dict(server_properties))

    def judged_by(self) -> Profile:
        """The profile the run judges by: the choice, resolved with the probe's server-properties."""
        return resolve(self.profile, self.server_properties or {}, self.capability, self.extension_profile)

    def to_plain(self) -> dict[str, Any]:
        value = asdict(self)
        value["server_properties"] = _plain(self.server_properties)
        return value

    @classmethod
    def from_plain(cls, value: Mapping[str, Any]) -> RunConfig:
        data = dict(value)
        for key in ("capability", "select", "cluster_node"):
            data[key] = tuple(data.get(key) or ())
        if data.get("address") is not None:
            data["address"] = BrokerAddress(**data["address"])
        return cls(**data)


def _plain(value: Any) -> Any:
    """Server-properties as plain types (field tables are dicts; bytes become text)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return value


DESTS = tuple(option.flag[2:].replace("-", "_") for option in RUN_OPTIONS)


def from_values(get: Callable[[str], Any]) -> RunConfig:
    """The run's configuration from `get(dest)` of every run option, validated (`ConfigError`)."""
    values = {dest: get(dest) for dest in DESTS}
    for key in ("capability", "select", "cluster_node"):
        values[key] = tuple(values[key] or ())
    values["broker_url"] = values["broker_url"] or None
    config = RunConfig(**values)
    return replace(config, address=validate(config))


def validate(config: RunConfig) -> BrokerAddress | None:
    """Check every value (ConfigError, one line, on the first bad one); the parsed URL."""
    try:
        address = BrokerAddress.parse(config.broker_url) if config.broker_url else None
        if config.broker_admin:
            parse_admin(config.broker_admin, config.broker_url or "")
        config.selection  # noqa: B018  (parsing is the check)
        config.cluster  # noqa: B018
        check_choice(config.profile, config.capability, config.extension_profile)
    except (ValueError, ProfileError) as exc:
        raise ConfigError(str(exc)) from None
    if config.client not in suite_clients():
        raise ConfigError(f"--client {config.client!r}: one of {', '.join(suite_clients())}")
    if not config.timeout_scale > 0:
        raise ConfigError("--timeout-scale must be a positive number")
    for name, budget in (("--test-timeout", config.test_timeout), ("--run-timeout", config.run_timeout)):
        if budget is not None and not budget >= 0:
            raise ConfigError(f"{name} must be a number of seconds >= 0 (0 = no limit)")
    if config.run_id is not None and not RUN_ID.fullmatch(config.run_id):
        raise ConfigError(f"--run-id {config.run_id!r}: letters, digits, '.', '_' and '-' only")
    return address
