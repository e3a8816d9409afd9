"""The suite through client libraries: `--client pika|amqp|aio-pika`.

Responsibility: the `client` fixture (a factory of `ClientDriver`s of the chosen library,
connected to the broker through `recording_relay`, so the test's frames are recorded as with
the raw driver), and the rule that decides which tests run through a client.

Rules:
- A test runs through a client library only if it says so: `@pytest.mark.clients(*names)`
  names the libraries that can express it. Under `--client X`, every other rule test is
  `not-applicable` with the reason, never run through the raw driver in X's name.
- Tests marked `clients` need a library: under `--client raw` (the default) they are not
  collected, so the raw run is the suite it always was.
- The library's own client-properties reach the broker unchanged (the relay copies bytes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from urllib.parse import urlparse, urlunparse

import pytest

from conformance.drivers.adapter import load_driver
from conformance.drivers.interface import ClientDriver, DriverError, Recorder
from conformance.drivers.raw import BrokerAddress
from conformance.drivers.relay import recording_relay
from conformance.plugin.session import Target, harness
from conformance.plugin.verdicts import not_applicable
from conformance.results.records import RAW_CLIENT

RAW = RAW_CLIENT


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clients(*names): the client libraries that can express this test")


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
        not_applicable(f"{client} cannot express this check: {marker.kwargs.get('why', 'not in its API')}")


@pytest.fixture
def client(target: Target, recorder: Recorder) -> Iterator[Callable[[], ClientDriver]]:
    """A factory of connected drivers of `--client`'s library, each through the recording relay."""
    address = BrokerAddress.parse(target.url)
    drivers: list[ClientDriver] = []
    with recording_relay(address.host, address.port, recorder, timeout=target.timeout(5.0)) as relay:
        url = relayed(target.url, relay.port)

        def make() -> ClientDriver:
            driver: ClientDriver = load_driver(target.client, target.timeout(5.0))
            driver.connect(url)
            drivers.append(driver)
            return driver

        yield make
        for driver in drivers:
            with contextlib.suppress(DriverError, OSError):
                driver.close()
