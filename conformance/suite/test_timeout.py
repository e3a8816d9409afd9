"""Consumer delivery-acknowledgement timeouts over the wire (RULES.md §6, seed 000): TMO-01..04,
TMO-3x-1..4 (RabbitMQ ≤4.2: the channel tick) and TMO-4.3-1..7 (4.3: deadlines in the quorum queue).

Rules:
- What a profile expects comes from `conformance.model.timeouts` (effective value, reaction,
  detection window, argument validation); tests drive the wire and compare.
- Values are SHORT (hundreds of ms, fires) or LONG (ten minutes, never fires within a test);
  "fires" waits for the frame up to the detection time plus a scaled margin, "does not fire"
  is a round trip plus a bounded poll several times longer than SHORT (and several ticks on
  ≤4.2). No assertion depends on a timeout firing *late* except TMO-02's tick, whose expected
  delay (3 s) is an order of magnitude above the per-delivery alternative (0.2 s).
- 4.3 cases need no admin when the timeout comes from the consumer or queue argument; policy
  and global cases use the `admin` fixture (`needs-admin` without `--broker-admin`).
  ≤4.2 cases always need it: a short `channel_tick_interval` (the 60 s default would make
  every test a minute long) and, for the global value, a short `consumer_timeout` that is
  only in force while the test's channels open (TMO-3x-4).
- Reply texts are compared where the rule is about them: the timeout channel.close
  (TMO-3x-2 / TMO-4.3-3, the value used and "-1" on 4.3) and the TMO-04 prefix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from codec import (
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    QueueDeclare,
    QueueDeclareOk,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import ChannelClosed
from conformance.model import timeouts as model
from conformance.plugin.admin import AdminError, RestoringAdmin
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable, unimplemented
from conformance.results.verdicts import HarnessError
from conformance.suite.queue_steps import (
    CLASSIC,
    QUORUM,
    STREAM,
    Publisher,
    assert_quiet,
    bodies,
    get,
    get_all,
    ready,
    require_kind,
    settle,
    tag_of,
    take,
    take_one,
)
from conformance.suite.timeout_steps import (
    LEGACY_QUIET,
    LEGACY_TIMEOUT,
    LONG,
    MARGIN_S,
    NO_CAPABILITY,
    SHORT,
    Connect,
    assert_nothing_fires,
    assert_timeout_close,
    await_cancel,
    await_close,
    await_counts,
    await_reaction,
    can_set_global,
    consume,
    detection_deadline,
    exact,
    legacy_tick,
    open_with_global,
    per_delivery,
    policy_on,
    prefetch,
    queue_counts,
    queue_with,
    quiet_window,
    set_global,
)
from conformance.suite.wire_steps import sync

INVALID_ARG = "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for "
UNKNOWN_TAG = "PRECONDITION_FAILED - unknown delivery tag {}"
CAPABLE = model.Reaction(model.CANCEL)


def expected_reaction(target: Target, effective: int, *, cancel_notify: bool = True,
                      registered: bool = True) -> model.Reaction:
    return model.reaction(target.profile.name, effective, cancel_notify=cancel_notify,
                          consumer_registered=registered)


def require_legacy(target: Target, what: str) -> None:
    if per_delivery(target):
        not_applicable(f"{what}: RabbitMQ ≤4.2 only")


# -- TMO-01: the global setting -----------------------------------------------------------------
@pytest.mark.rules("TMO-01")
def test_global_default_is_30_minutes(target: Target, admin: RestoringAdmin) -> None:
    value = admin.get_global("consumer_timeout")
    assert isinstance(value, int) and not isinstance(value, bool) and value > 0, (
        f"consumer_timeout = {value!r}: want a positive integer (ms)")
    if value != model.DEFAULT_CONSUMER_TIMEOUT:
        not_applicable(f"the broker is configured with consumer_timeout = {value} ms; its default "
                       f"({model.DEFAULT_CONSUMER_TIMEOUT} ms) cannot be observed")


@pytest.mark.rules("TMO-01")
def test_the_global_value_is_used_when_nothing_else_is_set(connect: Connect, names: Names, target: Target,
                                                           admin: RestoringAdmin) -> None:
    """4.3: a quorum consumer with no argument or policy gets basic.cancel after the global
    value; ≤4.2: the channel.close text names the global value as the one used."""
    legacy_tick(admin, target)
    client = connect()
    queue = queue_with(client, client.channel(), names, QUORUM, count=1)
    value = SHORT if per_delivery(target) else LEGACY_TIMEOUT
    if per_delivery(target):
        set_global(admin, value)
        ch = client.channel()
    else:
        [ch] = open_with_global(admin, value, lambda: [client.channel()])
    start = time.monotonic()
    consume(client, ch, queue, "c")
    take_one(client, ch)
    effective = model.effective_consumer_timeout(target.profile.name, global_=value)
    assert effective == value
    await_reaction(client, ch, expected_reaction(target, value), detection_deadline(target, value), start)


@pytest.mark.rules("TMO-01")
def test_no_timeout_within_seconds_by_default(connect: Connect, names: Names, target: Target,
                                              admin: RestoringAdmin) -> None:
    """With nothing configured (the 30 min default), an unacked delivery is left alone; on
    ≤4.2 under a short tick, so the check is not vacuous."""
    legacy_tick(admin, target)
    client = connect()
    setup = client.channel()
    queues = [queue_with(client, setup, names, kind, count=1) for kind in (CLASSIC, QUORUM)]
    ch = client.channel()
    for i, queue in enumerate(queues):
        consume(client, ch, queue, f"c{i}")
    assert len(take(client, ch, 2)) == 2
    assert_nothing_fires(client, ch, quiet_window(target))
    client.send(ch, BasicAck(delivery_tag=0, multiple=True))
    assert [queue_counts(client, ch, q)[0] for q in queues] == [0, 0]


@pytest.mark.slow
@pytest.mark.rules("TMO-01")
def test_undefined_global_disables_timeouts_before_4_3(connect: Connect, names: Names, target: Target,
                                                       admin: RestoringAdmin) -> None:
    require_legacy(target, "{consumer_timeout, undefined} disables timeouts (4.3 asserts an integer)")
    legacy_tick(admin, target)
    client = connect()
    queue = queue_with(client, client.channel(), names, CLASSIC, count=1)
    [ch] = open_with_global(admin, None, lambda: [client.channel()])
    consume(client, ch, queue, "c")
    delivery = take_one(client, ch)
    assert model.effective_consumer_timeout(target.profile.name, disabled=True) is None
    assert_nothing_fires(client, ch, target.timeout(LEGACY_QUIET * 1.5))
    client.send(ch, BasicAck(delivery_tag=delivery.tag))
    assert ready(client, ch, queue) == 0


# -- TMO-02: the channel tick (≤4.2) -----------------------------------------------------------
@pytest.mark.slow
@pytest.mark.rules("TMO-02")
def test_timeouts_are_detected_on_the_channel_tick(connect: Connect, names: Names, target: Target,
                                                   admin: RestoringAdmin) -> None:
    """A 200 ms timeout under a 3 s tick fires at the first tick (≈3 s after channel.open),
    not at the delivery's deadline (≈0.2 s) as on 4.3."""
    tick = 3000
    admin.set_global("channel_tick_interval", tick)
    client = connect()
    queue = queue_with(client, client.channel(), names, CLASSIC, count=1)
    opened: list[float] = []

    def open_one() -> list[int]:
        opened.append(time.monotonic())  # the tick is armed after this channel.open
        return [client.channel()]

    [ch] = open_with_global(admin, SHORT, open_one)
    consume(client, ch, queue, "c")
    take_one(client, ch)
    earliest, latest = model.detection_window(target.profile.name, SHORT, tick)
    fired = await_close(client, ch, latest / 1000 + target.timeout(3.0), since=opened[0])
    assert_timeout_close(fired.close, ch, SHORT)
    assert fired.seconds >= 0.5 * tick / 1000, (
        f"fired {fired.seconds:.2f} s after channel.open: before the first {tick} ms tick, "
        f"as if at the delivery's deadline ({earliest:.0f} ms)")


