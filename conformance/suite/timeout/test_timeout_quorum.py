"""Consumer delivery-acknowledgement timeouts over the wire (RULES.md §6, seed 000): TMO-4.3-1..6,
RabbitMQ 4.3, where the deadlines are kept in the quorum queue. The rules of test_timeout.py hold.
"""

from __future__ import annotations

import time

import pytest

from codec import (
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
)
from conformance.model import timeouts as model
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import skip_unless_applies
from conformance.results.verdicts import HarnessError
from conformance.run.admin import AdminError
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.queues import (
    CLASSIC,
    QUORUM,
    STREAM,
    Publisher,
    assert_quiet,
    bodies,
    get,
    ready,
    require_kind,
    settle,
    take,
    take_one,
)
from conformance.suite.steps.timeouts import (
    MARGIN,
    MARGIN_S,
    NO_CAPABILITY,
    SHORT,
    Connect,
    assert_nothing_fires,
    await_cancel,
    await_counts,
    await_reaction,
    can_set_global,
    consume,
    detection_deadline,
    exact,
    expected_reaction,
    policy_on,
    prefetch,
    queue_counts,
    queue_with,
    quiet_window,
    registered,
    set_global,
)
from conformance.suite.steps.wire import sync

CAPABLE = model.Reaction(model.CANCEL)


@pytest.mark.broker_wide
# -- TMO-4.3-1: only quorum queues time out ------------------------------------------------------
@pytest.mark.rules("TMO-4.3-1")
@pytest.mark.clauses("TMO-4.3-1.a", "TMO-4.3-1.b", "TMO-4.3-1.c")
@pytest.mark.parametrize("kind", [CLASSIC, STREAM])
def test_classic_queues_and_streams_never_time_out(connect: Connect, names: Names, target: Target,
                                                   admin: RestoringAdmin, kind: str) -> None:
    """A consumer-timeout policy (and a short global value, where the adapter can set it)
    that times out a quorum consumer leaves a classic or stream consumer's deliveries (and a
    classic basic.get's) alone."""
    require_kind(target.profile, kind)
    client = connect()
    setup = client.channel()
    queue = queue_with(client, setup, names, kind, count=2)  # a refused stream: judged as any refusal (540 fails a required rule)
    quorum = queue_with(client, setup, names, QUORUM, count=1)
    for name in (queue, quorum):
        policy_on(admin, target, name, SHORT)
    if can_set_global(admin):
        set_global(admin, SHORT)
    ch, control = client.channel(), client.channel()
    prefetch(client, ch, 1)  # a stream consumer needs a prefetch limit
    start = time.monotonic()
    if kind == STREAM:  # a stream consumer starts at "next" unless told otherwise (live 4.3.6)
        client.rpc(ch, BasicConsume(queue=queue, consumer_tag=kind, arguments={"x-stream-offset": "first"}),
                   BasicConsumeOk)
    else:
        consume(client, ch, queue, kind)
    take_one(client, ch)
    if kind == CLASSIC:
        assert get(client, ch, queue) is not None
    consume(client, control, quorum, "control")
    registered(admin, target)
    take_one(client, control)
    assert model.effective_consumer_timeout(target.profile.name, policy=SHORT, global_=SHORT, queue_type=kind) is None
    await_cancel(client, control, detection_deadline(target, SHORT), start)  # the same settings fire there
    assert_nothing_fires(client, ch, quiet_window(target))
    client.send(ch, BasicAck(delivery_tag=0, multiple=True))
    sync(client, ch)
    if kind == CLASSIC:
        assert ready(client, ch, queue) == 0


