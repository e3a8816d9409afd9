"""Consumer delivery-acknowledgement timeouts over the wire (RULES.md §6, seed 000): TMO-01..04,
the global setting, the channel tick, which value wins and the arguments' validation. TMO-3x-1..4
(RabbitMQ ≤4.2: the channel tick): test_timeout_tick.py; TMO-4.3-1..6 (4.3: deadlines in the
quorum queue): test_timeout_quorum.py; TMO-4.3-7: test_timeout_sac.py.

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
    BasicConsume,
    BasicConsumeOk,
    BasicQos,
    BasicQosOk,
    QueueDeclare,
    QueueDeclareOk,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import ChannelClosed
from conformance.model import timeouts as model
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.run.admin import AdminError
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.queues import (
    CLASSIC,
    QUORUM,
    STREAM,
    ready,
    require_kind,
    take,
    take_one,
)
from conformance.suite.steps.timeouts import (
    LEGACY_QUIET,
    LEGACY_TIMEOUT,
    LONG,
    SHORT,
    Connect,
    assert_nothing_fires,
    assert_timeout_close,
    await_close,
    await_reaction,
    consume,
    detection_deadline,
    expected_reaction,
    legacy_tick,
    open_with_global,
    per_delivery,
    policy_on,
    queue_counts,
    queue_with,
    quiet_window,
    registered,
    require_legacy,
    set_global,
)

INVALID_ARG = "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for "


# -- TMO-01: the global setting -----------------------------------------------------------------
@pytest.mark.rules("TMO-01", "TMO-03")
@pytest.mark.clauses("TMO-01.a", "TMO-03.d")
def test_global_default_is_30_minutes(target: Target, admin: RestoringAdmin) -> None:
    value = admin.get_global("consumer_timeout")
    assert isinstance(value, int) and not isinstance(value, bool) and value > 0, (
        f"consumer_timeout = {value!r}: want a positive integer (ms)")
    if value != model.DEFAULT_CONSUMER_TIMEOUT:
        not_applicable(f"the broker is configured with consumer_timeout = {value} ms; its default "
                       f"({model.DEFAULT_CONSUMER_TIMEOUT} ms) cannot be observed")


@pytest.mark.broker_wide
@pytest.mark.rules("TMO-01")
@pytest.mark.clauses("TMO-01.b")
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
    registered(admin, target)
    take_one(client, ch)
    effective = model.effective_consumer_timeout(target.profile.name, global_=value)
    assert effective == value
    await_reaction(client, ch, expected_reaction(target, value), detection_deadline(target, value), start)


@pytest.mark.broker_wide
@pytest.mark.rules("TMO-01")
@pytest.mark.clauses("TMO-01.c")
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


@pytest.mark.broker_wide
@pytest.mark.slow
@pytest.mark.rules("TMO-01")
@pytest.mark.clauses("TMO-01.d")
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


@pytest.mark.broker_wide
# -- TMO-02: the channel tick (≤4.2) -----------------------------------------------------------
@pytest.mark.slow
@pytest.mark.rules("TMO-02")
@pytest.mark.clauses("TMO-02.a", "TMO-02.c")
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


DEFAULT_TICK_MS = 60000  # channel_tick_interval's default (TMO-02)


@pytest.mark.rules("TMO-02")
@pytest.mark.clauses("TMO-02.b")
def test_the_default_tick_is_60_seconds(target: Target, admin: RestoringAdmin) -> None:
    """Read from the broker as TMO-01's default is (`--broker-admin rabbitmqctl`); a broker
    configured with another tick cannot show its default."""
    value = admin.get_global("channel_tick_interval")
    assert isinstance(value, int) and not isinstance(value, bool) and value > 0, (
        f"TMO-02: channel_tick_interval is a positive integer (ms), {DEFAULT_TICK_MS} by default; "
        f"the broker has {value!r}")
    if value != DEFAULT_TICK_MS:
        not_applicable(f"the broker is configured with channel_tick_interval = {value} ms; its default "
                       f"({DEFAULT_TICK_MS} ms) cannot be observed")


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


@pytest.mark.broker_wide
@pytest.mark.rules("TMO-03")
@pytest.mark.clauses("TMO-03.a", "TMO-03.b", "TMO-03.c", "TMO-03.e")
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
    registered(admin, target)
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
    ("consume", QUORUM, 5000), ("consume", CLASSIC, 5000), ("consume", STREAM, 5000),
]


@pytest.mark.rules("TMO-04")
@pytest.mark.clauses("TMO-04.a", "TMO-04.b", "TMO-04.c", "TMO-04.d")
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
        require_kind(target.profile, kind)
        queue = queue_with(client, ch, names, kind)
        if kind == STREAM:  # a stream consumer needs a prefetch (QOS-06): not what is judged here
            client.rpc(ch, BasicQos(prefetch_count=10), BasicQosOk)
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


@pytest.mark.broker_wide
@pytest.mark.rules("TMO-04")
@pytest.mark.clauses("TMO-04.e")
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
