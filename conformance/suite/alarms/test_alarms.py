"""Resource alarms and publisher blocking over the wire: ALM-01..05 (the Java client's
server/BlockedConnection and server/MemoryAlarms).

Rules:
- Every test raises alarms through `--broker-admin` (without it: `needs-admin`), and changes
  what every connection of the broker sees: the area is `broker_wide` (it runs alone).
- A test starts on a broker with no alarm (else `broken`); its alarms are cleared at teardown
  (the `admin` fixture is requested last, so it is restored before the connections close).
- A publisher is a connection of its own that the tests only look at once it may be blocked;
  consumers are other connections that never publish.
- The scenarios share one alarm period, each publisher with a queue of its own (the Java
  client's six cases in one test): the area runs alone, so a period costs the run its wall time,
  and a broker that never sends connection.blocked costs it one bound, not one per period; the
  publishers' notices are awaited under one bound (steps.alarms rules).
"""

from __future__ import annotations

import time
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
    READ,
    blocked,
    blocked_each,
    clear_alarm,
    consumer,
    deliveries,
    no_alarm_at_start,
    not_blocked,
    not_blocked_each,
    nothing_delivered,
    publish,
    raise_alarm,
    unblocked_each,
)
from conformance.suite.steps.wire import sync

pytestmark = pytest.mark.broker_wide  # an alarm blocks every publisher of the broker

Connect = Callable[..., RawClient]  # the `connect` fixture


@pytest.mark.long_wait(4)  # 3.5 s of silence while blocked
@pytest.mark.clauses("ALM-01.a", "ALM-01.b", "ALM-01.c", "ALM-01.d", "ALM-01.e", "ALM-01.f", "ALM-02.a", "ALM-02.b",
                     "ALM-02.c", "ALM-03.a", "ALM-03.b", "ALM-03.c", "ALM-03.d", "ALM-04.a", "ALM-04.b", "ALM-05.a",
                     "ALM-05.b")