# -- TMO-03: which value wins ------------------------------------------------------------------
@dataclass(frozen=True)
class Levels:
    consumer: int | None = None
    queue: int | None = None
    policy: int | None = None
    global_: int | None = None


PRECEDENCE = {
    "queue-argument": Levels(queue=SHORT),
    "consumer-argument": Levels(consumer=SHORT, queue=LONG),
    "consumer-beats-shorter-queue": Levels(consumer=LONG, queue=SHORT),
    "policy": Levels(policy=SHORT),
    "min-queue-shorter": Levels(queue=SHORT, policy=LONG),
    "min-policy-shorter": Levels(queue=LONG, policy=SHORT),
    "consumer-beats-shorter-policy": Levels(consumer=LONG, policy=SHORT),
    "global": Levels(global_=SHORT),
    "queue-beats-shorter-global": Levels(queue=LONG, global_=SHORT),
    "policy-beats-shorter-global": Levels(policy=LONG, global_=SHORT),
    "consumer-beats-shorter-global": Levels(consumer=LONG, global_=SHORT),
}


@pytest.mark.rules("TMO-03")
@pytest.mark.parametrize("case", list(PRECEDENCE))
def test_which_timeout_value_wins(connect: Connect, names: Names, target: Target, admin: RestoringAdmin,
                                  case: str) -> None:
    """Consumer argument > min(queue argument, policy) > global (4.3, quorum queues); the
    ≤4.2 variants per the model (3.12/4.0 ignore the consumer argument, 3.10 everything but
    the global value, and 3.10 refuses `consumer-timeout` as a policy key)."""
    levels = PRECEDENCE[case]
    profile = target.profile.name
    legacy_tick(admin, target)
    client = connect()
    setup = client.channel()
    queue = queue_with(client, setup, names, QUORUM, levels.queue, count=1)
    if levels.policy is not None:
        if not model.policy_key_exists(profile):
            with pytest.raises(AdminError, match="not recognised"):
                policy_on(admin, target, queue, levels.policy)
            return  # the rabbitmq-3.10 variant: consumer-timeout is no policy key
        policy_on(admin, target, queue, levels.policy)
    if levels.global_ is None:
        ch = client.channel()
    elif per_delivery(target):
        set_global(admin, levels.global_)
        ch = client.channel()
    else:
        [ch] = open_with_global(admin, levels.global_, lambda: [client.channel()])
    start = time.monotonic()
    consume(client, ch, queue, "c", levels.consumer)
    take_one(client, ch)
    effective = model.effective_consumer_timeout(profile, levels.consumer, levels.queue, levels.policy,
                                                 levels.global_)
    if effective is not None and effective <= SHORT:
        await_reaction(client, ch, expected_reaction(target, effective), detection_deadline(target, effective),
                       start)
    else:
        assert_nothing_fires(client, ch, quiet_window(target))


