"""The fixtures of the plugin (loaded with hooks.py through its `pytest_plugins`).

- `target` (session): the broker under test (url, profile, timeout scale, admin); without
  `--broker-url` an embedded reference broker starts on a free port for the session (as a
  cluster of 3 nodes with `--cluster-node embedded`, its node control the session's cluster). If the
  broker does not answer, the broker is down (exit 3): a single process ends the run there
  (nothing ran yet); a pytest-xdist worker makes each of its broker tests `broken` instead.
- `connect`: a factory of connected `RawClient`s sharing the test's frame `recorder` (the
  target's URL, or another user's or vhost's given as `url`), closed at teardown; `names`: unique "amqpc." names, whose queues and exchanges are deleted at
  teardown; `admin`: the `--broker-admin` adapter, every change undone at teardown.
- `broker_nodes` (session): how many nodes the broker's cluster has, as `--broker-admin` lists
  them (None without an admin, or when it cannot tell); read once per process, changes nothing.
- `_rules_apply` (autouse): runs a rule test under the profile its rules are judged by, and
  skips it as not-applicable or not-claimed when none of its rules applies.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from codec import ExchangeDelete, ExchangeDeleteOk, QueueDelete, QueueDeleteOk
from conformance.catalogue.profiles import resolve
from conformance.drivers.raw import ChannelClosed, DriverError, RawClient, Recorder
from conformance.plugin.classify import BROKEN_PREFIX
from conformance.plugin.distributed import EXCLUSIVE, LOCK_WAIT, RELEASE
from conformance.plugin.health import PREFIX, HealthProbe, close_quietly, connect_failure, find_leaks
from conformance.plugin.schedule import BROKER_WIDE
from conformance.plugin.session import Names, Target, harness
from conformance.plugin.verdicts import skip_unless_applies
from conformance.plugin.watchdog import Watchdog
from conformance.results.records import redact_url
from conformance.results.verdicts import EXIT_UNREACHABLE, HarnessError
from conformance.run.admin import AdminError, Unavailable, parse_admin
from conformance.run.nodes import EMBEDDED_NODES, cluster_urls, embedded_cluster
from conformance.run.restoring import Ledger, RestoringAdmin


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    config = request.config
    state = harness(config)
    run = state.config
    url, admin, embedded = run.broker_url, run.broker_admin or "none", None
    if not url:
        # imported here: a worker given a URL (every worker of `amqp-conformance run`) never loads the broker
        from conformance.embedded import start as start_embedded

        embedded = start_embedded(management_port=0, **({"nodes": EMBEDDED_NODES} if state.embedded_cluster else {}))
        url = embedded.url
        if state.embedded_cluster:
            state.cluster = embedded_cluster(embedded)
        if admin == "none" and embedded.management_url:
            state.admin = parse_admin(embedded.management_url, url)  # the embedded broker's own API
    props = run.server_properties if embedded is None else None  # the run's one probe, when it was made
    if props is None:
        try:
            with RawClient(url, timeout=run.timeout(5.0)) as probe:
                props = probe.server_properties
        except (OSError, DriverError) as exc:
            if embedded is not None:
                embedded.stop()
            state.down = connect_failure(redact_url(url), exc)
            if not state.worker:  # the run's first connection: nothing ran yet, the run ends here
                pytest.exit(state.down, returncode=EXIT_UNREACHABLE)
            # a pytest-xdist worker joins a run under way (another worker may have wedged the broker):
            # an exit here would lose its tests (xdist cannot reschedule them); each gets `broken`
            pytest.skip(BROKEN_PREFIX + state.down)
    profile = resolve(run.profile, props, run.capability, run.extension_profile)
    made = Target(url, profile, run.timeout_scale, admin, run.client, embedded)
    state.target, state.probe = made, HealthProbe(url, made.timeout(5.0))
    if state.run is not None:
        state.run.product, state.run.version = str(props.get("product", "")), str(props.get("version", ""))
        # the base names the profile (baselines and reports key on it); the detail says what it claims
        state.run.profile = profile.base
        state.run.profile_detail = "\n".join([f"judged as {profile.display}", *profile.explain()])
        if embedded is not None:
            state.run.broker_url = f"embedded {redact_url(url)}"
            state.run.cluster_nodes = cluster_urls(state.cluster)
    yield made
    close_quietly(state.probe)
    if state.down is None:
        adapter = None if state.admin.describe() == "none" else state.admin
        state.leaks = find_leaks(url, made.vhost, state.names, adapter, made.timeout(5.0))
    if embedded is not None:
        embedded.stop()


@pytest.fixture(autouse=True)
def _rules_apply(request: pytest.FixtureRequest) -> Iterator[None]:
    """Run the test under the profile its rules are judged by; skip it as not-applicable or
    not-claimed when none of its rules applies."""
    marker = request.node.get_closest_marker("rules")
    if marker is None or "target" not in request.fixturenames:
        yield
        return
    made: Target = request.getfixturevalue("target")
    made.profile = made.base_profile.for_rules(marker.args)
    try:
        skip_unless_applies(made.profile, marker.args)
        yield
    finally:
        made.profile = made.base_profile


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def connect(target: Target, recorder: Recorder, names: Names,
            request: pytest.FixtureRequest) -> Iterator[Callable[..., RawClient]]:
    clients: list[RawClient] = []

    def make(url: str | None = None, **kwargs: Any) -> RawClient:
        """A connected client (as another user or vhost with `url`, conformance.suite.steps.access)."""
        kwargs.setdefault("timeout", target.timeout(5.0))
        client = RawClient(url or target.url, recorder=recorder, **kwargs)
        clients.append(client)
        return client.connect()

    yield make
    down = harness(request.config).down is not None
    for client in clients:
        if down and client.sock is not None:  # no polite close with a broker that does not answer
            client.sock.close()
            client.sock = None
        client.close()


@pytest.fixture
def names(target: Target, request: pytest.FixtureRequest) -> Iterator[Names]:
    state = harness(request.config)
    made = Names(f"{PREFIX}{request.node.name[:40]}", registry=state.names)
    yield made
    if not (made.queues or made.exchanges) or state.down is not None:
        return
    deletes: list[tuple[str, str, Any, type]] = [
        *(("queue", q, QueueDelete(queue=q), QueueDeleteOk) for q in made.queues),
        *(("exchange", x, ExchangeDelete(exchange=x), ExchangeDeleteOk) for x in made.exchanges)]
    with contextlib.suppress(OSError, DriverError), RawClient(target.url, timeout=target.timeout(5.0)) as c:
        ch = c.channel()
        for kind, name, method, reply in deletes:
            try:
                c.rpc(ch, method, reply)
                state.names.deleted(kind, name)
            except ChannelClosed:
                ch = c.channel()


@pytest.fixture(scope="session")
def broker_nodes(target: Target, request: pytest.FixtureRequest) -> int | None:
    """The number of nodes `--broker-admin` lists (GET /api/nodes, or rabbitmqctl), None when unknown."""
    try:
        return len(harness(request.config).admin.node_names()) or None
    except (Unavailable, AdminError):
        return None


@pytest.fixture
def admin(target: Target, request: pytest.FixtureRequest) -> Iterator[RestoringAdmin]:
    """The `--broker-admin` adapter for one test; its changes are undone at teardown. A broker-wide
    change goes through `broker_wide_claim`."""
    state = harness(request.config)
    view = RestoringAdmin(state.admin, target.vhost, broker_wide_claim(request.node, state.watchdog),
                          Ledger.for_process(), broker_wide_release(request.node))
    yield view
    view.restore()


def broker_wide_release(item: Any) -> Callable[[], None]:
    """What `RestoringAdmin.end_broker_wide` calls: across xdist workers, the test lets go of its
    lock (conformance.plugin.distributed); otherwise nothing."""

    def release() -> None:
        let_go = item.stash.get(RELEASE, None)
        if let_go is not None:
            let_go()

    return release


def broker_wide_claim(item: Any, watchdog: Watchdog | None) -> Callable[[], None]:
    """What a test's first broker-wide change calls: a harness error unless the test is marked
    `broker_wide`; across xdist workers, its lock made exclusive (conformance.plugin.distributed),
    the wait left out of its duration and its watchdog deadline."""

    def claim() -> None:
        if item.get_closest_marker(BROKER_WIDE) is None:
            raise HarnessError(f"{item.nodeid} changes a broker-wide setting but is not marked "
                               f"@pytest.mark.{BROKER_WIDE}: other tests would run beside it")
        upgrade = item.stash.get(EXCLUSIVE, None)
        if upgrade is None:
            return
        start = time.monotonic()
        upgrade()
        waited = time.monotonic() - start  # other tests' time, not this test's nor the broker's
        item.stash[LOCK_WAIT] = item.stash.get(LOCK_WAIT, 0.0) + waited
        if watchdog is not None:
            watchdog.extend(waited)

    return claim
