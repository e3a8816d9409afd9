"""Rules checked through a client library: `--client NAME` (any library of the client registry).

Each test states a rule the way an application would, through the `ClientDriver` interface
(conformance.drivers.interface), and runs only under `--client` (under the default raw driver
the rest of the suite checks the same rules on the wire). The frames are recorded by the
relay in front of the broker, so a verdict carries the wire evidence too. A rule that holds on
the wire but fails here is a client bug or a rule the client cannot express. A reply code is
always asserted exactly: where the library does not show it (aio-pika's basic.return), the
code the broker sent is read from the recorded frames (recorded_replies).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from codec import BasicReturn, ChannelClose
from codec.constants import ReplyCode
from conformance.drivers.interface import (
    BrokerCancelled,
    ChannelClosed,
    ChannelClosedEvent,
    ClientDriver,
    Confirmed,
    Delivered,
    Recorder,
    Returned,
    wait_event,
)
from conformance.plugin.session import Names, Target
from conformance.suite.steps.machine_consuming import machine_target
from conformance.suite.steps.queues import RETURN_S
from conformance.suite.through_clients.libraries import LIBRARIES, NO_CANCEL_NOTIFY, clients_but
from conformance.suite.through_clients.machine_clients import ACK_RULES, run_client_ack_machine
from conformance.suite.through_clients.recorded_replies import RecordedReplies

Client = Callable[[], ClientDriver]


def _filled(client: Client, names: Names, count: int) -> tuple[ClientDriver, int, str]:
    driver = client()
    ch = driver.open_channel()
    queue = driver.declare_queue(ch, names.queue())
    for i in range(1, count + 1):
        driver.publish(ch, "", queue, f"m{i}".encode())
    return driver, ch, queue


def _deliveries(driver: ClientDriver, count: int, timeout: float) -> list[Delivered]:
    got: list[Delivered] = []
    for _ in range(count):
        event = wait_event(driver, (Delivered,), timeout)
        assert isinstance(event, Delivered), f"delivery {len(got) + 1} of {count} did not come"
        got.append(event)
    return got


def _ready(driver: ClientDriver, queue: str, want: int, within: float) -> int:
    """Messages taken from `queue` (basic.get, no-ack) until it is empty with `want` taken, or
    `within` seconds passed: a gone channel's deliveries come back asynchronously (RQ-03,
    steps.queues.assert_ready_elsewhere)."""
    ch = driver.open_channel()
    deadline = time.monotonic() + within
    count = 0
    while True:
        while driver.get(ch, queue, no_ack=True) is not None:
            count += 1
        if count >= want or time.monotonic() >= deadline:
            return count
        time.sleep(0.01)


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules("ACK-05")
def test_ack_multiple_settles_every_outstanding_tag_up_to_it(client: Client, names: Names, target: Target) -> None:
    driver, ch, queue = _filled(client, names, 3)
    driver.consume(ch, queue)
    tags = [d.delivery.delivery_tag for d in _deliveries(driver, 3, target.timeout(5))]
    driver.ack(ch, tags[-1], multiple=True)
    driver.cancel(ch, driver.consume(ch, queue))  # a round trip after the ack on the same channel
    driver.close_channel(ch)  # nothing unacked is left to requeue
    assert _ready(client(), queue, 0, target.timeout(RETURN_S)) == 0


def _hidden(shown: int | None) -> str:
    return "" if shown else " (read from the recorded frames: the library does not show it)"


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules("ACK-03")
def test_an_unknown_tag_closes_the_channel_406(client: Client, names: Names, target: Target,
                                               recorder: Recorder) -> None:
    replies = RecordedReplies(recorder, target.timeout(2))
    driver, ch, queue = _filled(client, names, 1)
    driver.ack(ch, 99)
    closed = wait_event(driver, (ChannelClosedEvent,), target.timeout(5))
    if closed is None:  # a library that reports the close at the next operation on the channel
        with pytest.raises(ChannelClosed) as raised:
            driver.get(ch, queue)
        shown: int | None = raised.value.code
    else:
        assert isinstance(closed, ChannelClosedEvent)
        shown = closed.code
    code = replies.code(shown, ChannelClose, ch)
    assert code == ReplyCode.PRECONDITION_FAILED, f"ACK-03: basic.ack of unknown tag 99 closed the channel with {code}{_hidden(shown)}, " \
        "not 406 PRECONDITION_FAILED"


@pytest.mark.clients(*LIBRARIES)  # py-amqp has no basic_nack: its driver says so (Unsupported), not-applicable
@pytest.mark.rules("ACK-07", "RQ-04")
def test_nack_requeue_redelivers_with_the_flag(client: Client, names: Names, target: Target) -> None:
    _requeue_redelivers_with_the_flag(client, names, "nack")


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules("ACK-07", "RQ-04")
def test_reject_requeue_redelivers_with_the_flag(client: Client, names: Names, target: Target) -> None:
    _requeue_redelivers_with_the_flag(client, names, "reject")


def _requeue_redelivers_with_the_flag(client: Client, names: Names, settle: str) -> None:
    """ACK-07/RQ-04: a message settled with `settle` ("nack" or "reject") and requeue comes back redelivered."""
    driver, ch, queue = _filled(client, names, 1)
    first = driver.get(ch, queue)
    assert first is not None and not first.redelivered
    getattr(driver, settle)(ch, first.delivery_tag, requeue=True)
    again = driver.get(ch, queue)
    assert again is not None and again.body == b"m1" and again.redelivered


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules("PC-02", "PC-05")
def test_every_publish_is_confirmed_once(client: Client, names: Names, target: Target) -> None:
    driver = client()
    ch = driver.open_channel()
    queue = driver.declare_queue(ch, names.queue())
    driver.confirm_select(ch)
    for i in range(3):
        driver.publish(ch, "", queue, f"m{i}".encode())
    confirmed: set[int] = set()
    while len(confirmed) < 3:
        event = wait_event(driver, (Confirmed,), target.timeout(5))
        assert isinstance(event, Confirmed), f"confirms seen: {sorted(confirmed)}"
        assert event.ack and event.seq not in confirmed
        confirmed.add(event.seq)
    assert confirmed == {1, 2, 3}


@clients_but(NO_CANCEL_NOTIFY)
@pytest.mark.rules("CCN-02")
def test_deleting_the_queue_notifies_the_consumer(client: Client, names: Names, target: Target) -> None:
    driver, ch, queue = _filled(client, names, 0)
    tag = driver.consume(ch, queue)
    other = client()
    other.delete_queue(other.open_channel(), queue)
    event = wait_event(driver, (BrokerCancelled,), target.timeout(5))
    assert isinstance(event, BrokerCancelled) and event.consumer_tag == tag


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules("S001-05", "S001-06")
def test_prefetch_caps_unacked_deliveries(client: Client, names: Names, target: Target) -> None:
    driver, ch, queue = _filled(client, names, 4)
    driver.qos(ch, 2)
    driver.consume(ch, queue)
    first = _deliveries(driver, 2, target.timeout(5))
    assert wait_event(driver, (Delivered,), target.timeout(0.5)) is None, "a third delivery beyond prefetch 2"
    driver.ack(ch, first[0].delivery.delivery_tag)
    assert isinstance(wait_event(driver, (Delivered,), target.timeout(5)), Delivered)


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules(*ACK_RULES)
def test_acknowledgements_through_the_client_match_the_model(client: Client, target: Target,
                                                            recorder: Recorder) -> None:
    """The acks machine (machine_clients) with the library's calls as its steps."""
    profile = machine_target(target).profile  # not-applicable where the model does not speak for the broker
    run_client_ack_machine(client, profile, recorder=recorder, examples=40, steps=10)


