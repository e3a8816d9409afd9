"""Fixtures for the limits and security tests: brokers with their own configuration and raw
clients over real loopback sockets.

`start_broker(**config)`: an `EmbeddedBroker` with those `BrokerConfig` keys (free port, own
event-loop thread), stopped after the test. `connect(broker, user=, password=, vhost=, ...)`:
a connected `RawClient` (conformance/drivers/raw.py), closed after the test; its other keyword
arguments go to `RawClient`. `amqp_url(broker, ...)` is the URL behind it. Every wait of the
raw driver has a deadline (`timeout`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest

from conformance.drivers.raw import RawClient
from reference_broker.server import EmbeddedBroker

StartBroker = Callable[..., EmbeddedBroker]
Connect = Callable[..., RawClient]


def amqp_url(broker: EmbeddedBroker, user: str = "guest", password: str = "guest", vhost: str = "/") -> str:
    return f"amqp://{quote(user, safe='')}:{quote(password, safe='')}@{broker.host}:{broker.port}/" \
           f"{quote(vhost, safe='')}"


@pytest.fixture
def start_broker() -> Iterator[StartBroker]:
    started: list[EmbeddedBroker] = []

    def start(**config: Any) -> EmbeddedBroker:
        broker = EmbeddedBroker(**config).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture
def connect() -> Iterator[Connect]:
    clients: list[RawClient] = []

    def open_client(broker: EmbeddedBroker, user: str = "guest", password: str = "guest", vhost: str = "/",
                    **options: Any) -> RawClient:
        client = RawClient(amqp_url(broker, user, password, vhost), **options)
        clients.append(client)
        return client.connect()

    yield open_client
    for client in clients:
        client.close()
