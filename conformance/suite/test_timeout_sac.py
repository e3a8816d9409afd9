"""Consumer timeouts on a single-active-consumer quorum queue (TMO-4.3-7, RabbitMQ 4.3).

Rules:
- The active consumer's timeout hands the queue to the waiting consumer; with every consumer
  timed out the queue stops dispatching until a timed-out message is settled.
- The second consumer's timeout rests on the queue arming a timer for a deadline that follows
  another one (TMO-4.3-2). RabbitMQ 4.3.6 sometimes arms none (the lost-timer race,
  docs/findings-rabbitmq-4.3.6.md): the timeout then happens at the queue's next command. This
  module judges TMO-4.3-7, not that race: when the second basic.cancel is late, a publish to
  the queue (a command) must bring it at once; the test goes on with that message counted and
  says so in a warning. A broker that does not time the consumer out even then fails.
"""

from __future__ import annotations

import time
import warnings

import pytest

from codec import BasicAck, BasicDeliver
from conformance.drivers.interface import NoReply
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.queue_steps import QUORUM, Delivery, Publisher, assert_quiet, take_one
from conformance.suite.timeout_steps import (
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
from conformance.suite.wire_steps import sync

HANDOVER_S = 2.0  # s (scaled): a waiting SAC consumer taking over after the active one timed out
NUDGE_S = 1.0  # s (scaled): a timeout the queue owed already comes with its next command


class LostTimerWarning(UserWarning):
    """The broker timed a delivery out only at the queue's next command (TMO-4.3-2)."""


def sac_queue(client: RawClient, names: Names) -> tuple[int, str]:
    setup = client.channel()
    return setup, queue_with(client, setup, names, QUORUM, count=1, extra={"x-single-active-consumer": True})


def await_later_timeout(client: RawClient, ch: int, queue: str, target: Target) -> int:
    """The basic.cancel of the consumer on `ch`, whose deadline follows an earlier one; returns
    how many messages it took to get it (0, or 1: the publish that made an owed timeout happen)."""
    try:
        await_cancel(client, ch, detection_deadline(target, SHORT))
        return 0
    except NoReply:
        Publisher(client).publish(queue, [b"nudge"])
    await_cancel(client, ch, target.timeout(NUDGE_S))  # still nothing: the consumer never timed out
    warnings.warn(LostTimerWarning(
        f"{queue}: the second consumer's timeout came only with a publish to the queue, not at its deadline "
        "(TMO-4.3-2: RabbitMQ 4.3.6's lost-timer race, docs/findings-rabbitmq-4.3.6.md)"), stacklevel=2)
    return 1


@pytest.mark.rules("TMO-4.3-7")
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


@pytest.mark.rules("TMO-4.3-7")
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
    nudged = 0
    if handed is not None:
        timed_out.append(Delivery.of(handed))
        nudged = await_later_timeout(client, second, queue, target)
    await_counts(client, setup, queue, target.timeout(MARGIN_S), ready=1 + nudged)
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