# -- transactions (ACK-08, PC-11, PC-03) ---------------------------------------------------------
@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules("ACK-08")
@pytest.mark.parametrize(("end", "left"), [("commit", 0), ("rollback", 1)])
def test_tx_ack_is_settled_at_commit_and_restored_by_rollback(client: Client, names: Names, target: Target,
                                                               end: str, left: int) -> None:
    driver, ch, queue = _filled(client, names, 1)
    driver.tx_select(ch)
    got = driver.get(ch, queue)
    assert got is not None
    driver.ack(ch, got.delivery_tag)
    driver.tx_commit(ch) if end == "commit" else driver.tx_rollback(ch)
    driver.close_channel(ch)  # a rolled-back ack leaves the delivery unacked: the close requeues it (RQ-03)
    assert _ready(client(), queue, left, target.timeout(RETURN_S)) == left, f"ack then tx.{end}: the queue must hold {left}"


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules("PC-11")
def test_tx_commit_on_a_channel_without_tx_select_is_406(client: Client, names: Names, target: Target) -> None:
    driver = client()
    ch = driver.open_channel()
    with pytest.raises(ChannelClosed) as closed:
        driver.tx_commit(ch)
    assert closed.value.code == ReplyCode.PRECONDITION_FAILED


@clients_but({"aio-pika": "aio-pika chooses confirms when it opens a channel: confirm.select on a tx channel "
                            "cannot be asked (the driver opens a new channel)"})
