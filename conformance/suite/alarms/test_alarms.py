"""Resource alarms and publisher blocking over the wire: ALM-01..05 (the Java client's
server/BlockedConnection and server/MemoryAlarms).

Rules:
- Every test raises alarms through `--broker-admin` (without it: `needs-admin`), and changes
  what every connection of the broker sees: the area is `broker_wide` (it runs alone).
- A test starts on a broker with no alarm (else `broken`); its alarms are cleared at teardown
  (the `admin` fixture is requested last, so it is restored before the connections close).
- A publisher is a connection of its own that the tests only look at once it may be blocked;
  consumers are other connections that never publish.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import (
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetOk,
    ConnectionUnblocked,
    QueueDeclare,
    QueueDeclareOk,
    encode_heartbeat,
)
from conformance.drivers.raw import ConnectionClosed, ConnectionLost, RawClient
from conformance.plugin.session import Names, Target
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.alarms import (
    DISK,
    MEMORY,
    NOT_CAPABLE,
    blocked,
    clear_alarm,
    consumer,
    deliveries,
    no_alarm_at_start,
    not_blocked,
    nothing_delivered,
    publish,
    raise_alarm,
    unblocked,
)
from conformance.suite.steps.wire import sync

pytestmark = pytest.mark.broker_wide  # an alarm blocks every publisher of the broker

Connect = Callable[..., RawClient]  # the `connect` fixture


def under_memory_alarm(connect: Connect, names: Names, admin: RestoringAdmin) -> tuple[str, RawClient, int, RawClient, int]:
    """A queue with a consumer on a connection of its own (the watcher), a publisher's connection
    and channel, then the memory alarm raised: (queue, watcher, its channel, publisher, its channel)."""
    queue = names.queue("alm")
    watcher = connect()
    ch = consumer(watcher, queue)
    publisher = connect()
    pch = publisher.channel()
    no_alarm_at_start(admin)
    raise_alarm(admin, MEMORY)
    return queue, watcher, ch, publisher, pch


@pytest.mark.clauses("ALM-01.a", "ALM-01.b", "ALM-01.d", "ALM-02.a", "ALM-02.b", "ALM-03.a", "ALM-03.c", "ALM-03.d")
@pytest.mark.rules("ALM-01", "ALM-02", "ALM-03")
def test_a_publish_during_an_alarm_blocks_and_waits(connect: Connect, names: Names, target: Target,
                                                     admin: RestoringAdmin) -> None:
    """BlockedConnection.testBlock and MemoryAlarms.flowControl: the publisher is blocked with
    the reason, its message held until the alarm clears; a client without the capability is
    blocked silently."""
    queue = names.queue("alm")
    watcher = connect()
    ch = consumer(watcher, queue)
    publisher = connect()
    silent = connect(capabilities=NOT_CAPABLE)
    pch, sch = publisher.channel(), silent.channel()
    no_alarm_at_start(admin)
    raise_alarm(admin, MEMORY)
    publish(publisher, pch, queue, b"held")
    publish(silent, sch, queue, b"held-silently")
    reason = blocked(publisher, target, "a publish during a memory alarm")
    assert reason == "low on memory", f"ALM-01: the reason of a memory alarm is 'low on memory'; it said {reason!r}"
    nothing_delivered(watcher, ch, target, "ALM-02", "a blocked connection's publish is not routed while the alarm "
                      "lasts")
    not_blocked(silent, target, "ALM-01", "a client without the connection.blocked capability gets no "
                "connection.blocked")
    clear_alarm(admin, MEMORY)
    unblocked(publisher, target, "the memory alarm cleared")
    got = sorted(deliveries(watcher, ch, 2, target, "ALM-02", "once the alarm cleared, the held publishes are routed"))
    assert got == [b"held", b"held-silently"], f"ALM-02: the held publishes are delivered once the alarm clears; got {got}"
    not_blocked(silent, target, "ALM-03", "a connection never sent connection.blocked gets no connection.unblocked")
    publish(publisher, pch, queue, b"after")
    assert deliveries(watcher, ch, 1, target, "ALM-03", "once unblocked, publishing works as before") == [b"after"]


@pytest.mark.clauses("ALM-03.a", "ALM-03.b", "ALM-01.c")
@pytest.mark.rules("ALM-03", "ALM-01")
def test_overlapping_alarms_unblock_only_when_both_clear(connect: Connect, names: Names, target: Target,
                                                         admin: RestoringAdmin) -> None:
    """MemoryAlarms.overlappingAlarmsFlowControl."""
    queue, watcher, ch, publisher, pch = under_memory_alarm(connect, names, admin)
    publish(publisher, pch, queue, b"held")
    blocked(publisher, target, "a publish during a memory alarm")
    raise_alarm(admin, DISK)
    not_blocked(publisher, target, "ALM-03", "a second alarm sends no second connection.blocked to a blocked "
                "connection")
    clear_alarm(admin, MEMORY)
    not_blocked(publisher, target, "ALM-03", "with the disk alarm still in force after the memory alarm cleared, "
                "the connection stays blocked (no connection.unblocked)")
    nothing_delivered(watcher, ch, target, "ALM-03", "with the disk alarm still in force, the held publish waits")
    clear_alarm(admin, DISK)
    unblocked(publisher, target, "both alarms cleared")
    assert deliveries(watcher, ch, 1, target, "ALM-03", "both alarms cleared") == [b"held"]


@pytest.mark.clauses("ALM-01.a", "ALM-01.b", "ALM-01.e", "ALM-02.b")
@pytest.mark.rules("ALM-01", "ALM-02")
def test_a_connection_opened_during_alarms_is_blocked_at_its_first_publish(connect: Connect, names: Names,
                                                                           target: Target,
                                                                           admin: RestoringAdmin) -> None:
    """BlockedConnection.initialBlock, under both alarms (the reason names both)."""
    queue = names.queue("alm")
    watcher = connect()
    ch = consumer(watcher, queue)
    no_alarm_at_start(admin)
    raise_alarm(admin, MEMORY)
    raise_alarm(admin, DISK)
    publisher = connect()
    pch = publisher.channel()
    sync(publisher, pch)  # not a publish: the alarm alone blocks nobody
    publish(publisher, pch, queue, b"held")
    reason = blocked(publisher, target, "the first publish of a connection opened during memory and disk alarms")
    assert reason in ("low on memory & disk", "low on disk & memory"), (
        f"ALM-01: under memory and disk alarms the reason names both ('low on memory & disk'); it said {reason!r}")
    clear_alarm(admin, DISK)
    clear_alarm(admin, MEMORY)
    unblocked(publisher, target, "both alarms cleared")
    assert deliveries(watcher, ch, 1, target, "ALM-02", "both alarms cleared") == [b"held"]


@pytest.mark.clauses("ALM-04.a", "ALM-04.b", "ALM-01.f")
@pytest.mark.rules("ALM-04", "ALM-01")
def test_connections_that_do_not_publish_keep_working(connect: Connect, names: Names, target: Target,
                                                      admin: RestoringAdmin) -> None:
    """MemoryAlarms.flowControl's first half: on a connection that published before the alarm,
    basic.get, basic.consume, deliveries and acks all work during it."""
    queue = names.queue("alm")
    client = connect()
    ch = client.channel()
    client.rpc(ch, QueueDeclare(queue=queue, auto_delete=True), QueueDeclareOk)
    publish(client, ch, queue, b"one")
    publish(client, ch, queue, b"two")
    sync(client, ch)
    no_alarm_at_start(admin)
    raise_alarm(admin, MEMORY)
    what = "during a memory alarm, on a connection that does not publish while it lasts"
    try:
        got = client.rpc(ch, BasicGet(queue=queue), BasicGetOk, timeout=target.timeout(5.0))
        client.send(ch, BasicAck(delivery_tag=got.method.delivery_tag))  # type: ignore[union-attr]
        client.rpc(ch, BasicConsume(queue=queue, consumer_tag="alm.c"), BasicConsumeOk, timeout=target.timeout(5.0))
        delivered = client.expect(ch, BasicDeliver, timeout=target.timeout(5.0))
        client.send(ch, BasicAck(delivery_tag=delivered.method.delivery_tag))  # type: ignore[union-attr]
        sync(client, ch)
    except Exception as exc:
        raise AssertionError(f"ALM-04: {what}, basic.get, basic.consume, a delivery and acks work; "
                             f"{type(exc).__name__}: {exc}") from None
    assert (got.body, delivered.body) == (b"one", b"two"), (
        f"ALM-04: {what}: basic.get gave {got.body!r} and the consumer {delivered.body!r} (want b'one', b'two')")
    not_blocked(client, target, "ALM-04", f"{what}, nothing blocks it")


@pytest.mark.long_wait(4)  # 3.5 s of silence while blocked
@pytest.mark.clauses("ALM-05.a", "ALM-05.b")
@pytest.mark.rules("ALM-05")
def test_a_blocked_connection_is_not_dropped_for_missed_heartbeats(connect: Connect, names: Names,
                                                                  target: Target, admin: RestoringAdmin) -> None:
    """heartbeat 1 s: blocked, the client stays silent for 3.5 s (more than 3 intervals, when a
    running connection is dropped after 2 to 3, HB-01), and it is still open, and works, after."""
    queue = names.queue("alm")
    watcher = connect()
    ch = consumer(watcher, queue)
    no_alarm_at_start(admin)
    raise_alarm(admin, MEMORY)
    publisher = connect(heartbeat=1)
    pch = publisher.channel()
    publish(publisher, pch, queue, b"held")
    blocked(publisher, target, "a publish during a memory alarm")
    silence = 3.5
    try:
        publisher.poll(0, ConnectionUnblocked, duration=silence)  # nothing sent: not even heartbeats
    except (ConnectionLost, ConnectionClosed) as exc:
        raise AssertionError(f"ALM-05: a blocked connection's heartbeat monitor is paused; with heartbeat 1 s the "
                             f"broker ended it while it was blocked and silent for less than {silence} s: "
                             f"{exc}") from None
    clear_alarm(admin, MEMORY)
    unblocked(publisher, target, "the memory alarm cleared")
    publisher.send_raw(encode_heartbeat(), channel=0)
    assert deliveries(watcher, ch, 1, target, "ALM-05", "unblocked after its silence") == [b"held"]
    sync(publisher, pch)


@pytest.mark.clauses("ALM-02.c", "ALM-01.a")
@pytest.mark.rules("ALM-02", "ALM-01")
def test_an_empty_body_is_routed_though_its_connection_blocks(connect: Connect, names: Names, target: Target,
                                                              admin: RestoringAdmin) -> None:
    """rabbit_reader: a content header with body size 0 completes the publish, which is routed
    before publish_received blocks the connection."""
    queue, watcher, ch, publisher, pch = under_memory_alarm(connect, names, admin)
    publish(publisher, pch, queue, b"")
    blocked(publisher, target, "an empty-body publish during a memory alarm")
    assert deliveries(watcher, ch, 1, target, "ALM-02", "a publish with an empty body is complete at its header, "
                      "so it is routed though its connection then blocks") == [b""]
    clear_alarm(admin, MEMORY)
    unblocked(publisher, target, "the memory alarm cleared")