# -- TMO-04: validating the arguments -----------------------------------------------------------
VALIDATION = [
    ("declare", QUORUM, -1), ("declare", QUORUM, "abc"), ("declare", QUORUM, 1.5),
    ("declare", QUORUM, 0), ("declare", QUORUM, 5000), ("declare", CLASSIC, 5000),
    ("consume", QUORUM, -1), ("consume", QUORUM, "abc"), ("consume", QUORUM, 0),
    ("consume", QUORUM, 5000), ("consume", CLASSIC, 5000),
]


@pytest.mark.rules("TMO-04")
@pytest.mark.parametrize(("where", "kind", "value"), VALIDATION,
                         ids=[f"{w}-{k}-{v}" for w, k, v in VALIDATION])
def test_timeout_arguments_are_validated(connect: Connect, names: Names, target: Target, where: str,
                                         kind: str, value: Any) -> None:
    """4.3: 406 for a value that is not a non-negative integer, for the consumer argument on a
    classic queue and for the queue argument on a classic queue; ≤4.2: accepted (ignored or
    unvalidated)."""
    refused = model.argument_refused(target.profile.name, kind, value, on_consume=where == "consume")
    client = connect()
    ch = client.channel()
    if where == "declare":
        queue = names.queue(kind)
        args = {model.ARGUMENT: value, **({} if kind == CLASSIC else {"x-queue-type": kind})}
        method: Any = QueueDeclare(queue=queue, durable=kind != CLASSIC, arguments=args)
        reply: type = QueueDeclareOk
        ids = METHOD_IDS["queue.declare"]
    else:
        queue = queue_with(client, ch, names, kind)
        method, reply, ids = BasicConsume(queue=queue, arguments={model.ARGUMENT: value}), BasicConsumeOk, METHOD_IDS["basic.consume"]
    if not refused:
        client.rpc(ch, method, reply)
        return
    with pytest.raises(ChannelClosed) as info:
        client.rpc(ch, method, reply)
    closed = info.value
    assert (closed.scope, closed.code, closed.class_id, closed.method_id) == ("channel", ReplyCode.PRECONDITION_FAILED, *ids), closed
    assert closed.text.startswith(INVALID_ARG) and f"'{queue}'" in closed.text, closed.text
    if kind != QUORUM:
        assert "of queue type" in closed.text, closed.text


