"""Steps of the alarms area: raising and clearing resource alarms, and what a blocked
connection sees (ALM-01..05).

Rules:
- Alarms go through the test's `RestoringAdmin` (`set_alarm`): each is cleared again at the
  test's teardown, and by the run's janitor if the run is killed. A broker already in alarm
  when a test starts is the environment's fault: the test is `broken`, not failed.
- A blocked connection is only ever looked at (`poll`, a bounded look that sends nothing): the
  broker does not read it, so a request on it could not be answered.
- Several clients that must each get a notice (connection.blocked, unblocked) share one bound:
  each had sent what the notice answers before the wait began, so the bound runs for all of them
  at once, and a client looked at later is still read (`READ`) for what reached it in time. A
  broker that never sends the notice so costs the run one bound, not one per client.
- "Nothing happened" is a bounded look of `HOLD` seconds (scaled): a broker that follows the
  rule never does the thing in any window, so the window's length can only hide a deviation,
  never fail a conforming broker.
"""

from __future__ import annotations

import time

from codec import (
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    ConnectionBlocked,
    ConnectionUnblocked,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Target
from conformance.results.verdicts import HarnessError
from conformance.run.restoring import RestoringAdmin

HOLD = 0.5  # s (scaled): the look for what must not come
REPLY = 5.0  # s (scaled): the bound for a notice or delivery that must come
READ = 0.05  # s: the least look at a socket, to read what is already there
MEMORY, DISK = "memory", "disk"
NOT_CAPABLE = {"connection.blocked": False}  # a client that does not advertise the capability


def no_alarm_at_start(admin: RestoringAdmin) -> None:
    """The test's precondition: the broker has no resource alarm of its own."""
    raised = admin.alarms()
    if raised:
        raise HarnessError(f"the broker is already in alarm ({', '.join(sorted(raised))}): the alarms "
                           "area needs a broker with no resource alarm (see its memory and disk limits)")


def raise_alarm(admin: RestoringAdmin, resource: str) -> None:
    admin.set_alarm(resource, True)


def clear_alarm(admin: RestoringAdmin, resource: str) -> None:
    admin.set_alarm(resource, False)


def publish(client: RawClient, ch: int, queue: str, body: bytes) -> None:
    """A publish to `queue` through the default exchange, sent without waiting for anything."""
    client.send(ch, BasicPublish(routing_key=queue), BasicProperties(), body)


def consumer(client: RawClient, queue: str) -> int:
    """A channel of `client` consuming `queue` with no-ack (the queue declared first)."""
    ch = client.channel()
    client.rpc(ch, QueueDeclare(queue=queue, auto_delete=True), QueueDeclareOk)
    client.rpc(ch, BasicConsume(queue=queue, consumer_tag=f"{queue}.c", no_ack=True), BasicConsumeOk)
    return ch


def blocked(client: RawClient, target: Target, what: str) -> str:
    """The connection.blocked `client` must get (ALM-01); its reason."""
    return blocked_each({what: client}, target)[what]


def blocked_each(clients: dict[str, RawClient], target: Target) -> dict[str, str]:
    """The connection.blocked each client must get (ALM-01), what it is -> its reason: one bound
    for all of them, since every one published before the wait began (module rules)."""
    deadline = time.monotonic() + target.timeout(REPLY)
    reasons: dict[str, str] = {}
    for what, client in clients.items():
        got = client.poll(0, ConnectionBlocked, ConnectionUnblocked, duration=_left(deadline))
        assert got is not None and isinstance(got.method, ConnectionBlocked), (
            f"ALM-01: {what}: a client advertising the connection.blocked capability that publishes during a "
            f"resource alarm gets connection.blocked; within {target.timeout(REPLY):.1f} s it got "
            f"{got.method if got else 'nothing'}")
        reasons[what] = got.method.reason
    return reasons


def not_blocked(client: RawClient, target: Target, rule: str, what: str) -> None:
    """No connection.blocked (nor unblocked) reaches `client` within HOLD."""
    not_blocked_each({what: client}, target, rule)


def not_blocked_each(clients: dict[str, RawClient], target: Target, rule: str | None = None) -> None:
    """No connection.blocked (nor unblocked) reaches any of `clients` (what must hold -> the client;
    without `rule`, each what starts with its own) within one window of HOLD."""
    deadline = time.monotonic() + target.timeout(HOLD)
    for what, client in clients.items():
        got = client.poll(0, ConnectionBlocked, ConnectionUnblocked, duration=_left(deadline))
        assert got is None, f"{f'{rule}: ' if rule else ''}{what}; the broker sent {got.method if got else ''}"


def unblocked_each(clients: dict[str, RawClient], target: Target) -> None:
    """The connection.unblocked each blocked client must get once no alarm is left (ALM-03), within
    one bound for all of them."""
    deadline = time.monotonic() + target.timeout(REPLY)
    for what, client in clients.items():
        got = client.poll(0, ConnectionBlocked, ConnectionUnblocked, duration=_left(deadline))
        assert got is not None and isinstance(got.method, ConnectionUnblocked), (
            f"ALM-03: {what}: a blocked connection that was sent connection.blocked gets connection.unblocked "
            f"once no alarm is left; within {target.timeout(REPLY):.1f} s it got {got.method if got else 'nothing'}")


def _left(deadline: float) -> float:
    """What is left of a shared bound, at least READ: a client looked at after the bound still reads
    what reached its socket within it."""
    return max(deadline - time.monotonic(), READ)


def deliveries(client: RawClient, ch: int, count: int, target: Target, rule: str, what: str) -> list[bytes]:
    """The bodies of the next `count` deliveries on `ch` (each within the client timeout)."""
    bodies: list[bytes] = []
    for i in range(count):
        got = client.poll(ch, BasicDeliver, duration=target.timeout(REPLY))
        assert got is not None, (f"{rule}: {what}: delivery {i + 1} of {count} did not arrive within "
                                 f"{target.timeout(REPLY):.1f} s (got {bodies})")
        bodies.append(got.body)
    return bodies


def nothing_delivered(client: RawClient, ch: int, target: Target, rule: str, what: str) -> None:
    got = client.poll(ch, BasicDeliver, duration=target.timeout(HOLD))
    assert got is None, f"{rule}: {what}; the consumer got {got.body!r}"