@pytest.mark.rules("ALM-01", "ALM-02", "ALM-03", "ALM-04", "ALM-05")
def test_a_publish_during_alarms_blocks_and_waits_until_none_is_left(connect: Connect, names: Names, target: Target,
                                                                      admin: RestoringAdmin) -> None:
    """BlockedConnection.testBlock and initialBlock, MemoryAlarms.flowControl and
    overlappingAlarmsFlowControl, in one alarm period. First, on `worker`, a connection that
    published before the alarm and publishes nothing during it: basic.get, basic.consume, a
    delivery and acks all work, and nothing blocks it (ALM-04). Then, during a memory alarm, four
    publishers, each publishing to a queue of its own that a watcher consumes:
    - `held` is blocked with the reason "low on memory", its message held until no alarm is left,
      then it is unblocked and publishes as before;
    - `silent`, a client without the connection.blocked capability, is blocked silently (neither
      notice), its message held likewise;
    - `empty` publishes an empty body, complete at its content header, so it is routed before
      publish_received blocks the connection (rabbit_reader);
    - `quiet`, heartbeat 1 s, then sends nothing for 3.5 s (more than 3 intervals, when a running
      connection is dropped after 2 to 3, HB-01), and is still open, and works, after.
    A disk alarm raised then sends the blocked connections no second connection.blocked; `late`,
    opened under both alarms, is blocked at its first publish (the alarms alone block nobody) with
    a reason naming both; clearing the memory alarm releases no one; clearing the disk alarm too
    unblocks them all and routes their publishes. One test, so that a broker that never sends
    connection.blocked costs the run one bound (module rules)."""
    watcher = connect()
    queues = {who: names.queue("alm") for who in ("held", "empty", "quiet", "late")}
    chs = {who: consumer(watcher, queue) for who, queue in queues.items()}
    held, silent, empty = connect(), connect(capabilities=NOT_CAPABLE), connect()
    pch, sch, ech = held.channel(), silent.channel(), empty.channel()
    worker, wch, wqueue = published_before(connect, names)
    no_alarm_at_start(admin)
    raise_alarm(admin, MEMORY)
    keeps_working(worker, wch, wqueue, target)
    quiet = connect(heartbeat=1)  # opened now and blocked at once: it never sends a heartbeat
    qch = quiet.channel()
    publish(quiet, qch, queues["quiet"], b"held")
    publish(held, pch, queues["held"], b"held")
    publish(silent, sch, queues["held"], b"held-silently")
    publish(empty, ech, queues["empty"], b"")
    notices = {"a publish during a memory alarm": held, "an empty-body publish during a memory alarm": empty,
               "a publish during a memory alarm on a connection with heartbeat 1 s": quiet}
    reasons = blocked_each(notices, target)
    silence = 3.5
    quiet_until = time.monotonic() + silence  # nothing is sent on `quiet` from here on: not even heartbeats
    assert set(reasons.values()) == {"low on memory"}, (
        f"ALM-01: the reason of a memory alarm is 'low on memory'; it said {sorted(set(reasons.values()))}")
    assert deliveries(watcher, chs["empty"], 1, target, "ALM-02", "a publish with an empty body is complete at its "
                      "header, so it is routed though its connection then blocks") == [b""]
    nothing_delivered(watcher, chs["held"], target, "ALM-02", "a blocked connection's publish is not routed while "
                      "the alarm lasts")
    raise_alarm(admin, DISK)
    late = connect()
    lch = late.channel()
    sync(late, lch)  # not a publish: the alarms alone block nobody
    publish(late, lch, queues["late"], b"held-late")
    reason = blocked(late, target, "the first publish of a connection opened during memory and disk alarms")
    assert reason in ("low on memory & disk", "low on disk & memory"), (
        f"ALM-01: under memory and disk alarms the reason names both ('low on memory & disk'); it said {reason!r}")
    not_blocked_each({"ALM-01: a client without the connection.blocked capability gets no connection.blocked": silent,
                      f"ALM-04: {NOT_PUBLISHING}, nothing blocks it": worker,
                      "ALM-03: a second alarm sends no second connection.blocked to a blocked connection": held}, target)
    try:
        quiet.poll(0, ConnectionUnblocked, duration=max(quiet_until - time.monotonic(), READ))
    except (ConnectionLost, ConnectionClosed) as exc:
        raise AssertionError(f"ALM-05: a blocked connection's heartbeat monitor is paused; with heartbeat 1 s the "
                             f"broker ended it while it was blocked and silent for less than {silence} s: "
                             f"{exc}") from None
    clear_alarm(admin, MEMORY)
    still = "with the disk alarm still in force after the memory alarm cleared, the connection stays blocked " \
            "(no connection.unblocked)"
    not_blocked_each({still: held, f"{still}, for the connection opened during both alarms": late}, target, "ALM-03")
    nothing_delivered(watcher, chs["held"], target, "ALM-03", "with the disk alarm still in force, the held "
                      "publishes wait")
    clear_alarm(admin, DISK)
    unblocked_each({"both alarms cleared": held, "both alarms cleared, on the empty-body publisher": empty,
                    "both alarms cleared, after the heartbeat-1 s connection's silence": quiet,
                    "both alarms cleared, for the connection opened during them": late}, target)
    quiet.send_raw(encode_heartbeat(), channel=0)  # at once: its resumed heartbeat monitor counts from the unblock
    got = sorted(deliveries(watcher, chs["held"], 2, target, "ALM-02", "once no alarm is left, the held publishes "
                            "are routed"))
    assert got == [b"held", b"held-silently"], f"ALM-02: the held publishes are delivered once no alarm is left; got {got}"
    assert deliveries(watcher, chs["late"], 1, target, "ALM-02", "both alarms cleared") == [b"held-late"]
    assert deliveries(watcher, chs["quiet"], 1, target, "ALM-05", "unblocked after its silence") == [b"held"]
    sync(quiet, qch)
    not_blocked(silent, target, "ALM-03", "a connection never sent connection.blocked gets no connection.unblocked")
    publish(held, pch, queues["held"], b"after")
    assert deliveries(watcher, chs["held"], 1, target, "ALM-03", "once unblocked, publishing works as before") == [b"after"]


NOT_PUBLISHING = "during a memory alarm, on a connection that does not publish while it lasts"


def published_before(connect: Connect, names: Names) -> tuple[RawClient, int, str]:
    """MemoryAlarms.flowControl's first half, before the alarm: a connection publishes two messages."""
    queue = names.queue("alm")
    client = connect()
    ch = client.channel()
    client.rpc(ch, QueueDeclare(queue=queue, auto_delete=True), QueueDeclareOk)
    publish(client, ch, queue, b"one")
    publish(client, ch, queue, b"two")
    sync(client, ch)
    return client, ch, queue


def keeps_working(client: RawClient, ch: int, queue: str, target: Target) -> None:
    """ALM-04, during the alarm: basic.get, basic.consume, a delivery and acks work."""
    try:
        got = client.rpc(ch, BasicGet(queue=queue), BasicGetOk, timeout=target.timeout(5.0))
        client.send(ch, BasicAck(delivery_tag=got.method.delivery_tag))  # type: ignore[union-attr]
        client.rpc(ch, BasicConsume(queue=queue, consumer_tag="alm.c"), BasicConsumeOk, timeout=target.timeout(5.0))
        delivered = client.expect(ch, BasicDeliver, timeout=target.timeout(5.0))
        client.send(ch, BasicAck(delivery_tag=delivered.method.delivery_tag))  # type: ignore[union-attr]
        sync(client, ch)
    except Exception as exc:
        raise AssertionError(f"ALM-04: {NOT_PUBLISHING}, basic.get, basic.consume, a delivery and acks work; "
                             f"{type(exc).__name__}: {exc}") from None
    assert (got.body, delivered.body) == (b"one", b"two"), (
        f"ALM-04: {NOT_PUBLISHING}: basic.get gave {got.body!r} and the consumer {delivered.body!r} (want b'one', "
        f"b'two')")