@pytest.mark.rules("TMO-04")
def test_zero_is_an_immediate_timeout(connect: Connect, names: Names, target: Target,
                                      admin: RestoringAdmin) -> None:
    """0 is not "disabled" [INF]: 4.3 with the consumer argument, 3.12/4.0 with the queue argument."""
    profile = target.profile.name
    if not model.policy_key_exists(profile):
        not_applicable("rabbitmq-3.10 ignores both x-consumer-timeout arguments (TMO-03 variant)")
    legacy_tick(admin, target)
    client = connect()
    on_consumer = per_delivery(target)
    queue = queue_with(client, client.channel(), names, QUORUM, None if on_consumer else 0, count=1)
    ch = client.channel()
    start = time.monotonic()
    consume(client, ch, queue, "c", 0 if on_consumer else None)
    take_one(client, ch)
    effective = model.effective_consumer_timeout(profile, 0 if on_consumer else None, None if on_consumer else 0)
    assert effective == 0
    await_reaction(client, ch, expected_reaction(target, 0), detection_deadline(target, 0), start)


# -- TMO-3x-1..4: the channel tick (≤4.2) --------------------------------------------------------
@pytest.mark.rules("TMO-3x-1")
def test_every_queue_type_and_basic_get_time_out(connect: Connect, names: Names, target: Target,
                                                 admin: RestoringAdmin) -> None:
    legacy_tick(admin, target)
    client = connect()
    setup = client.channel()
    cases = [(how, kind) for how in ("consume", "get") for kind in (CLASSIC, QUORUM)]
    queues = [queue_with(client, setup, names, kind, count=1, label=f"{how}-{kind}") for how, kind in cases]
    chans = open_with_global(admin, LEGACY_TIMEOUT, lambda: [client.channel() for _ in cases])
    start = time.monotonic()
    for ch, queue, (how, kind) in zip(chans, queues, cases, strict=True):
        if how == "consume":
            consume(client, ch, queue, f"{kind}-consumer")
            take_one(client, ch)
        else:
            assert get(client, ch, queue) is not None
    for ch, (how, kind) in zip(chans, cases, strict=True):
        effective = model.effective_consumer_timeout(target.profile.name, queue_type=kind, global_=LEGACY_TIMEOUT)
        assert effective is not None
        await_reaction(client, ch, expected_reaction(target, effective, registered=how == "consume"),
                       detection_deadline(target, effective), start)