# -- TMO-4.3-2: deadlines in the quorum queue -------------------------------------------------------
@pytest.mark.long_wait(1)  # a consumer timeout
@pytest.mark.rules("TMO-4.3-2", "RQ-02", "RQ-06")
@pytest.mark.clauses("RQ-02.g", "RQ-06.i", "TMO-4.3-2.a", "TMO-4.3-2.b", "TMO-4.3-2.c")
def test_timeout_returns_the_message_first_and_pauses_the_consumer(connect: Connect, names: Names,
                                                                    target: Target) -> None:
    """Fires at the deadline (not on a 60 s tick); the message goes back ready and is
    delivered first, without a delivery-count increment; the consumer gets nothing more
    although it has capacity and messages are ready. Judged where TMO-4.3-2 applies (RQ-02 and
    RQ-06 apply on more profiles)."""
    skip_unless_applies(target.profile, ["TMO-4.3-2"])
    client = connect()
    setup = client.channel()
    queue = queue_with(client, setup, names, QUORUM, count=3)
    ch = client.channel()
    prefetch(client, ch, 1)
    start = time.monotonic()
    consume(client, ch, queue, "a", SHORT)
    assert take_one(client, ch).body == b"m1"
    await_cancel(client, ch, detection_deadline(target, SHORT), start)
    await_counts(client, setup, queue, target.timeout(MARGIN_S), ready=3)
    assert_quiet(client, ch, quiet_window(target))  # paused: no delivery to "a"
    observer = connect()
    och = observer.channel()
    consume(observer, och, queue, "b")
    got = take(observer, och, 3)
    assert bodies(got) == [b"m1", b"m2", b"m3"], "the timed-out message must come back first (RQ-02)"
    assert got[0].redelivered
    assert got[0].headers.get("x-delivery-count", 0) == 0, f"delivery count incremented: {got[0].headers}"


@pytest.mark.long_wait(12)  # two deadlines a detection margin apart, then a quiet window
@pytest.mark.rules("TMO-4.3-2")
@pytest.mark.clauses("TMO-4.3-2.a", "TMO-4.3-2.d")
def test_partial_timeout_returns_only_expired_deliveries(connect: Connect, names: Names, target: Target) -> None:
    """m1 and m2 reach the same consumer half a timeout apart: at m1's deadline only m1 goes
    back; m2 stays checked out, so acking it then removes it. The gap between the two deadlines
    exceeds the lateness a detection is allowed (`MARGIN`, for a loaded machine), so a timeout
    detected on time by the rule's measure always leaves m2 checked out."""
    gap = target.timeout(MARGIN) + 1.0
    timeout_ms = int(2 * gap * 1000)
    client = connect()
    setup = client.channel()
    queue = queue_with(client, setup, names, QUORUM, count=1)
    publisher = Publisher(client)
    ch = client.channel()
    consume(client, ch, queue, "a", timeout_ms)
    assert take_one(client, ch).body == b"m1"
    time.sleep(gap)  # the gap between the two deadlines: part of the scenario, not a wait for the broker
    publisher.publish(queue, [b"m2"])
    m2 = take_one(client, ch)
    m2_deadline = time.monotonic() + timeout_ms / 1000
    assert m2.body == b"m2"
    await_cancel(client, ch, detection_deadline(target, timeout_ms))
    left = m2_deadline - time.monotonic() - 0.3  # m2 must still be checked out while we look
    assert left > 0, (f"TMO-4.3-2: m1's timeout ({timeout_ms} ms) was detected only {gap - left - 0.3:.1f} s after its "
                      "deadline, when m2's was near: a timeout is detected at its own deadline, not later")
    await_counts(client, setup, queue, left, ready=1)  # only m1 went back
    client.send(ch, BasicAck(delivery_tag=m2.tag))
    sync(client, ch)
    if time.monotonic() >= m2_deadline:
        raise HarnessError("too slow to ack m2 before its deadline: rerun with a larger --timeout-scale")
    observer = connect()
    och = observer.channel()
    consume(observer, och, queue, "b")
    assert take_one(observer, och).body == b"m1"
    wait = m2_deadline - time.monotonic() + quiet_window(target)
    assert_quiet(observer, och, max(wait, 0.1), "redelivery of the acked m2")
    assert queue_counts(client, setup, queue)[0] == 0


# -- TMO-4.3-3: what the client sees -------------------------------------------------------------
@pytest.mark.long_wait(1)  # a consumer timeout
@pytest.mark.rules("TMO-4.3-3")
@pytest.mark.clauses("TMO-4.3-3.a", "TMO-4.3-3.b")
def test_with_capability_basic_cancel_and_the_channel_stays(connect: Connect, names: Names,
                                                            target: Target) -> None:
    client = connect()
    setup = client.channel()
    quorum = queue_with(client, setup, names, QUORUM, count=1)
    classic = queue_with(client, setup, names, CLASSIC)
    ch = client.channel()
    consume(client, ch, classic, "bystander")
    start = time.monotonic()
    consume(client, ch, quorum, "timed", SHORT)
    take_one(client, ch)
    fired = await_reaction(client, ch, CAPABLE, detection_deadline(target, SHORT), start)
    assert fired.cancel == BasicCancel(consumer_tag="timed", nowait=True)
    sync(client, ch)  # channel open
    Publisher(client).publish(classic, [b"after"])
    other = take_one(client, ch)  # the other consumer on the channel is unaffected
    assert (other.consumer_tag, other.body) == ("bystander", b"after")
    client.send(ch, BasicAck(delivery_tag=other.tag))
    assert_nothing_fires(client, ch, quiet_window(target))


