"""Resource alarms through a client library (ALM-01, ALM-03): what an application hears.

Under `--client NAME` (any library of the client registry that reports the event), a publisher
whose connection meets a memory alarm must hear connection.blocked with the broker's reason, then
connection.unblocked once the alarm clears, and the publish the alarm held must be routed. The
alarm is raised and cleared through `--broker-admin` (without it: `needs-admin`), so the test is
`broker_wide` (it runs alone) and the alarm is cleared again at teardown, or by the run's janitor.
The reason is read from the recorded connection.blocked: some libraries hand the application a text
of their own (py-amqp, and kombu over it: "connection blocked, see broker logs").
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import ConnectionBlocked
from conformance.drivers.interface import Blocked, ClientDriver, Recorder, Unblocked, wait_event
from conformance.plugin.session import Names, Target
from conformance.results.verdicts import HarnessError
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.alarms import MEMORY, clear_alarm, no_alarm_at_start, raise_alarm
from conformance.suite.through_clients.libraries import clients_but
from conformance.suite.through_clients.recorded_replies import RecordedReplies

Client = Callable[[], ClientDriver]
NO_BLOCKED_EVENT = {
    "aio-pika": "aio-pika hands connection.blocked to no application callback",
    "aiormq": "aiormq hands connection.blocked to no application callback",
    "rabbitmq-c": "its client-properties do not claim connection.blocked (rabbitmq-c 0.11 claims "
                  "authentication_failure_close only), so the broker blocks it silently (ALM-01.d)",
}
MEMORY_REASON = "low on memory"  # rabbit_alarm: the reason a memory alarm's connection.blocked gives


@clients_but(NO_BLOCKED_EVENT)
@pytest.mark.rules("ALM-01", "ALM-02", "ALM-03")
@pytest.mark.broker_wide  # an alarm blocks every publisher of the broker
def test_a_blocked_publisher_hears_blocked_then_unblocked(client: Client, names: Names, target: Target,
                                                          recorder: Recorder, admin: RestoringAdmin) -> None:
    replies = RecordedReplies(recorder, target.timeout(2))
    driver = client()
    ch = driver.open_channel()
    queue = driver.declare_queue(ch, names.queue("alm"))
    no_alarm_at_start(admin)
    raise_alarm(admin, MEMORY)
    driver.publish(ch, "", queue, b"held")  # the connection blocks at its first publish (ALM-01)
    heard = wait_event(driver, (Blocked,), target.timeout(5))
    sent = replies.wait_for(ConnectionBlocked, 0)
    if not isinstance(heard, Blocked) and sent is not None:
        raise HarnessError(f"the broker sent connection.blocked (recorded: {sent.method}), but the library "
                           f"reported no blocked notice within {target.timeout(5):g} s: the library, not the broker")
    assert isinstance(heard, Blocked), (
        "ALM-01: a publisher meeting a memory alarm (raised before the publish) must be sent connection.blocked; "
        f"the broker sent none (recorded frames) and the library reported none within {target.timeout(5):g} s")
    reason = sent.method.reason if sent is not None and isinstance(sent.method, ConnectionBlocked) else None
    assert reason == MEMORY_REASON, (
        f"ALM-01: connection.blocked must give the alarm's reason {MEMORY_REASON!r}; the broker sent "
        f"{'no connection.blocked' if sent is None else repr(reason)} (recorded frames; the library reported "
        f"{heard.reason!r})")
    clear_alarm(admin, MEMORY)
    assert isinstance(wait_event(driver, (Unblocked,), target.timeout(5)), Unblocked), (
        "ALM-03: once the alarm clears, a connection sent connection.blocked must be sent connection.unblocked; "
        f"the library reported none within {target.timeout(5):g} s")
    reader = client()
    got = reader.get(reader.open_channel(), queue, no_ack=True)
    assert got is not None and got.body == b"held", (
        f"ALM-02: the publish held by the alarm must be routed once the connection is unblocked; basic.get gave {got}")