@pytest.mark.rules("TMO-3x-1")
def test_only_the_oldest_delivery_is_checked(connect: Connect, names: Names, target: Target,
                                             admin: RestoringAdmin) -> None:
    """3.12+: the oldest delivery's queue decides: a LONG-queue delivery ahead of a SHORT-queue
    one keeps the channel open although the second is far past its queue's timeout.
    (On 3.10 every delivery has the same T, so "oldest only" is not observable.)"""
    require_legacy(target, "the channel tick")
    if not model.policy_key_exists(target.profile.name):
        not_applicable("rabbitmq-3.10: one global T for every delivery; the oldest-only check is not observable")
    legacy_tick(admin, target)
    client = connect()
    setup = client.channel()
    slow_queue = queue_with(client, setup, names, CLASSIC, LONG, count=1, label="long")
    fast_queue = queue_with(client, setup, names, QUORUM, SHORT, count=1, label="short")
    ch = client.channel()
    consume(client, ch, slow_queue, "old")
    take_one(client, ch)
    consume(client, ch, fast_queue, "new")
    take_one(client, ch)
    assert_nothing_fires(client, ch, quiet_window(target))
    client.send(ch, BasicAck(delivery_tag=1))  # now the SHORT delivery is the oldest
    await_close(client, ch, detection_deadline(target, SHORT))


@pytest.mark.rules("TMO-3x-2")
def test_timeout_closes_the_channel_whatever_the_capability(connect: Connect, names: Names, target: Target,
                                                            admin: RestoringAdmin) -> None:
    """channel.close 406 0/0 with the value used, with and without consumer_cancel_notify; the
    connection stays; every unacked delivery of the channel (two consumers, one basic.get,
    classic and quorum) is requeued and redelivered with redelivered=true."""
    legacy_tick(admin, target)
    clients = [connect(), connect(capabilities=NO_CAPABILITY)]
    layout: list[tuple[Any, dict[str, str]]] = []
    for client in clients:
        setup = client.channel()
        queues = {label: queue_with(client, setup, names, kind, count=1, label=label)
                  for label, kind in (("classic", CLASSIC), ("quorum", QUORUM), ("get", CLASSIC))}
        layout.append((client, queues))
    chans = open_with_global(admin, LEGACY_TIMEOUT, lambda: [c.channel() for c in clients])
    start = time.monotonic()
    for (client, queues), ch in zip(layout, chans, strict=True):
        consume(client, ch, queues["classic"], "c1")
        consume(client, ch, queues["quorum"], "c2")
        assert len(take(client, ch, 2)) == 2
        assert get(client, ch, queues["get"]) is not None
    for (client, queues), ch in zip(layout, chans, strict=True):
        effective = model.effective_consumer_timeout(target.profile.name, global_=LEGACY_TIMEOUT)
        assert effective is not None
        await_reaction(client, ch, expected_reaction(target, effective), detection_deadline(target, effective),
                       start)
        other = client.channel()  # the connection stays open
        for queue in queues.values():
            await_counts(client, other, queue, target.timeout(5.0), ready=1)
            again = get_all(client, other, queue)
            assert bodies(again) == [b"m1"] and again[0].redelivered, (queue, again)


