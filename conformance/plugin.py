"""The pytest plugin (entry point `amqp_conformance`): options, the broker target, fixtures.

Rules:
- `--broker-url` selects the broker; without it an embedded reference broker starts on a
  free port for the session. `--profile auto` reads server-properties (`profiles.detect`).
- Every suite test carries `@pytest.mark.rules("ID", ...)`; IDs must exist in the catalogue.
  A test whose rules are all `not-applicable` on the profile is skipped with that verdict.
- Fixtures: `target` (session: url, profile, timeout scale, admin), `connect` (factory of
  connected `RawClient`s sharing the test's frame `recorder`, closed at teardown),
  `names` (unique names; queues/exchanges named through it are deleted at teardown).
- `pytest --broker-url URL` with no paths runs the shipped suite (`conformance/suite`).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance.catalogue import PROFILES, rule
from conformance.drivers.raw import BrokerAddress, DriverError, RawClient, Recorder
from conformance.profiles import AUTO, Profile, detect

SUITE_DIR = Path(__file__).parent / "suite"
CLIENTS = ("raw", "pika", "amqp")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("amqp-conformance")
    group.addoption("--broker-url", default=os.environ.get("AMQPC_BROKER_URL"),
                    help="amqp://user:pass@host:port/vhost (default: an embedded reference broker)")
    group.addoption("--broker-admin", default="none",
                    help="management API URL (http://user:pass@host:15672), 'rabbitmqctl' or 'none'")
    group.addoption("--profile", default=AUTO, help=f"auto or one of: {', '.join(PROFILES)}")
    group.addoption("--client", default="raw", help="driver for client-parametrised tests: raw|pika|amqp")
    group.addoption("--timeout-scale", type=float, default=1.0, help="multiply every wait by this")
    group.addoption("--results-dir", default=None, help="write run/test/frame records here (Parquet)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rules(*ids): the catalogue rule IDs a test checks")
    for area in ("errors", "ack", "requeue", "qos", "confirms", "cancel", "timeout", "framing"):
        config.addinivalue_line("markers", f"{area}: conformance tests of the {area} area")
    profile = config.getoption("--profile")
    if profile != AUTO and profile not in PROFILES:
        raise pytest.UsageError(f"unknown profile {profile!r} (one of: auto, {', '.join(PROFILES)})")
    if config.getoption("--client") not in CLIENTS:
        raise pytest.UsageError(f"--client must be one of {', '.join(CLIENTS)}")
    url = config.getoption("--broker-url")
    if url:
        try:
            BrokerAddress.parse(url)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None


def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """`pytest --broker-url URL` with no paths runs the shipped suite."""
    has_url = any(a == "--broker-url" or a.startswith("--broker-url=") for a in args)
    if has_url and not _paths_given(args):
        args.append(str(SUITE_DIR))


def _paths_given(args: list[str]) -> bool:
    """True when the command line names what to collect (paths, node ids or --pyargs)."""
    if "--pyargs" in args:
        return True
    return any(not a.startswith("-") and Path(a.split("::")[0]).exists() for a in args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("rules")
        if marker is None:
            continue
        for rule_id in marker.args:
            area = rule(rule_id).area  # KeyError for an unknown ID: a harness bug
            item.add_marker(getattr(pytest.mark, area))


@dataclass
class Target:
    url: str
    profile: Profile
    timeout_scale: float
    admin: str
    client: str
    embedded: Any = None

    def timeout(self, seconds: float) -> float:
        return seconds * self.timeout_scale


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    config = request.config
    url = config.getoption("--broker-url")
    embedded = None
    if not url:
        from reference_broker.server import EmbeddedBroker

        embedded = EmbeddedBroker().start()
        url = embedded.url
    scale = config.getoption("--timeout-scale")
    try:
        with RawClient(url, timeout=5.0 * scale) as probe:
            props = probe.server_properties
    except (OSError, DriverError) as exc:
        if embedded is not None:
            embedded.stop()
        pytest.exit(f"broker unreachable at {url}: {exc}", returncode=3)
    name = config.getoption("--profile")
    profile = Profile(detect(props) if name == AUTO else name, props)
    yield Target(url, profile, scale, config.getoption("--broker-admin"), config.getoption("--client"), embedded)
    if embedded is not None:
        embedded.stop()


@pytest.fixture(autouse=True)
def _rules_apply(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("rules")
    if marker is None or "target" not in request.fixturenames:
        return
    profile: Profile = request.getfixturevalue("target").profile
    if all(profile.expect(r) == "not-applicable" for r in marker.args):
        from conformance.verdicts import not_applicable

        not_applicable(f"{', '.join(marker.args)} on {profile.name}")


@dataclass
class Session:
    """Per-test state: the frame recorder and the clients to close."""

    recorder: Recorder = field(default_factory=Recorder)
    clients: list[RawClient] = field(default_factory=list)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def connect(target: Target, recorder: Recorder) -> Iterator[Callable[..., RawClient]]:
    clients: list[RawClient] = []

    def make(**kwargs: Any) -> RawClient:
        kwargs.setdefault("timeout", target.timeout(5.0))
        client = RawClient(target.url, recorder=recorder, **kwargs).connect()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@dataclass
class Names:
    prefix: str
    queues: list[str] = field(default_factory=list)
    exchanges: list[str] = field(default_factory=list)

    def queue(self, label: str = "q") -> str:
        name = f"{self.prefix}.{label}.{uuid.uuid4().hex[:8]}"
        self.queues.append(name)
        return name

    def exchange(self, label: str = "x") -> str:
        name = f"{self.prefix}.{label}.{uuid.uuid4().hex[:8]}"
        self.exchanges.append(name)
        return name


@pytest.fixture
def names(target: Target, request: pytest.FixtureRequest) -> Iterator[Names]:
    made = Names(f"amqpc.{request.node.name[:40]}")
    yield made
    if not (made.queues or made.exchanges):
        return
    from codec import ExchangeDelete, ExchangeDeleteOk, QueueDelete, QueueDeleteOk

    with contextlib.suppress(OSError, DriverError), RawClient(target.url, timeout=target.timeout(5.0)) as c:
        ch = c.channel()
        for queue in made.queues:
            with contextlib.suppress(DriverError):
                c.rpc(ch, QueueDelete(queue=queue), QueueDeleteOk)
        for exchange in made.exchanges:
            with contextlib.suppress(DriverError):
                c.rpc(ch, ExchangeDelete(exchange=exchange), ExchangeDeleteOk)
