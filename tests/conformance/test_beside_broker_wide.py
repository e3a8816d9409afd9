"""A test marked `beside_broker_wide` runs beside the broker-wide ones (conformance/plugin/schedule.py):
shown on brokers, not only argued from RabbitMQ's source.

The one such test, NET-02.c (conformance/suite/framing/test_framing.py), holds a connection the
client closed (connection.close, close-ok) with heartbeats off for 30 s; beside it a broker-wide
test may raise a resource alarm or set the global consumer timeout. Here both are changed while
such a connection waits: nothing reaches it (no frame, no end of its socket), while a connection
that publishes beside it is blocked (the alarm was in force). The reference broker in `make test`;
RabbitMQ 4.3.6 through rabbitmqctl in `make test-rabbitmq43` (an alarm on the shared RabbitMQ
3.10.8 would block the other tests running on it; its source, like 4.0.5's, is cited at the mark).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from codec import (
    BasicPublish,
    ConnectionBlocked,
    ConnectionClose,
    ConnectionCloseOk,
    encode_content,
    encode_method,
)
from codec.constants import ReplyCode
from conformance.drivers.raw import RawClient
from conformance.run.admin import AdminAdapter, Rabbitmqctl, parse_admin
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.wire import socket_end
from reference_broker.server import EmbeddedBroker
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
RMQ43_URL = os.environ.get("AMQPC_RMQ43_URL", "amqp://guest:guest@127.0.0.1:5743/")
QUIET = 2.0  # seconds the closed connection is watched while the alarm and the timeout are in force


@pytest.fixture
def reference() -> Iterator[tuple[str, AdminAdapter]]:
    broker = EmbeddedBroker(management_port=0).start()
    try:
        assert broker.management_url is not None
        yield broker.url, parse_admin(broker.management_url, broker.url)
    finally:
        broker.stop()


def closed_by_the_client(url: str) -> RawClient:
    client = RawClient(url, heartbeat=0).connect()
    client.send_raw(encode_method(0, ConnectionClose(ReplyCode.REPLY_SUCCESS, "bye", 0, 0)))
    client.expect(0, ConnectionCloseOk, timeout=5.0)
    return client


def nothing_reaches_a_closed_connection(url: str, adapter: AdminAdapter) -> None:
    closed = closed_by_the_client(url)
    publisher = RawClient(url).connect()
    admin = RestoringAdmin(adapter)
    try:
        admin.set_global("consumer_timeout", 1)
        admin.set_alarm("memory", True)
        ch = publisher.channel()
        publisher.send_raw(encode_content(ch, BasicPublish(routing_key="amqpc.beside.nowhere"), body=b"x"))
        blocked = publisher.expect(0, ConnectionBlocked, timeout=5.0).method  # the alarm is in force
        assert isinstance(blocked, ConnectionBlocked)
        end = socket_end(closed, QUIET)
        assert end == "open", (f"a connection its client closed, watched for {QUIET} s while an alarm and a 1 ms "
                               f"global consumer timeout were in force, was {end} (nothing may reach it)")
    finally:
        admin.restore()
        publisher.close()
        if closed.sock is not None:
            closed.sock.close()
            closed.sock = None


def test_nothing_broker_wide_reaches_a_closed_connection_on_the_reference_broker(
        reference: tuple[str, AdminAdapter]) -> None:
    nothing_reaches_a_closed_connection(*reference)


@pytest.mark.rabbitmq43
def test_nothing_broker_wide_reaches_a_closed_connection_on_rabbitmq_4_3() -> None:
    ctl = Rabbitmqctl(f"{ROOT}/scripts/rabbitmq4.sh ctl 4.3")
    try:
        ctl.alarms()
    except Exception as exc:  # the node or its chroot is absent
        require(False, f"RabbitMQ 4.3.6 from scripts/rabbitmq4.sh ({exc})")
    nothing_reaches_a_closed_connection(RMQ43_URL, ctl)
