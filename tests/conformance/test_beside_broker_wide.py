"""A test marked `beside_broker_wide` runs beside the broker-wide ones (conformance/plugin/schedule.py):
shown on brokers, not only argued from RabbitMQ's source.

Every other test so marked (a handshake, a refused login, heartbeats, a connection closed by its
client: none publishes or consumes) is run as the suite runs it, with `--broker-url`, while a
memory alarm and a 1 ms global consumer timeout are in force: each ends as it does without them
(RabbitMQ 4.3.6's two known FRM-01/FRM-02 failures included), and a publisher beside them is
blocked (the alarm was in force). The reference broker in `make
test`, RabbitMQ 4.3.6 in `make test-rabbitmq43`.

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
import re
import subprocess
import sys
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
from conformance import SUITE_DIR
from conformance.drivers.raw import RawClient
from conformance.run.admin import AdminAdapter, Rabbitmqctl, parse_admin
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.wire import socket_end
from reference_broker.server import EmbeddedBroker
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
RMQ43_URL = os.environ.get("AMQPC_RMQ43_URL", "amqp://guest:guest@127.0.0.1:5743/")
RMQ43_ADMIN = os.environ.get("AMQPC_RMQ43_ADMIN", "http://guest:guest@127.0.0.1:15743")
BESIDE_TESTS = 10  # the suite's tests marked beside_broker_wide, but the 30 s one
QUIET = 2.0  # seconds the closed connection is watched while the alarm and the timeout are in force


LONGEST = "test_after_a_client_close_without_heartbeats_the_socket_ends_after_30_s"  # shown above, 30 s


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
    nothing_reaches_a_closed_connection(RMQ43_URL, rabbitmq43_ctl())


def rabbitmq43_ctl() -> Rabbitmqctl:
    ctl = Rabbitmqctl(f"{ROOT}/scripts/rabbitmq4.sh ctl 4.3")
    try:
        ctl.alarms()
    except Exception as exc:  # the node or its chroot is absent
        require(False, f"RabbitMQ 4.3.6 from scripts/rabbitmq4.sh ({exc})")
    return ctl


def run_beside(url: str, admin: str) -> dict[str, str]:
    """The suite's `beside_broker_wide` tests (but the 30 s one) through pytest against `url`: each
    test's outcome (PASSED, FAILED, ...)."""
    done = subprocess.run([sys.executable, "-m", "pytest", str(SUITE_DIR), "-m", "beside_broker_wide", "-k",
                           f"not {LONGEST}", "--broker-url", url, "--broker-admin", admin, "-p", "no:cacheprovider",
                           "-o", "addopts=", "-q", "-rA", "--tb=line"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    found = {nodeid: outcome for outcome, nodeid in re.findall(r"^([A-Z]+) (conformance/suite/\S+)", done.stdout,
                                                                flags=re.MULTILINE)}
    assert len(found) == BESIDE_TESTS, (done.stdout[-6000:], done.stderr[-2000:])
    return found


def same_under_broker_wide_changes(url: str, adapter: AdminAdapter, admin: str) -> None:
    """Each marked test's outcome is the same while a memory alarm and a 1 ms global consumer timeout
    are in force (a publisher beside the tests is blocked: the alarm was) as without them."""
    without = run_beside(url, admin)
    publisher = RawClient(url).connect()
    ch = publisher.channel()
    changes = RestoringAdmin(adapter)
    try:
        changes.set_global("consumer_timeout", 1)
        changes.set_alarm("memory", True)
        publisher.send_raw(encode_content(ch, BasicPublish(routing_key="amqpc.beside.nowhere"), body=b"x"))
        assert isinstance(publisher.expect(0, ConnectionBlocked, timeout=5.0).method, ConnectionBlocked)
        under = run_beside(url, admin)
    finally:
        changes.restore()
        publisher.close()
    assert under == without, {t: (without.get(t), under.get(t)) for t in sorted(set(under) | set(without))
                              if under.get(t) != without.get(t)}
    assert "PASSED" in under.values()


def test_the_tests_beside_broker_wide_ones_judge_the_same_under_an_alarm_and_a_1_ms_timeout_on_the_reference_broker(
        ) -> None:
    broker = EmbeddedBroker(management_port=0).start()
    try:
        assert broker.management_url is not None
        same_under_broker_wide_changes(broker.url, parse_admin(broker.management_url, broker.url),
                                       broker.management_url)
    finally:
        broker.stop()


@pytest.mark.rabbitmq43
def test_the_tests_beside_broker_wide_ones_judge_the_same_under_an_alarm_and_a_1_ms_timeout_on_rabbitmq_4_3() -> None:
    same_under_broker_wide_changes(RMQ43_URL, rabbitmq43_ctl(), RMQ43_ADMIN)
