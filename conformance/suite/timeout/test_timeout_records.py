"""Consumer timeouts on RabbitMQ 4.3 quorum queues, per firing and per consumer record: a consumer
still registered is cancelled again at each firing of the queue's timer, one the client cancelled
has its remaining deliveries expire with a channel.close "-1 ms" (TMO-4.3-3, TMO-4.3-2), and
queue.declare-ok's consumer_count counts the queue's consumer records (TMO-4.3-4, TMO-4.3-7).

Rules:
- Two deliveries reach one consumer a gap apart (a detection margin and a second, scaled), with a
  timeout of twice the gap, so the two deadlines are told apart however loaded the machine; the
  gap is part of the scenario, every wait for the broker is bounded.
- Counts are read from a passive queue.declare (`queue_counts`), awaited where a quorum queue may
  apply a removal a moment after the frame that caused it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NoReturn

import pytest

from codec import BasicAck, BasicCancel, BasicCancelOk
from conformance.drivers.interface import NoReply
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.model import timeouts as model
from conformance.plugin.session import Names, Target
from conformance.suite.steps.queues import QUORUM, Publisher, get, take_one
from conformance.suite.steps.timeouts import (
    MARGIN,
    MARGIN_S,
    Connect,
    await_cancel,
    await_counts,
    await_reaction,
    consume,
    detection_deadline,
    queue_counts,
    queue_with,
)

CLOSED_UNREGISTERED = model.Reaction(model.CLOSE, model.SENTINEL_4_3)  # "Timeout value used: -1 ms"
LONG_MS = 600_000  # a consumer that must not time out during the test
PROBE_S = 1.0  # s (scaled): after a late timeout, how long a publish to the queue may take to bring it


def quorum_queue(connect: Connect, names: Names, count: int,
                 extra: dict[str, object] | None = None) -> tuple[RawClient, int, str, int]:
    """(client, setup channel, a quorum queue holding m1..m<count>, a second channel)."""
    client = connect()
    setup = client.channel()
    queue = queue_with(client, setup, names, QUORUM, count=count, extra=extra)
    return client, setup, queue, client.channel()


def two_deliveries_a_gap_apart(connect: Connect, names: Names, target: Target,
                               queues: list[str] | None = None) -> tuple[RawClient, int, int, float]:
    """(client, channel, timeout in ms, m2's checkout time): consumer "c" holds m1, then m2 a gap later
    (the queue's name appended to `queues`)."""
    gap = target.timeout(MARGIN) + 1.0
    timeout_ms = int(2 * gap * 1000)
    client = connect()
    queue = queue_with(client, client.channel(), names, QUORUM, count=1)
    if queues is not None:
        queues.append(queue)
    ch = client.channel()
    consume(client, ch, queue, "c", timeout_ms)
    assert take_one(client, ch).body == b"m1"
    time.sleep(gap)  # the gap between the two deadlines: part of the scenario, not a wait for the broker
    Publisher(client).publish(queue, [b"m2"])
    assert take_one(client, ch).body == b"m2"
    return client, ch, timeout_ms, time.monotonic()


def late_firing(client: RawClient, queue: str, required: str, fired: Callable[[float], object],
                target: Target) -> NoReturn:
    """m2's firing did not come: the check has failed. A publish to the queue (on another channel)
    then finds out whether the queue's next command brings it, as RabbitMQ 4.3.6's timer race
    does (rabbit_fifo arms no timer for a deadline that follows the one firing in the same
    millisecond, TMO-4.3-2; docs/findings-rabbitmq-4.3.6.md); the failure says which."""
    probed = time.monotonic()
    Publisher(client).publish(queue, [b"probe"])
    try:
        fired(target.timeout(PROBE_S))
    except NoReply:
        raise AssertionError(f"{required}, nor within {target.timeout(PROBE_S):.1f} s of a publish to the queue: "
                             "m2 never timed out") from None
    raise AssertionError(f"{required}; it came {time.monotonic() - probed:.2f} s after a publish to the queue: "
                         "the timeout waited for the queue's next command")


@pytest.mark.long_wait(12)
@pytest.mark.rules("TMO-4.3-3")
@pytest.mark.clauses("TMO-4.3-3.e")
def test_a_still_registered_consumer_is_cancelled_at_each_firing(connect: Connect, names: Names,
                                                                 target: Target) -> None:
    queues: list[str] = []
    client, ch, timeout_ms, m2_out = two_deliveries_a_gap_apart(connect, names, target, queues)
    first = await_cancel(client, ch, detection_deadline(target, timeout_ms))
    assert first.cancel == BasicCancel(consumer_tag="c", nowait=True)
    within = detection_deadline(target, timeout_ms)
    required = (f"TMO-4.3-3/TMO-4.3-2: a consumer still registered gets another basic.cancel each time more of its "
                f"deliveries expire; expected one at m2's deadline ({timeout_ms} ms after its delivery, within "
                f"{within:.1f} s), got nothing")
    try:  # no cancel-ok, no client basic.cancel: m2's expiry is another firing, another basic.cancel
        second = await_cancel(client, ch, within, m2_out)
    except ChannelClosed as exc:
        raise AssertionError(f"{required} but a channel.close: {exc}") from None
    except NoReply:
        late_firing(client, queues[0], required, lambda wait: await_cancel(client, ch, wait), target)
    assert second.cancel == BasicCancel(consumer_tag="c", nowait=True)


@pytest.mark.long_wait(12)
@pytest.mark.rules("TMO-4.3-3", "TMO-4.3-2")
@pytest.mark.clauses("TMO-4.3-3.f", "TMO-4.3-2.e")
def test_after_cancel_ok_the_remaining_deliveries_expire_with_a_channel_close(connect: Connect, names: Names,
                                                                             target: Target) -> None:
    """The consumer answered cancel-ok after the first firing: m2 stays checked out to it and
    expires at its own deadline, which closes the channel with "-1 ms"."""
    queues: list[str] = []
    client, ch, timeout_ms, m2_out = two_deliveries_a_gap_apart(connect, names, target, queues)
    await_cancel(client, ch, detection_deadline(target, timeout_ms))
    client.send(ch, BasicCancelOk(consumer_tag="c"))  # CCN-05: 4.3 removes the consumer
    within = detection_deadline(target, timeout_ms)
    required = (f"TMO-4.3-3/TMO-4.3-2: after cancel-ok, m2 (still checked out) expires at its own deadline, "
                f"{timeout_ms} ms after its delivery, and closes the channel; expected channel.close within "
                f"{within:.1f} s of m2's delivery, got nothing")
    try:
        await_reaction(client, ch, CLOSED_UNREGISTERED, within, m2_out)
    except NoReply:
        late_firing(client, queues[0], required,
                    lambda wait: await_reaction(client, ch, CLOSED_UNREGISTERED, wait), target)


@pytest.mark.rules("TMO-4.3-4")
@pytest.mark.clauses("TMO-4.3-4.d")
def test_a_consumer_cancelled_by_the_client_counts_until_its_deliveries_are_settled(
        connect: Connect, names: Names, target: Target) -> None:
    client, setup, queue, ch = quorum_queue(connect, names, 1)
    consume(client, ch, queue, "c", LONG_MS)
    held = take_one(client, ch)
    client.rpc(ch, BasicCancel(consumer_tag="c"), BasicCancelOk)
    seen = queue_counts(client, setup, queue)
    assert seen == (0, 1), (f"TMO-4.3-4: consumer_count counts a consumer the client cancelled while its delivery "
                            f"is unsettled: want (ready, consumers) = (0, 1), got {seen}")
    client.send(ch, BasicAck(delivery_tag=held.tag))
    await_counts(client, setup, queue, target.timeout(MARGIN_S), ready=0, consumers=0)


@pytest.mark.rules("TMO-4.3-4")
@pytest.mark.clauses("TMO-4.3-4.e")
def test_each_unsettled_basic_get_delivery_is_a_consumer_record(connect: Connect, names: Names,
                                                                target: Target) -> None:
    client, setup, queue, ch = quorum_queue(connect, names, 3)
    tags = []
    for _ in range(2):
        got = get(client, ch, queue)
        assert got is not None
        tags.append(got.tag)
    seen = queue_counts(client, setup, queue)
    assert seen == (1, 2), (f"TMO-4.3-4: consumer_count holds one record per unsettled basic.get delivery: two "
                            f"gets of three messages want (ready, consumers) = (1, 2), got {seen}")
    for tag in tags:
        client.send(ch, BasicAck(delivery_tag=tag))
    await_counts(client, setup, queue, target.timeout(MARGIN_S), ready=1, consumers=0)


@pytest.mark.rules("TMO-4.3-7")
@pytest.mark.clauses("TMO-4.3-7.c")
def test_a_single_active_consumer_queue_counts_only_the_active_consumer(connect: Connect, names: Names) -> None:
    client, setup, queue, _ = quorum_queue(connect, names, 0, {"x-single-active-consumer": True})
    for tag in ("active", "waiting-1", "waiting-2"):
        consume(client, client.channel(), queue, tag, LONG_MS)
    seen = queue_counts(client, setup, queue)
    assert seen == (0, 1), (f"TMO-4.3-7: on a single-active-consumer quorum queue consumer_count counts only the "
                            f"active consumer: three consumers want (ready, consumers) = (0, 1), got {seen}")
