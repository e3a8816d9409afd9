"""Prefetch over the wire: basic.qos and channel.flow, QOS-01..11 and S001-05/06.

Rules:
- "No more deliveries" is a short bounded poll (`QUIET`, scaled); a count of deliveries is
  taken by draining until the channel stays quiet that long. Messages are published (and
  confirmed) before consumers start, so every delivery the limit allows is due at once.
- The meaning of global=true depends on the profile (QOS-03): per consumer on rabbitmq-4.3
  (deprecated feature denied by default), one limit per channel on earlier RabbitMQ, one limit
  per connection on a plain AMQP 0-9-1 broker. Tests assert the variant that applies.
- Errors are compared by scope, code and class/method id; a text only where the rule states it
  (QOS-06's, on RabbitMQ). QOS-01's and QOS-11's texts: errors/test_error_texts.py.
"""

from __future__ import annotations

import pytest

from codec import (
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicQos,
    BasicQosOk,
    BasicRecover,
    BasicRecoverOk,
    ChannelFlow,
    ChannelFlowOk,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import ChannelClosed, ConnectionClosed
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.queues import (
    CLASSIC,
    QUORUM,
    STREAM,
    Connect,
    Delivery,
    Publisher,
    assert_quiet,
    bodies,
    consume,
    declare,
    drain,
    get_all,
    global_qos_is_channel_wide,
    messages,
    per_consumer,
    ready,
    require_kind,
    take_now,
    take_one_now,
)

QUIET = 0.3  # seconds (scaled): how long "nothing more arrives" is watched


class QosBench:
    """One client and channel, and classic queues filled on demand."""

    def __init__(self, connect: Connect, names: Names, target: Target) -> None:
        self.client = connect()
        self.ch = self.client.channel()
        self.names, self.target = names, target
        self.publisher = Publisher(self.client)
        self.quiet = target.timeout(QUIET)

    def queue(self, count: int, label: str = "q") -> str:
        queue = declare(self.client, self.ch, self.names.queue(label))
        if count:
            self.publisher.publish(queue, messages(count))
        return queue

    def qos(self, count: int, global_: bool = False, ch: int | None = None) -> None:
        self.client.rpc(self.ch if ch is None else ch, BasicQos(prefetch_count=count, global_=global_),
                        BasicQosOk)

    def consume(self, queue: str, no_ack: bool = False, ch: int | None = None) -> str:
        return consume(self.client, self.ch if ch is None else ch, queue, no_ack=no_ack)

    def drain(self, ch: int | None = None) -> list[Delivery]:
        return drain(self.client, self.ch if ch is None else ch, self.quiet)

    def take_now(self, count: int, ch: int | None = None) -> list[Delivery]:
        """Exactly the next `count` deliveries (each awaited within the client timeout)."""
        return take_now(self.client, self.ch if ch is None else ch, count)

    def assert_quiet(self, ch: int | None = None) -> None:
        """Nothing more is delivered within the (short, bounded) quiet window."""
        assert_quiet(self.client, self.ch if ch is None else ch, self.quiet)

    def ack(self, tag: int, multiple: bool = False) -> None:
        self.client.send(self.ch, BasicAck(delivery_tag=tag, multiple=multiple))


@pytest.fixture
def bench(connect: Connect, names: Names, target: Target) -> QosBench:
    return QosBench(connect, names, target)


# -- QOS-01, QOS-11: refused settings ----------------------------------------------------------
@pytest.mark.rules("QOS-01")
@pytest.mark.clauses("QOS-01.a")
def test_prefetch_size_is_a_connection_error_540(bench: QosBench) -> None:
    bench.client.send(bench.ch, BasicQos(prefetch_size=65536, prefetch_count=10))
    if bench.target.profile.expect("QOS-01") != "required":
        try:  # the spec field may be honoured
            bench.client.expect(bench.ch, BasicQosOk)
            return
        except ConnectionClosed as refused:
            assert refused.code == ReplyCode.NOT_IMPLEMENTED
            return
    with pytest.raises(ConnectionClosed) as closed:
        bench.client.expect(bench.ch, BasicQosOk)
    c = closed.value
    assert (c.scope, c.code, c.class_id, c.method_id) == ("connection", ReplyCode.NOT_IMPLEMENTED, *METHOD_IDS["basic.qos"])


@pytest.mark.rules("QOS-11")
@pytest.mark.clauses("QOS-11.c")
def test_channel_flow_active_true_is_answered_flow_ok(bench: QosBench) -> None:
    reply = bench.client.rpc(bench.ch, ChannelFlow(active=True), ChannelFlowOk).method
    assert isinstance(reply, ChannelFlowOk) and reply.active is True


@pytest.mark.rules("QOS-11")
@pytest.mark.clauses("QOS-11.a")
def test_channel_flow_active_false_is_a_connection_error_540(bench: QosBench) -> None:
    bench.client.send(bench.ch, ChannelFlow(active=False))
    if bench.target.profile.expect("QOS-11") != "required":  # spec: flow stops, flow-ok{false}
        reply = bench.client.expect(bench.ch, ChannelFlowOk).method
        assert isinstance(reply, ChannelFlowOk) and reply.active is False
        return
    with pytest.raises(ConnectionClosed) as closed:
        bench.client.expect(bench.ch, ChannelFlowOk)
    c = closed.value
    assert (c.scope, c.code, c.class_id, c.method_id) == ("connection", ReplyCode.NOT_IMPLEMENTED, *METHOD_IDS["channel.flow"])


# -- S001-05, S001-06: the limit caps unacked deliveries; acks free capacity --------------------
@pytest.mark.rules("S001-05")
@pytest.mark.clauses("S001-05.a", "S001-05.b")
def test_prefetch_count_caps_unacked_deliveries(bench: QosBench) -> None:
    queue = bench.queue(6)
    bench.qos(4)
    bench.consume(queue)
    assert [d.tag for d in bench.take_now(4)] == [1, 2, 3, 4]
    bench.assert_quiet()
    assert ready(bench.client, bench.ch, queue) == 2


@pytest.mark.rules("S001-06")
@pytest.mark.clauses("S001-06.a", "S001-06.b")
def test_acks_free_prefetch_capacity_one_by_one_or_several_at_once(bench: QosBench) -> None:
    queue = bench.queue(10)
    bench.qos(4)
    bench.consume(queue)
    assert [d.tag for d in bench.take_now(4)] == [1, 2, 3, 4]
    bench.ack(1)
    assert [d.tag for d in bench.take_now(1)] == [5]  # one ack, one more delivery
    bench.ack(5, multiple=True)  # settles 2..5
    assert [d.tag for d in bench.take_now(4)] == [6, 7, 8, 9]
    bench.assert_quiet()  # and no more than that, all along
    assert ready(bench.client, bench.ch, queue) == 1


# -- QOS-02: global=false -------------------------------------------------------------------------
@pytest.mark.rules("QOS-02")
@pytest.mark.clauses("QOS-02.a", "QOS-02.d")
def test_global_false_limits_each_consumer_separately(bench: QosBench) -> None:
    q1, q2 = bench.queue(5, "a"), bench.queue(5, "b")
    bench.qos(2)
    c1, c2 = bench.consume(q1), bench.consume(q2)
    if bench.target.profile.expect("QOS-02") == "required":
        assert per_consumer(bench.take_now(4)) == {c1: 2, c2: 2}
    else:  # AMQP 0-9-1: one limit shared by the channel's consumers
        bench.take_now(2)
    bench.assert_quiet()


@pytest.mark.rules("QOS-02")
@pytest.mark.clauses("QOS-02.b")
def test_global_false_applies_only_to_consumers_created_afterwards(bench: QosBench) -> None:
    if bench.target.profile.expect("QOS-02") != "required":
        not_applicable("AMQP 0-9-1: global=false is a channel limit, not a per-consumer one")
    q1, q2 = bench.queue(5, "a"), bench.queue(5, "b")
    bench.qos(1)
    c1 = bench.consume(q1)
    first = bench.take_now(1)
    bench.qos(3)  # existing consumer c1 keeps its limit of 1
    c2 = bench.consume(q2)
    assert per_consumer(bench.take_now(3)) == {c2: 3}
    bench.ack(first[0].tag)
    assert per_consumer(bench.take_now(1)) == {c1: 1}
    bench.assert_quiet()  # c1 never held more than 1, c2 never more than 3


@pytest.mark.rules("QOS-02")
@pytest.mark.clauses("QOS-02.c")
def test_prefetch_count_0_means_unlimited(bench: QosBench) -> None:
    queue = bench.queue(12)
    bench.qos(1)
    bench.qos(0)
    bench.consume(queue)
    assert bodies(bench.take_now(12)) == messages(12)  # no acks needed for any of them


# -- QOS-03..06: global=true -------------------------------------------------------------------
@pytest.mark.rules("QOS-03")
@pytest.mark.clauses("QOS-03.a", "QOS-03.b")
def test_global_true_scope_depends_on_the_version(bench: QosBench) -> None:
    q1, q2, q3 = bench.queue(5, "a"), bench.queue(5, "b"), bench.queue(5, "c")
    other = bench.client.channel()
    bench.qos(2, global_=True)
    c1, c2 = bench.consume(q1), bench.consume(q2)
    bench.consume(q3, ch=other)  # no qos on this channel
    profile = bench.target.profile
    if profile.rabbitmq and profile.at_least("4.3"):  # treated as global=false (per consumer)
        assert per_consumer(bench.take_now(4)) == {c1: 2, c2: 2}
        assert len(bench.take_now(5, other)) == 5
    elif global_qos_is_channel_wide(profile):  # one limit shared by the channel's consumers
        bench.take_now(2)
        assert len(bench.take_now(5, other)) == 5
    else:  # AMQP 0-9-1: shared by every consumer on the connection
        mine, others = len(bench.drain()), len(bench.drain(other))
        assert mine + others == 2, (
            f"deliveries under global=true prefetch 2 (0-9-1: one limit for the connection): {mine} on the qos "
            f"channel and {others} on another channel, {mine + others} in all, want 2 in all")
    bench.assert_quiet()


@pytest.mark.rules("QOS-04")
@pytest.mark.clauses("QOS-04.a")
def test_per_consumer_and_channel_limits_are_enforced_together(bench: QosBench) -> None:
    q1, q2 = bench.queue(5, "a"), bench.queue(5, "b")
    bench.qos(2, global_=False)
    bench.qos(3, global_=True)
    c1 = bench.consume(q1)
    assert per_consumer(bench.take_now(2)) == {c1: 2}
    c2 = bench.consume(q2)
    assert per_consumer(bench.take_now(1)) == {c2: 1}
    bench.assert_quiet()  # c1 stopped by its own limit (2), c2 by the channel's (3)


@pytest.mark.rules("QOS-05")
@pytest.mark.clauses("QOS-05.a")
def test_new_global_limit_counts_unacked_consumer_deliveries(bench: QosBench) -> None:
    queue = bench.queue(1)
    bench.consume(queue)
    bench.take_now(1)  # unlimited so far: one unacked delivery
    bench.qos(2, global_=True)
    bench.publisher.publish(queue, [b"m2", b"m3"])
    assert bodies(bench.take_now(1)) == [b"m2"]
    bench.assert_quiet()  # 1 + 1 = 2


@pytest.mark.rules("QOS-05")
@pytest.mark.clauses("QOS-05.b")
def test_new_global_limit_counts_unacked_basic_get_deliveries(bench: QosBench) -> None:
    q1, q2 = bench.queue(1, "get"), bench.queue(3, "consume")
    assert len(get_all(bench.client, bench.ch, q1)) == 1
    bench.qos(2, global_=True)
    bench.consume(q2)
    bench.take_now(1)
    bench.assert_quiet()  # the unacked basic.get delivery uses one of the two


@pytest.mark.rules("QOS-05")
@pytest.mark.clauses("QOS-05.c")
def test_recover_lowers_the_global_count(bench: QosBench) -> None:
    queue = bench.queue(3)
    bench.qos(2, global_=True)
    bench.consume(queue)
    assert bodies(bench.take_now(2)) == [b"m1", b"m2"]
    bench.client.rpc(bench.ch, BasicRecover(requeue=True), BasicRecoverOk)
    # the count went back to 0: two deliveries again. Which two is a race on RabbitMQ 3.10
    # (the limiter may resume the queue before the requeue lands, so m3 can come first).
    assert len(bench.take_now(2)) == 2
    bench.assert_quiet()
    assert ready(bench.client, bench.ch, queue) == 1


@pytest.mark.rules("QOS-06")
@pytest.mark.clauses("QOS-06.a", "QOS-06.b", "QOS-06.c")
@pytest.mark.parametrize("kind", [QUORUM, STREAM])
def test_quorum_and_stream_consumers_refused_under_a_global_limit(bench: QosBench, kind: str) -> None:
    require_kind(bench.target.profile, kind)  # a RabbitMQ older than 3.9 has no streams: not-applicable
    queue = declare(bench.client, bench.ch, bench.names.queue(kind), kind)
    bench.qos(10)  # streams need a consumer prefetch; it must not be what is refused
    bench.qos(1, global_=True)
    bench.client.send(bench.ch, BasicConsume(queue=queue))
    with pytest.raises(ConnectionClosed) as closed:
        bench.client.expect(bench.ch, BasicConsumeOk)
    c = closed.value
    assert (c.scope, c.code, c.class_id, c.method_id) == ("connection", ReplyCode.NOT_IMPLEMENTED, *METHOD_IDS["basic.consume"])
    if bench.target.profile.rabbitmq:
        want = f"NOT_IMPLEMENTED - queue '{queue}' in vhost '{bench.target.vhost}' does not support global qos"
        assert c.text == want, f"QOS-06: the reply text of the 540 must be {want!r}; the broker sent {c.text!r}"


@pytest.mark.rules("QOS-06")
@pytest.mark.clauses("QOS-06.d")
def test_stream_consumer_needs_a_consumer_prefetch(bench: QosBench) -> None:
    """A stream consumer without a per-consumer prefetch is refused with 406 before any global
    qos check (so QOS-06's test sets one first)."""
    require_kind(bench.target.profile, STREAM)
    queue = declare(bench.client, bench.ch, bench.names.queue(STREAM), STREAM)
    bench.client.send(bench.ch, BasicConsume(queue=queue))
    with pytest.raises(ChannelClosed) as closed:
        bench.client.expect(bench.ch, BasicConsumeOk)
    c = closed.value
    assert (c.scope, c.code, c.class_id, c.method_id) == (
        "channel", ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["basic.consume"]), (
        f"QOS-06: basic.consume on a stream without a consumer prefetch must get channel.close 406 (60/20); "
        f"the broker sent {c.scope}.close {c.code} ({c.class_id}/{c.method_id}) {c.text!r}")
    prefix = "PRECONDITION_FAILED - consumer prefetch count is not set"
    assert not bench.target.profile.rabbitmq or c.text.startswith(prefix), (
        f"QOS-06: the reply text must start {prefix!r}; the broker sent {c.text!r}")


@pytest.mark.rules("QOS-06")
@pytest.mark.clauses("QOS-06.e")
def test_classic_consumer_accepted_under_a_global_limit(bench: QosBench) -> None:
    queue = declare(bench.client, bench.ch, bench.names.queue(CLASSIC))
    bench.qos(1, global_=True)
    bench.consume(queue)  # only quorum queues and streams refuse


# -- QOS-07, QOS-08: basic.get and no-ack consumers ---------------------------------------------
@pytest.mark.rules("QOS-07")
@pytest.mark.clauses("QOS-07.a")
@pytest.mark.parametrize("global_", [False, True], ids=["per-consumer", "global"])
def test_basic_get_ignores_prefetch(bench: QosBench, global_: bool) -> None:
    q1, q2 = bench.queue(2, "consume"), bench.queue(3, "get")
    bench.qos(1, global_=global_)
    bench.consume(q1)
    bench.take_now(1)  # the limit is reached
    assert bodies(get_all(bench.client, bench.ch, q2)) == messages(3)  # manual-ack gets, all served


@pytest.mark.rules("QOS-08")
@pytest.mark.clauses("QOS-08.a", "QOS-08.b")
@pytest.mark.parametrize("global_", [False, True], ids=["per-consumer", "global"])
def test_no_ack_consumers_are_not_limited_and_do_not_count(bench: QosBench, global_: bool) -> None:
    q1, q2 = bench.queue(5, "noack"), bench.queue(5, "manual")
    bench.qos(2, global_=global_)
    free = bench.consume(q1, no_ack=True)
    assert per_consumer(bench.take_now(5)) == {free: 5}
    limited = bench.consume(q2)
    assert per_consumer(bench.take_now(2)) == {limited: 2}
    bench.assert_quiet()


@pytest.mark.rules("QOS-08")
@pytest.mark.clauses("QOS-08.c")
def test_no_ack_consumer_waits_while_the_global_limit_is_reached(bench: QosBench) -> None:
    q1, q2 = bench.queue(1, "manual"), bench.queue(1, "noack")
    bench.qos(1, global_=True)
    bench.consume(q1)
    held = take_one_now(bench.client, bench.ch)
    free = bench.consume(q2, no_ack=True)
    if global_qos_is_channel_wide(bench.target.profile):
        bench.assert_quiet()  # classic queue, channel limit reached by a manual-ack consumer
        bench.ack(held.tag)
    assert per_consumer(bench.take_now(1)) == {free: 1}


# -- QOS-09, QOS-10: changing the limit, the default --------------------------------------------
@pytest.mark.rules("QOS-09")
@pytest.mark.clauses("QOS-09.a")
@pytest.mark.parametrize("global_", [False, True], ids=["per-consumer", "global"])
def test_lowering_the_limit_revokes_nothing_in_flight(bench: QosBench, global_: bool) -> None:
    queue = bench.queue(5)
    bench.qos(3, global_=global_)
    bench.consume(queue)
    held = bench.take_now(3)
    bench.qos(1, global_=global_)  # below the 3 in flight: allowed, nothing is taken back
    assert ready(bench.client, bench.ch, queue) == 2
    for d in held:
        bench.ack(d.tag)
    profile = bench.target.profile
    if profile.rabbitmq and (not global_ or profile.at_least("4.3")):
        bench.take_now(2)  # QOS-02: an existing consumer keeps the limit it was created with
    else:
        bench.take_now(1)  # a channel (or connection) limit: the new value counts
    bench.assert_quiet()


@pytest.mark.rules("QOS-09")
@pytest.mark.clauses("QOS-09.b", "QOS-09.c")
@pytest.mark.parametrize("new_limit", [2, 0], ids=["raised", "unlimited"])
def test_raising_a_global_limit_takes_effect_without_acks(bench: QosBench, new_limit: int) -> None:
    queue = bench.queue(4)
    bench.qos(1, global_=True)
    bench.consume(queue)
    bench.take_now(1)
    bench.qos(new_limit, global_=True)
    profile = bench.target.profile
    if not (profile.rabbitmq and profile.at_least("4.3")):  # 4.3: per consumer, it keeps 1
        bench.take_now(1 if new_limit == 2 else 3)
    if new_limit or profile.at_least("4.3"):
        bench.assert_quiet()


@pytest.mark.rules("QOS-10")
@pytest.mark.clauses("QOS-10.a")
def test_default_prefetch_is_unlimited(bench: QosBench) -> None:
    queue = bench.queue(30)
    bench.consume(queue)
    got = bench.take_now(30)  # no basic.qos, no acks: all of them
    assert bodies(got) == messages(30)