@pytest.mark.long_wait(1)  # a consumer timeout
@pytest.mark.rules("TMO-4.3-3")
@pytest.mark.clauses("TMO-4.3-3.c", "TMO-4.3-3.d", "TMO-4.3-3.f")
@pytest.mark.parametrize("case", ["no-capability", "basic-get", "consumer-cancelled-by-client"])
def test_otherwise_channel_close_with_minus_one(connect: Connect, names: Names, target: Target,
                                                case: str) -> None:
    """No capability, a basic.get delivery, or a tag that is no longer a registered consumer:
    channel.close 406 0/0 "... Timeout value used: -1 ms. ..."; the connection stays and the
    delivery is requeued."""
    client = connect(capabilities=NO_CAPABILITY) if case == "no-capability" else connect()
    setup = client.channel()
    timeout_ms = int(1000 * target.timeout_scale) if case == "consumer-cancelled-by-client" else SHORT
    queue = queue_with(client, setup, names, QUORUM, timeout_ms if case == "basic-get" else None, count=1)
    ch = client.channel()
    start = time.monotonic()
    if case == "basic-get":
        assert get(client, ch, queue) is not None
    else:
        consume(client, ch, queue, "c", timeout_ms)
        take_one(client, ch)
        if case == "consumer-cancelled-by-client":
            client.rpc(ch, BasicCancel(consumer_tag="c"), BasicCancelOk)
    expected = expected_reaction(target, timeout_ms, cancel_notify=case != "no-capability",
                                 registered=case == "no-capability")
    assert expected == model.Reaction(model.CLOSE, model.SENTINEL_4_3)
    await_reaction(client, ch, expected, detection_deadline(target, timeout_ms), start)
    await_counts(client, setup, queue, target.timeout(MARGIN_S), ready=1)


# -- TMO-4.3-4: registered until cancel-ok ------------------------------------------------------------
@pytest.mark.long_wait(1)  # a consumer timeout
@pytest.mark.rules("TMO-4.3-4")
@pytest.mark.clauses("TMO-4.3-4.a", "TMO-4.3-4.b", "TMO-4.3-4.c")
@pytest.mark.parametrize("removal", ["cancel-ok", "client-cancel", "channel-close"])
def test_consumer_stays_registered_after_the_broker_cancel(connect: Connect, names: Names, target: Target,
                                                           removal: str) -> None:
    client = connect()
    setup = client.channel()
    queue = queue_with(client, setup, names, QUORUM, count=1)
    ch = client.channel()
    start = time.monotonic()
    consume(client, ch, queue, "c", SHORT)
    take_one(client, ch)
    await_cancel(client, ch, detection_deadline(target, SHORT), start)
    await_counts(client, setup, queue, target.timeout(MARGIN_S), ready=1)
    assert queue_counts(client, setup, queue) == (1, 1), "the broker's basic.cancel removed the consumer"
    assert_quiet(client, ch, quiet_window(target))
    assert queue_counts(client, setup, queue) == (1, 1), "the consumer went without cancel-ok"
    if removal == "cancel-ok":
        client.send(ch, BasicCancelOk(consumer_tag="c"))  # CCN-05: 4.3 accepts it
    elif removal == "client-cancel":
        client.rpc(ch, BasicCancel(consumer_tag="c"), BasicCancelOk)
    else:
        client.close_channel(ch)
    await_counts(client, setup, queue, target.timeout(MARGIN_S), consumers=0)
    if removal != "channel-close":
        sync(client, ch)


