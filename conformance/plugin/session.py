"""The plugin's session state and the objects its fixtures hand to tests.

`Harness` is the session state (kept in `config.stash` by hooks.py); `Target` is the broker
under test (the `target` fixture); `Names` makes the unique "amqpc." names a test declares
(the `names` fixture), deleted at teardown.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from conformance.catalogue.profiles import Profile
from conformance.drivers.raw import BrokerAddress
from conformance.plugin.health import HealthProbe, LeakReport, NameRegistry
from conformance.plugin.watchdog import Watchdog
from conformance.results.parts import ResultsWriter
from conformance.results.records import RunRecord
from conformance.results.verdicts import Verdict
from conformance.run.admin import AdminAdapter
from conformance.run.config import RunConfig
from conformance.run.janitor import Janitor
from conformance.run.nodes import ClusterSpec


@dataclass
class Target:
    url: str
    base_profile: Profile  # the broker's profile; `profile` is the running test's view of it
    timeout_scale: float
    admin: str
    client: str
    embedded: Any = None
    profile: Profile = field(init=False)

    def __post_init__(self) -> None:
        self.profile = self.base_profile

    def timeout(self, seconds: float) -> float:
        return seconds * self.timeout_scale

    @property
    def vhost(self) -> str:
        return BrokerAddress.parse(self.url).vhost



@dataclass
class Names:
    prefix: str
    queues: list[str] = field(default_factory=list)
    exchanges: list[str] = field(default_factory=list)
    registry: NameRegistry | None = None

    def queue(self, label: str = "q") -> str:
        name = f"{self.prefix}.{label}.{uuid.uuid4().hex[:8]}"
        self.queues.append(name)
        if self.registry is not None:
            self.registry.add("queue", name)
        return name

    def exchange(self, label: str = "x") -> str:
        name = f"{self.prefix}.{label}.{uuid.uuid4().hex[:8]}"
        self.exchanges.append(name)
        if self.registry is not None:
            self.registry.add("exchange", name)
        return name



@dataclass
class Harness:
    """Session state of the plugin (kept in `config.stash`)."""

    run_id: str
    admin: AdminAdapter
    writer: ResultsWriter | None = None
    run: RunRecord | None = None
    target: Target | None = None
    probe: HealthProbe | None = None
    down: str | None = None  # why the broker counts as wedged/unreachable
    stuck: str | None = None  # the watchdog interrupted the running test (why), not yet judged
    names: NameRegistry = field(default_factory=NameRegistry)
    counts: Counter[tuple[str, Verdict]] = field(default_factory=Counter)
    broken: list[tuple[str, str]] = field(default_factory=list)
    leaks: LeakReport | None = None
    allure: bool = False
    worker: bool = False  # a pytest-xdist worker: the controller writes the run record
    remote_tests: int = 0  # test records written by pytest-xdist workers
    watchdog: Watchdog | None = None
    janitor: Janitor | None = None  # undoes what a killed run left on the broker (the controller's)
    cluster: ClusterSpec | None = None  # the broker's cluster (--cluster-node, --node-control)
    embedded_cluster: bool = False  # --cluster-node embedded: the embedded broker starts as a cluster
    config: RunConfig = field(default_factory=RunConfig)  # what the run is asked to do (conformance.run.config)
    run_baseline: Callable[[], str | None] | None = None  # GivenRun's: asked once, when the run record is written


@dataclass(frozen=True, eq=False)  # hashed by identity: pytest keeps its plugins in sets
class GivenRun:
    """`amqp-conformance run` hands its run configuration (validated, the broker probed) to the
    plugin as this object among pytest's plugins: the plugin parses and probes nothing again."""

    config: RunConfig
    run_baseline: Callable[[], str | None] | None = None  # the baseline judgement the run record keeps (JSON)


HARNESS = pytest.StashKey[Harness]()


def harness(config: pytest.Config) -> Harness:
    """The session state of the plugin."""
    return config.stash[HARNESS]