@pytest.mark.rules("TMO-3x-3")
@pytest.mark.parametrize("case", ["unknown-tag", "tag-collision"])
def test_late_ack_on_a_new_channel(connect: Connect, names: Names, target: Target, admin: RestoringAdmin,
                                   case: str) -> None:
    """The timed-out channel is gone: its tag is unknown on a new channel (406, ACK-03), or
    names an unrelated delivery there (tags restart at 1) and silently acks it [INF]."""
    legacy_tick(admin, target)
    client = connect()
    setup = client.channel()
    queue = queue_with(client, setup, names, CLASSIC, count=1, label="timed")
    unrelated = queue_with(client, setup, names, CLASSIC, count=1, label="unrelated")
    [ch] = open_with_global(admin, LEGACY_TIMEOUT, lambda: [client.channel()])
    consume(client, ch, queue, "c")
    late_tag = take_one(client, ch).tag
    await_close(client, ch, detection_deadline(target, LEGACY_TIMEOUT))
    new = client.channel()
    if case == "unknown-tag":
        client.send(new, BasicAck(delivery_tag=late_tag))
        with pytest.raises(ChannelClosed) as info:
            ready(client, new, queue)
        closed = info.value
        assert (closed.scope, closed.code, closed.class_id, closed.method_id) == ("channel", ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["basic.ack"]), closed
        assert closed.text == UNKNOWN_TAG.format(late_tag)
        await_counts(client, client.channel(), queue, target.timeout(5.0), ready=1)
        return
    other = get(client, new, unrelated)
    assert tag_of(other) == late_tag == 1
    client.send(new, BasicAck(delivery_tag=late_tag))  # meant for the timed-out delivery
    assert ready(client, new, unrelated) == 0  # the unrelated message is gone
    client.close_channel(new)
    await_counts(client, client.channel(), queue, target.timeout(5.0), ready=1)  # the timed-out one is not


@pytest.mark.rules("TMO-3x-4")
def test_the_global_value_is_read_when_the_channel_opens(connect: Connect, names: Names, target: Target,
                                                         admin: RestoringAdmin) -> None:
    """Channels opened before and after a short global value keep the long one; only the
    channel opened while it was set times out."""
    legacy_tick(admin, target)
    client = connect()
    setup = client.channel()
    queues = [queue_with(client, setup, names, CLASSIC, count=1, label=label)
              for label in ("before", "during", "after")]
    before = client.channel()
    [during] = open_with_global(admin, LEGACY_TIMEOUT, lambda: [client.channel()])
    after = client.channel()
    chans = [before, during, after]
    start = time.monotonic()
    for ch, queue in zip(chans, queues, strict=True):
        consume(client, ch, queue, "c")
        take_one(client, ch)
    fired = await_close(client, during, detection_deadline(target, LEGACY_TIMEOUT), start)
    assert_timeout_close(fired.close, during, LEGACY_TIMEOUT)
    assert_nothing_fires(client, before, target.timeout(LEGACY_QUIET))
    assert_nothing_fires(client, after, 0.0)  # read during the wait above
    for ch in (before, after):
        client.send(ch, BasicAck(delivery_tag=1))
    assert [ready(client, setup, q) for q in (queues[0], queues[2])] == [0, 0]


@pytest.mark.rules("TMO-3x-4")
def test_queue_values_are_looked_up_at_each_tick(connect: Connect, names: Names, target: Target,
                                                 admin: RestoringAdmin) -> None:
    """3.12+: a consumer-timeout policy set after the delivery applies at the next tick."""
    require_legacy(target, "the channel tick")
    if not model.policy_key_exists(target.profile.name):
        not_applicable("rabbitmq-3.10 has no per-queue value")
    legacy_tick(admin, target)
    client = connect()
    setup = client.channel()
    queue = queue_with(client, setup, names, CLASSIC, count=1)
    ch = client.channel()
    consume(client, ch, queue, "c")
    take_one(client, ch)
    assert_nothing_fires(client, ch, target.timeout(1.0))
    policy_on(admin, target, queue, SHORT)
    fired = await_close(client, ch, detection_deadline(target, SHORT))
    assert_timeout_close(fired.close, ch, SHORT)