@pytest.mark.long_wait(2)  # a timeout, then a late settle
# -- TMO-4.3-5: a late ack is accepted --------------------------------------------------------------
@pytest.mark.rules("TMO-4.3-5")
@pytest.mark.clauses("TMO-4.3-5.a", "TMO-4.3-5.b", "TMO-4.3-5.c")
@pytest.mark.parametrize("kind", ["ack", "reject"])
def test_late_settle_is_accepted_and_the_consumer_resumes(connect: Connect, names: Names, target: Target,
                                                          kind: str) -> None:
    """The timed-out tag settles without 406 but removes nothing; with no timed-out tag left
    the consumer resumes and gets the same message again, on the tag the broker cancelled."""
    timeout_ms = int(1000 * target.timeout_scale)
    client = connect()
    setup = client.channel()
    queue = queue_with(client, setup, names, QUORUM, count=1)
    ch = client.channel()
    prefetch(client, ch, 1)
    consume(client, ch, queue, "c", timeout_ms)
    first = take_one(client, ch)
    await_cancel(client, ch, detection_deadline(target, timeout_ms))
    await_counts(client, setup, queue, target.timeout(MARGIN_S), ready=1)
    assert_quiet(client, ch, quiet_window(target))  # paused until the timed-out tag is settled
    client.send(ch, settle(kind, first.tag, requeue=True))
    sync(client, ch)  # accepted: no channel.close
    again = take_one(client, ch, timeout=target.timeout(MARGIN_S))  # not removed: a duplicate
    client.send(ch, BasicAck(delivery_tag=again.tag))
    assert (again.body, again.consumer_tag, again.redelivered) == (b"m1", "c", True), again
    assert again.tag == first.tag + 1
    await_counts(client, setup, queue, target.timeout(MARGIN_S), ready=0)
    sync(client, ch)


@pytest.mark.rules("TMO-4.3-5")
@pytest.mark.clauses("TMO-4.3-5.a", "TMO-4.3-5.b")
def test_late_ack_after_cancel_ok_is_accepted_and_removes_nothing(connect: Connect, names: Names,
                                                                   target: Target) -> None:
    client = connect()
    setup = client.channel()
    queue = queue_with(client, setup, names, QUORUM, count=1)
    ch = client.channel()
    start = time.monotonic()
    consume(client, ch, queue, "c", SHORT)
    first = take_one(client, ch)
    await_cancel(client, ch, detection_deadline(target, SHORT), start)
    client.send(ch, BasicCancelOk(consumer_tag="c"))
    client.send(ch, BasicAck(delivery_tag=first.tag))
    sync(client, ch)  # accepted: no channel.close
    await_counts(client, setup, queue, target.timeout(MARGIN_S), ready=1, consumers=0)
    observer = connect()
    och = observer.channel()
    consume(observer, och, queue, "b")
    again = take_one(observer, och)
    assert (again.body, again.redelivered) == (b"m1", True)


# -- TMO-4.3-6: the capability is the only switch -----------------------------------------------------
@pytest.mark.rules("TMO-4.3-6")
@pytest.mark.clauses("TMO-4.3-6.a")
def test_the_capability_is_the_only_switch(connect: Connect, names: Names, target: Target) -> None:
    """The same queue settings give basic.cancel to a client with consumer_cancel_notify and
    channel.close to one without; no broker setting is involved."""
    start = time.monotonic()
    runs = []
    for notify in (True, False):
        client = connect() if notify else connect(capabilities=NO_CAPABILITY)
        queue = queue_with(client, client.channel(), names, QUORUM, SHORT, count=1)
        ch = client.channel()
        consume(client, ch, queue, "c")
        take_one(client, ch)
        runs.append((client, ch, expected_reaction(target, SHORT, cancel_notify=notify)))
    assert [r[2].kind for r in runs] == [model.CANCEL, model.CLOSE]
    for client, ch, expected in runs:
        await_reaction(client, ch, expected, detection_deadline(target, SHORT), start)


@pytest.mark.rules("TMO-4.3-6")
@pytest.mark.clauses("TMO-4.3-6.d")
def test_consumer_disconnected_timeout_argument_is_accepted(connect: Connect, names: Names) -> None:
    client = connect()
    queue_with(client, client.channel(), names, QUORUM, extra={"x-consumer-disconnected-timeout": 60000})


@pytest.mark.rules("TMO-4.3-6")
@pytest.mark.clauses("TMO-4.3-6.e")
def test_consumer_disconnected_timeout_policy_key_is_accepted(connect: Connect, names: Names, target: Target,
                                                              admin: RestoringAdmin) -> None:
    client = connect()
    queue = queue_with(client, client.channel(), names, QUORUM)
    try:
        admin.put_policy(target.vhost, f"{queue}.cdt", exact(queue), {"consumer-disconnected-timeout": 60000},
                         "queues", 100)
    except AdminError as exc:
        raise AssertionError(f"policy key consumer-disconnected-timeout refused: {exc}") from None