@pytest.mark.rules("PC-03")
def test_confirm_select_on_a_tx_channel_is_406(client: Client, names: Names, target: Target) -> None:
    driver = client()
    ch = driver.open_channel()
    driver.tx_select(ch)
    with pytest.raises(ChannelClosed) as closed:
        driver.confirm_select(ch)
    assert closed.value.code == ReplyCode.PRECONDITION_FAILED


# -- mandatory publish returned (PC-06) ------------------------------------------------------------
def _returned(driver: ClientDriver, ch: int, routing_key: str, target: Target, replies: RecordedReplies) -> Returned:
    event = wait_event(driver, (Returned,), target.timeout(5))
    assert isinstance(event, Returned), "no basic.return reached the library's return callback"
    assert (event.channel, event.exchange, event.routing_key, event.body) == (ch, "", routing_key, b"back")
    code = replies.code(event.reply_code, BasicReturn, ch, matching=lambda sent: sent.body == b"back")
    assert code == ReplyCode.NO_ROUTE, f"PC-06: basic.return reply code {code}{_hidden(event.reply_code)}, not 312 NO_ROUTE"
    return event


@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules("PC-06")
def test_an_unroutable_mandatory_publish_is_returned_then_confirmed(client: Client, names: Names,
                                                                    target: Target, recorder: Recorder) -> None:
    replies = RecordedReplies(recorder, target.timeout(2))
    driver = client()
    ch = driver.open_channel()
    driver.confirm_select(ch)
    nowhere = names.queue("nowhere")
    driver.publish(ch, "", nowhere, b"back", mandatory=True)
    _returned(driver, ch, nowhere, target, replies)  # first: the return precedes the confirm
    confirmed = wait_event(driver, (Confirmed,), target.timeout(5))
    assert isinstance(confirmed, Confirmed) and confirmed.ack, f"the confirm after the return: {confirmed}"


@clients_but({name: "aiormq (under aio-pika) drops a basic.return on a channel without publisher confirms "
                    "(docs/findings-clients.md)" for name in ("aio-pika", "aiormq")})
@pytest.mark.rules("PC-06")
def test_an_unroutable_mandatory_publish_is_returned_without_confirms(client: Client, names: Names,
                                                                      target: Target, recorder: Recorder) -> None:
    replies = RecordedReplies(recorder, target.timeout(2))
    driver = client()
    ch = driver.open_channel()
    nowhere = names.queue("nowhere")
    driver.publish(ch, "", nowhere, b"back", mandatory=True)
    _returned(driver, ch, nowhere, target, replies)


# -- global qos (QOS-03) ---------------------------------------------------------------------------
@pytest.mark.clients(*LIBRARIES)
@pytest.mark.rules("QOS-03")
def test_global_qos_scope_through_the_client(client: Client, names: Names, target: Target) -> None:
    driver = client()
    ch = driver.open_channel()
    queues = [driver.declare_queue(ch, names.queue(x)) for x in ("a", "b")]
    for queue in queues:
        for i in range(3):
            driver.publish(ch, "", queue, f"m{i}".encode())
    driver.qos(ch, 2, global_=True)
    tags = [driver.consume(ch, queue) for queue in queues]
    profile = target.profile
    per_consumer = profile.rabbitmq and profile.at_least("4.3")  # 4.3 treats global=true as global=false
    # channel-wide on RabbitMQ < 4.3 (QOS-03), connection-wide in AMQP 0-9-1: one channel here, both 2
    expected = 4 if per_consumer else 2
    got = _deliveries(driver, expected, target.timeout(5))
    assert wait_event(driver, (Delivered,), target.timeout(0.5)) is None, \
        f"a delivery beyond {'2 per consumer' if per_consumer else 'the shared limit of 2'}"
    if per_consumer:
        assert sorted(d.delivery.consumer_tag or "" for d in got) == sorted([*tags, *tags])
