"""Consumer delivery-acknowledgement timeouts over the wire (RULES.md §6, seed 000): TMO-3x-1..4,
RabbitMQ ≤4.2, where a channel tick checks the oldest delivery. The rules of test_timeout.py hold.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from codec import (
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicQos,
    BasicQosOk,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import ChannelClosed
from conformance.model import timeouts as model
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.queues import (
    CLASSIC,
    QUORUM,
    STREAM,
    Publisher,
    bodies,
    declare,
    get,
    get_all,
    ready,
    require_kind,
    tag_of,
    take,
    take_one,
)
from conformance.suite.steps.timeouts import (
    LEGACY_QUIET,
    LEGACY_TIMEOUT,
    LONG,
    NO_CAPABILITY,
    SHORT,
    Connect,
    assert_nothing_fires,
    assert_timeout_close,
    await_close,
    await_counts,
    await_reaction,
    consume,
    detection_deadline,
    exact,
    expected_reaction,
    legacy_tick,
    open_with_global,
    policy_on,
    queue_with,
    quiet_window,
    require_legacy,
)

pytestmark = pytest.mark.broker_wide  # every test sets the channel tick (≤4.2), a broker-wide setting

UNKNOWN_TAG = "PRECONDITION_FAILED - unknown delivery tag {}"


# -- TMO-3x-1..4: the channel tick (≤4.2) --------------------------------------------------------
@pytest.mark.rules("TMO-3x-1")
@pytest.mark.clauses("TMO-3x-1.b", "TMO-3x-1.d")
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
@pytest.mark.clauses("TMO-3x-1.c")
def test_stream_deliveries_time_out_too(connect: Connect, names: Names, target: Target,
                                        admin: RestoringAdmin) -> None:
    """[INF] in the rule: the tick looks at the channel's unacked list, which holds a stream
    consumer's manual-ack deliveries as well (read from the first offset, with the prefetch a
    stream consumer needs, QOS-06)."""
    require_kind(target.profile, STREAM)
    legacy_tick(admin, target)
    client = connect()
    queue = queue_with(client, client.channel(), names, STREAM, count=1)
    [ch] = open_with_global(admin, LEGACY_TIMEOUT, lambda: [client.channel()])
    client.rpc(ch, BasicQos(prefetch_count=10), BasicQosOk)
    start = time.monotonic()
    client.rpc(ch, BasicConsume(queue=queue, consumer_tag="stream", arguments={"x-stream-offset": "first"}),
               BasicConsumeOk)
    assert take_one(client, ch).body == b"m1"
    effective = model.effective_consumer_timeout(target.profile.name, global_=LEGACY_TIMEOUT)
    assert effective is not None
    await_reaction(client, ch, expected_reaction(target, effective), detection_deadline(target, effective), start)


@pytest.mark.rules("TMO-3x-1")
@pytest.mark.clauses("TMO-3x-1.e")
def test_mirrored_classic_queue_deliveries_time_out_too(connect: Connect, names: Names, target: Target,
                                                        admin: RestoringAdmin) -> None:
    """A classic queue under an ha-mode policy (set before it is declared) is a mirrored queue,
    also on a single node; the tick times its deliveries out as any other (up to 3.13: 4.0
    removed classic mirroring)."""
    if target.profile.at_least("4.0"):
        not_applicable("classic queue mirroring was removed in RabbitMQ 4.0")
    legacy_tick(admin, target)
    client = connect()
    queue = names.queue("mirrored")
    admin.put_policy(target.vhost, f"{queue}.ha", exact(queue), {"ha-mode": "all"}, "queues", 100)
    declare(client, client.channel(), queue)
    Publisher(client).publish(queue, [b"m1"])
    [ch] = open_with_global(admin, LEGACY_TIMEOUT, lambda: [client.channel()])
    start = time.monotonic()
    consume(client, ch, queue, "mirrored")
    take_one(client, ch)
    effective = model.effective_consumer_timeout(target.profile.name, queue_type=CLASSIC, global_=LEGACY_TIMEOUT)
    assert effective is not None
    await_reaction(client, ch, expected_reaction(target, effective), detection_deadline(target, effective), start)


@pytest.mark.rules("TMO-3x-1")
@pytest.mark.clauses("TMO-3x-1.a")
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
@pytest.mark.clauses("TMO-3x-2.a", "TMO-3x-2.b", "TMO-3x-2.c", "TMO-3x-2.d", "TMO-3x-2.e")
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
@pytest.mark.clauses("TMO-3x-3.a", "TMO-3x-3.b")
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
@pytest.mark.clauses("TMO-3x-4.a")
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
@pytest.mark.clauses("TMO-3x-4.b")
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