# -- TMO-4.3-1: only quorum queues time out ------------------------------------------------------
@pytest.mark.rules("TMO-4.3-1")
@pytest.mark.parametrize("kind", [CLASSIC, STREAM])
def test_classic_queues_and_streams_never_time_out(connect: Connect, names: Names, target: Target,
                                                   admin: RestoringAdmin, kind: str) -> None:
    """A consumer-timeout policy (and a short global value, where the adapter can set it)
    that times out a quorum consumer leaves a classic or stream consumer's deliveries (and a
    classic basic.get's) alone."""
    require_kind(target.profile, kind)
    client = connect()
    setup = client.channel()
    try:
        queue = queue_with(client, setup, names, kind, count=2)
    except ChannelClosed as closed:
        if kind == STREAM and closed.code in (ReplyCode.PRECONDITION_FAILED, ReplyCode.NOT_IMPLEMENTED):
            unimplemented(f"stream queues: {closed}")
        raise
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
    take_one(client, control)
    assert model.effective_consumer_timeout(target.profile.name, policy=SHORT, global_=SHORT, queue_type=kind) is None
    await_cancel(client, control, detection_deadline(target, SHORT), start)  # the same settings fire there
    assert_nothing_fires(client, ch, quiet_window(target))
    client.send(ch, BasicAck(delivery_tag=0, multiple=True))
    sync(client, ch)
    if kind == CLASSIC:
        assert ready(client, ch, queue) == 0


# -- TMO-4.3-2: deadlines in the quorum queue -------------------------------------------------------
@pytest.mark.rules("TMO-4.3-2")
def test_timeout_returns_the_message_first_and_pauses_the_consumer(connect: Connect, names: Names,
                                                                    target: Target) -> None:
    """Fires at the deadline (not on a 60 s tick); the message goes back ready and is
    delivered first, without a delivery-count increment; the consumer gets nothing more
    although it has capacity and messages are ready."""
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


@pytest.mark.rules("TMO-4.3-2")
def test_partial_timeout_returns_only_expired_deliveries(connect: Connect, names: Names, target: Target) -> None:
    """m1 and m2 reach the same consumer half a timeout apart: at m1's deadline only m1 goes
    back; m2 stays checked out, so acking it then removes it."""
    timeout_ms = int(2400 * target.timeout_scale)
    client = connect()
    setup = client.channel()
    queue = queue_with(client, setup, names, QUORUM, count=1)
    publisher = Publisher(client)
    ch = client.channel()
    consume(client, ch, queue, "a", timeout_ms)
    assert take_one(client, ch).body == b"m1"
    time.sleep(timeout_ms / 2000)  # the gap between the two deadlines
    publisher.publish(queue, [b"m2"])
    m2 = take_one(client, ch)
    m2_deadline = time.monotonic() + timeout_ms / 1000
    assert m2.body == b"m2"
    await_cancel(client, ch, detection_deadline(target, timeout_ms))
    left = m2_deadline - time.monotonic() - 0.3  # m2 must still be checked out while we look
    if left <= 0:
        raise HarnessError("m1's timeout was seen too close to m2's deadline: rerun with a larger --timeout-scale")
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
@pytest.mark.rules("TMO-4.3-3")
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


@pytest.mark.rules("TMO-4.3-3")
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
@pytest.mark.rules("TMO-4.3-4")
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


# -- TMO-4.3-5: a late ack is accepted --------------------------------------------------------------
@pytest.mark.rules("TMO-4.3-5")
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
def test_consumer_disconnected_timeout_argument_is_accepted(connect: Connect, names: Names) -> None:
    client = connect()
    queue_with(client, client.channel(), names, QUORUM, extra={"x-consumer-disconnected-timeout": 60000})


@pytest.mark.rules("TMO-4.3-6")
def test_consumer_disconnected_timeout_policy_key_is_accepted(connect: Connect, names: Names, target: Target,
                                                              admin: RestoringAdmin) -> None:
    client = connect()
    queue = queue_with(client, client.channel(), names, QUORUM)
    try:
        admin.put_policy(target.vhost, f"{queue}.cdt", exact(queue), {"consumer-disconnected-timeout": 60000},
                         "queues", 100)
    except AdminError as exc:
        raise AssertionError(f"policy key consumer-disconnected-timeout refused: {exc}") from None
