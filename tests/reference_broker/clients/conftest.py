"""Fixtures of the client loopback tests: connections per client, and `client` (each adapter)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import amqp
import pika
import pytest
from pika import exceptions as pika_exc

from reference_broker.server import EmbeddedBroker
from tests.reference_broker.clients.support import (
    CLIENTS,
)


# -- connections ---------------------------------------------------------------------------------
@pytest.fixture
def pika_connect(broker: EmbeddedBroker) -> Iterator[Callable[[], pika.BlockingConnection]]:
    opened: list[pika.BlockingConnection] = []

    def connect() -> pika.BlockingConnection:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        if conn.is_open:
            with contextlib.suppress(pika_exc.AMQPError):
                conn.close()


@pytest.fixture
def amqp_connect(broker: EmbeddedBroker) -> Iterator[Callable[..., amqp.Connection]]:
    opened: list[amqp.Connection] = []

    def connect(capabilities: dict[str, bool] | None = None, **kwargs: Any) -> amqp.Connection:
        conn = amqp.Connection(host=f"{broker.host}:{broker.port}", userid="guest", password="guest",
                               **kwargs)
        if capabilities is not None:
            conn.negotiate_capabilities = {**amqp.Connection.negotiate_capabilities, **capabilities}
        conn.connect()
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        with contextlib.suppress(Exception):
            conn.close()



@pytest.fixture(params=list(CLIENTS))
def client(request: pytest.FixtureRequest, broker: EmbeddedBroker) -> Iterator[Any]:
    c = CLIENTS[request.param](broker)
    try:
        yield c
    finally:
        c.close()

