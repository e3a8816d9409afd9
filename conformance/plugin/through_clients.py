"""The suite through client libraries: `--client NAME`, any library of the client registry.

Responsibility: the `client` fixture (a factory of `ClientDriver`s of the chosen library,
connected to the broker through `recording_relay`, so the test's frames are recorded as with
the raw driver), and the rules that decide which tests run through a client. A Python library
runs in process; any other through its adapter program (conformance.drivers.suite_client),
checked and built once at the start of the session.

Rules:
- A test runs through a client library only if it says so: `@pytest.mark.clients(*names)`
  names the libraries that can express it (`why=`: the reason for the others, one text or one
  per library). Under `--client X`, every other rule test is `not-applicable` with the reason,
  never run through the raw driver in X's name.
- An operation the library cannot express (the driver raises `Unsupported`: nothing was sent)
  makes the test `not-applicable` with the library's reason, never `failed` nor `broken`.
- A library that cannot run here (not installed, its adapter does not build or start) makes its
  tests `broken` with one line naming what to install: the environment, not the broker.
- Tests marked `clients` need a library: under `--client raw` (the default) they are not
  collected, so the raw run is the suite it always was.
- The library's own client-properties reach the broker unchanged (the relay copies bytes).
- A connection the broker closes during the library's handshake makes the test `broken`, with the
  broker's close: the tests through a library judge what happens on an open connection, the
  handshake is the raw suite's (connection, access). php-amqplib, say, logs in with AMQPLAIN
  whatever the broker offers, and GarageMQ offers PLAIN only (docs/findings-clients.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from urllib.parse import urlparse, urlunparse

import pytest

from conformance.drivers.build import BuildFailed
from conformance.drivers.interface import ClientDriver, ConnectionClosed, DriverError, Recorder, Unsupported
from conformance.drivers.raw import BrokerAddress
from conformance.drivers.registry import ClientUnavailable
from conformance.drivers.relay import recording_relay
from conformance.drivers.remote import AdapterError
from conformance.drivers.suite_client import open_client, prepare
from conformance.plugin.session import Target, harness
from conformance.plugin.verdicts import not_applicable
from conformance.results.records import RAW_CLIENT
from conformance.results.verdicts import HarnessError

RAW = RAW_CLIENT
UNUSABLE = pytest.StashKey[str]()  # why the chosen library cannot run here
CANNOT_RUN = (ClientUnavailable, BuildFailed, AdapterError)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clients(*names): the client libraries that can express this test")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Check the chosen library and build its adapter once, before the first test."""
    client = harness(session.config).config.client
    if client == RAW or session.config.option.collectonly:
        return
    try:
        prepare(client)
    except CANNOT_RUN as exc:
        session.config.stash[UNUSABLE] = f"--client {client} cannot run here: {exc}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if harness(config).config.client != RAW:
        return
    library_only = [item for item in items if item.get_closest_marker("clients") is not None]
    if library_only:
        config.hook.pytest_deselected(items=library_only)
        items[:] = [item for item in items if item.get_closest_marker("clients") is None]


def relayed(url: str, port: int) -> str:
    """`url` with its host and port replaced by the relay's."""
    parts = urlparse(url)
    credentials = parts.netloc.rpartition("@")[0]
    return urlunparse(parts._replace(netloc=f"{credentials}@127.0.0.1:{port}" if credentials else f"127.0.0.1:{port}"))


@pytest.fixture(autouse=True)
def _client_applies(request: pytest.FixtureRequest) -> None:
    """Under `--client X`, only tests that X can express run; the rest are not-applicable."""
    client = harness(request.config).config.client
    if client == RAW or request.node.get_closest_marker("rules") is None:
        return
    marker = request.node.get_closest_marker("clients")
    if marker is None:
        not_applicable(f"{client}: this check drives the wire through the raw codec client "
                       "(frames or timings a client library does not let an application send)")
    if client not in marker.args:
        why = marker.kwargs.get("why", "not in its API")
        not_applicable(f"{client} cannot express this check: {why.get(client, 'not in its API') if isinstance(why, dict) else why}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """An operation the library cannot express ends the test as not-applicable, with its reason."""
    try:
        return (yield)
    except Unsupported as exc:
        client = harness(item.config).config.client
        not_applicable(f"{client} cannot express a step of this check: {exc}")


@pytest.fixture
def client(request: pytest.FixtureRequest, target: Target,
           recorder: Recorder) -> Iterator[Callable[[], ClientDriver]]:
    """A factory of connected drivers of `--client`'s library, each through the recording relay."""
    unusable = request.config.stash.get(UNUSABLE, None)
    if unusable is not None:
        raise HarnessError(unusable)
    address = BrokerAddress.parse(target.url)
    drivers: list[ClientDriver] = []
    with recording_relay(address.host, address.port, recorder, timeout=target.timeout(5.0)) as relay:
        url = relayed(target.url, relay.port)

        def make() -> ClientDriver:
            try:
                driver = open_client(target.client, target.timeout(5.0))
            except CANNOT_RUN as exc:
                raise HarnessError(f"--client {target.client} cannot run here: {exc}") from None
            drivers.append(driver)  # closed at the end even when its connect fails
            try:
                driver.connect(url)
            except ConnectionClosed as exc:
                raise HarnessError(
                    f"{target.client} could not open a connection: the broker closed it during the handshake "
                    f"({exc}); this check needs an open connection, so it judged nothing (the handshake is "
                    "judged by the raw suite)") from None
            return driver

        yield make
        for driver in drivers:
            with contextlib.suppress(DriverError, OSError):
                driver.close()
