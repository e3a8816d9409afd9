"""Consumer timeouts on a single-active-consumer quorum queue (TMO-4.3-7, RabbitMQ 4.3).

Rules:
- The active consumer's timeout hands the queue to the waiting consumer; with every consumer
  timed out the queue stops dispatching until a timed-out message is settled.
- The consumer that took over times out at its own deadline, which follows the first one's: a
  basic.cancel that is late fails TMO-4.3-7, however late. Only then, to say how it failed, the
  test publishes to the queue: a cancel that this command brings at once is a timeout that waited
  for the queue's next command (RabbitMQ 4.3.6's lost-timer race, accepted by its baseline, not
  here), one that never comes is a consumer that does not time out. No tolerance: both fail.
"""

from __future__ import annotations

import time

import pytest

from codec import BasicAck, BasicDeliver
from conformance.catalogue.mentions import RuleViolation
from conformance.drivers.interface import NoReply
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.queues import QUORUM, Delivery, Publisher, assert_quiet, take_one
from conformance.suite.steps.timeouts import (
    MARGIN_S,
    SHORT,
    Connect,
    await_cancel,
    await_counts,
    consume,
    detection_deadline,
    queue_with,
    quiet_window,
)
from conformance.suite.steps.wire import sync

HANDOVER_S = 2.0  # s (scaled): a waiting SAC consumer taking over after the active one timed out
PROBE_S = 1.0  # s (scaled): after a late timeout, how long a publish to the queue may take to bring it


SAC_TIMEOUT_RULES = ("TMO-4.3-7", "TMO-4.3-2")  # a late cancel of the consumer that took over


def sac_queue(client: RawClient, names: Names) -> tuple[int, str]:
    setup = client.channel()
    return setup, queue_with(client, setup, names, QUORUM, count=1, extra={"x-single-active-consumer": True})


def await_timeout_that_follows(client: RawClient, ch: int, tag: str, queue: str, target: Target) -> None:
    """TMO-4.3-7: the basic.cancel of consumer `tag` on `ch`, which took its message when the
    active consumer timed out, at its own deadline (SHORT after that delivery). When it is late
    the check fails; a publish to the queue then finds out whether that command brings it."""
    within = detection_deadline(target, SHORT)
    try:
        await_cancel(client, ch, within)
        return
    except NoReply:
        pass
    probed = time.monotonic()
    Publisher(client).publish(queue, [b"probe"])
    try:
        await_cancel(client, ch, target.timeout(PROBE_S))
    except NoReply:
        raise late_timeout(tag, within, None, target.timeout(PROBE_S)) from None
    raise late_timeout(tag, within, time.monotonic() - probed, target.timeout(PROBE_S))


def late_timeout(tag: str, within: float, after_publish: float | None, probe: float) -> RuleViolation:
    """The failure of a late basic.cancel: what TMO-4.3-7 required, and what the broker did
    (the cancel came `after_publish` s after a publish to the queue, or not within `probe` s)."""
    required = (f"expected basic.cancel for consumer {tag!r} within {within:.1f} s of its delivery (its deadline is "
                f"{SHORT} ms after it: the consumer that took over from a timed-out one times out too), got nothing")
    # TMO-4.3-2 too: the queue arms a timer at the earliest deadline, so a timeout is detected on time
    if after_publish is None:
        return RuleViolation(SAC_TIMEOUT_RULES, f"{required}, nor within {probe:.1f} s of a publish to the queue: "
                                                "the consumer never timed out")
    return RuleViolation(SAC_TIMEOUT_RULES, f"{required}; it came {after_publish:.2f} s after a publish to the "
                                            "queue: the timeout waited for the queue's next command")


@pytest.mark.long_wait(1)  # a consumer timeout
@pytest.mark.rules("TMO-4.3-7")
@pytest.mark.clauses("TMO-4.3-7.a")
def test_sac_timed_out_active_consumer_hands_over(connect: Connect, names: Names, target: Target) -> None:
    """The active consumer times out with nothing else checked out: it goes back to the
    waiting list and the waiting consumer becomes active and gets the returned message."""
    client = connect()
    _, queue = sac_queue(client, names)
    first, second = client.channel(), client.channel()
    start = time.monotonic()
    consume(client, first, queue, "a", SHORT)
    consume(client, second, queue, "b")
    assert take_one(client, first).body == b"m1"
    await_cancel(client, first, detection_deadline(target, SHORT), start)
    handed = client.poll(second, BasicDeliver, duration=target.timeout(HANDOVER_S))
    assert handed is not None, "the waiting consumer never became active after the active one timed out"
    delivery = Delivery.of(handed)
    assert (delivery.consumer_tag, delivery.body, delivery.redelivered) == ("b", b"m1", True)
    assert_quiet(client, first, quiet_window(target))


@pytest.mark.long_wait(2)  # two consumers time out one after the other
@pytest.mark.rules("TMO-4.3-7", "TMO-4.3-2")
@pytest.mark.clauses("TMO-4.3-7.b")
def test_sac_stalls_once_every_consumer_timed_out(connect: Connect, names: Names, target: Target) -> None:
    """With every consumer timed out a SAC quorum queue stops dispatching (expected, per the
    maintainers) until a timed-out message is settled; then it delivers again."""
    client = connect()
    setup, queue = sac_queue(client, names)
    first, second = client.channel(), client.channel()
    start = time.monotonic()
    consume(client, first, queue, "a", SHORT)
    consume(client, second, queue, "b", SHORT)
    timed_out = [take_one(client, first)]
    await_cancel(client, first, detection_deadline(target, SHORT), start)
    handed = client.poll(second, BasicDeliver, duration=target.timeout(HANDOVER_S))
    if handed is not None:
        timed_out.append(Delivery.of(handed))
        await_timeout_that_follows(client, second, "b", queue, target)
    await_counts(client, setup, queue, target.timeout(MARGIN_S), ready=1)
    for ch in (first, second):
        assert_quiet(client, ch, quiet_window(target))  # stalled
    client.send(first, BasicAck(delivery_tag=timed_out[0].tag))  # settles a timed-out message
    sync(client, first)
    resumed = first_delivery(client, (first, second), target.timeout(MARGIN_S))
    assert resumed is not None, "no delivery after a timed-out message was settled"
    assert resumed.body == b"m1"


def first_delivery(client: RawClient, chans: tuple[int, ...], within: float) -> Delivery | None:
    """The first basic.deliver on any of `chans` within the bounded `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for ch in chans:
            command = client.poll(ch, BasicDeliver, duration=0.05)
            if command is not None:
                return Delivery.of(command)
    return None
