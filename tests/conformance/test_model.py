"""The executable model (conformance.model) on its own: no broker, plain pytest and Hypothesis.

Example tests pin each rule the model encodes: delivery tags and acknowledgements, requeue and
recover, cancel and queue deletion, publisher confirms. The prefetch rules are pinned in
`test_model_prefetch.py`; `test_model_invariants.py` folds random command logs through the model
(the rabbit_fifo way) and checks its invariants after every step.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.catalogue.rules import PROFILES
from conformance.model import (
    OK,
    BrokerModel,
    ChannelClosed,
    Confirm,
    ConnectionClosed,
    Deliver,
    GetOk,
    Return,
    ServerCancel,
    Violation,
    confirm_tags,
    settle_tags,
    traits,
)
from conformance.model.traits import GlobalQos
from tests.conformance.model_steps import RABBIT_PROFILES, deliver_all, get, model, publish


def test_settle_tags_follows_ack_rules() -> None:
    assert settle_tags([1, 2, 3], 2, False) == [2]
    assert settle_tags([1, 2, 3], 2, True) == [1, 2]
    assert settle_tags([1, 2, 3], 0, True) == [1, 2, 3]  # ACK-06
    assert settle_tags([], 0, True) == []  # ACK-06: not an error with nothing outstanding
    assert settle_tags([1, 2, 3], 0, False) is None  # ACK-06
    assert settle_tags([1, 3], 2, True) is None  # ACK-05: the named tag must be outstanding
    assert settle_tags([1, 2], 7, False) is None  # ACK-03


@given(st.sets(st.integers(1, 30)), st.integers(0, 31), st.booleans())
def test_settle_tags_settles_only_outstanding_tags(outstanding: set[int], tag: int, multiple: bool) -> None:
    tags = sorted(outstanding)
    settled = settle_tags(tags, tag, multiple)
    if settled is None:
        assert tag not in outstanding and not (tag == 0 and multiple)
        return
    assert set(settled) <= outstanding
    if tag:
        assert tag in settled and all(t <= tag for t in settled)
        assert multiple or settled == [tag]


def test_confirm_tags_settles_each_seqno_once() -> None:
    assert confirm_tags({1, 2, 3}, 2, True) == [1, 2]
    assert confirm_tags({3}, 3, False) == [3]
    assert confirm_tags({3}, 2, True) is None  # PC-05: 2 was settled already
    assert confirm_tags(set(), 1, False) is None


def test_traits_per_profile() -> None:
    assert traits("rabbitmq-4.3").global_qos is GlobalQos.PER_CONSUMER
    assert traits("rabbitmq-3.10").global_qos is GlobalQos.CHANNEL
    assert traits("rabbitmq-3.12").quorum_redelivered_on_return
    assert not traits("rabbitmq-4.0").quorum_redelivered_on_return
    assert not traits("amqp-0-9-1").quorum_queues
    with pytest.raises(ValueError):
        traits("rabbitmq-9")
    assert {traits(profile).profile for profile in PROFILES} == set(PROFILES)  # every catalogue profile


@pytest.mark.parametrize("profile", RABBIT_PROFILES)
def test_tags_are_per_channel_and_shared_by_get_and_consume(profile: str) -> None:
    m = model(profile)
    publish(m, "q", "m1", "m2", "m3")
    assert get(m) == GetOk(1, False, b"m1")
    assert m.consume(1, "q", "c1", no_ack=True) == OK
    assert deliver_all(m) == [(1, Deliver("c1", 2, False, b"m2")), (1, Deliver("c1", 3, False, b"m3"))]
    publish(m, "q", "m4")
    m.cancel(1, "c1")
    assert get(m, ch=2) == GetOk(1, False, b"m4")  # ACK-01: channels count on their own


def test_unknown_double_and_zero_tags_close_the_channel_with_their_method_id() -> None:
    m = model()
    publish(m, "q", "m1", "m2")
    get(m)
    assert m.ack(1, 1) == OK
    assert m.ack(1, 1) == ChannelClosed(406, 60, 80)  # ACK-04
    assert not m.is_open(1)
    m.open_channel(1)
    assert m.reject(1, 0) == ChannelClosed(406, 60, 90)  # ACK-06 (reject has no multiple)
    m.open_channel(1)
    assert m.nack(1, 5, multiple=True) == ChannelClosed(406, 60, 120)  # ACK-03
    m.open_channel(1)
    assert m.ack(1, 0, multiple=True) == OK  # ACK-06: nothing outstanding is fine


def test_multiple_with_a_settled_tag_settles_nothing() -> None:
    m = model()
    publish(m, "q", "m1", "m2", "m3")
    for _ in range(3):
        get(m)
    assert m.ack(1, 2) == OK
    assert m.ack(1, 2, multiple=True) == ChannelClosed(406, 60, 80)  # ACK-05
    assert m.ready_bodies("q") == [b"m1", b"m3"]  # RQ-03: the close requeued both, in place


def test_a_multiple_settle_remembers_the_consumer_deliveries_below_its_tag() -> None:
    """What a missing delivery may be owed to (the machines' ACK-05 probe): the channel's last
    multiple settle that covered consumer deliveries below the named tag; basic.get deliveries,
    the named tag itself and a single ack leave nothing to probe; a channel close forgets it."""
    m = model()
    publish(m, "q", "m1", "m2", "m3", "m4")
    get(m)  # tag 1: a basic.get delivery
    m.consume(1, "q", "c1")
    assert [d.delivery_tag for _, d in deliver_all(m)] == [2, 3, 4]
    assert m.ack(1, 2) == OK and m.multiple_settle(1) is None  # single: nothing below
    assert m.nack(1, 4, multiple=True, requeue=False) == OK
    settle = m.multiple_settle(1)
    assert settle is not None and (settle.method, settle.named, settle.tags_of("c1")) == ("nack", 4, [3])
    assert settle.tags_of("other") == [] and m.multiple_settle(2) is None
    m.close_channel(1)
    assert m.multiple_settle(1) is None


def test_recover_requeues_with_redelivered_and_requeue_false_closes_the_connection() -> None:
    m = model()
    publish(m, "q", "m1", "m2")
    get(m)
    assert m.recover(1) == OK
    assert get(m) == GetOk(2, True, b"m1")  # ACK-09, RQ-04
    assert m.recover(1, requeue=False) == ConnectionClosed(540, 60, 110)
    assert not m.is_open(1) and not m.is_open(2)
    assert m.ready("q") == 2


def test_cancel_leaves_deliveries_outstanding() -> None:
    m = model()
    publish(m, "q", "m1")
    m.consume(1, "q", "c1")
    deliver_all(m)
    assert m.cancel(1, "c1") == OK
    assert m.unacked_tags(1) == (1,)  # ACK-10
    assert m.ack(1, 1) == OK


def test_classic_requeue_goes_back_to_its_position_and_quorum_returns_come_first() -> None:
    m = model("rabbitmq-4.3", ("c", "classic"), ("qq", "quorum"))
    for queue in ("c", "qq"):
        publish(m, queue, f"{queue}1", f"{queue}2", f"{queue}3")
        first, second = get(m, queue), get(m, queue)
        assert isinstance(first, GetOk) and isinstance(second, GetOk)
        m.reject(1, second.delivery_tag, requeue=True)
        m.reject(1, first.delivery_tag, requeue=True)
    assert m.ready_bodies("c") == [b"c1", b"c2", b"c3"]  # RQ-01
    assert m.ready_bodies("qq") == [b"qq2", b"qq1", b"qq3"]  # RQ-02


def test_channel_close_requeues_and_drops_pending_confirms() -> None:
    m = model()
    m.confirm_select(1)
    publish(m, "q", "m1")
    get(m, ch=2)
    m.close_channel(2)
    assert m.ready_bodies("q") == [b"m1"]  # RQ-03
    m.close_channel(1)
    assert m.unsettled(1) == frozenset()  # PC-13


def test_nack_multiple_over_two_consumers_may_land_in_two_steps() -> None:
    m = model()
    publish(m, "q", "m1", "m2", "m3")
    m.qos(1, 1)
    m.consume(1, "q", "b")
    assert deliver_all(m) == [(1, Deliver("b", 1, False, b"m1"))]
    m.consume(1, "q", "a")
    assert deliver_all(m) == [(1, Deliver("a", 2, False, b"m2"))]
    assert m.nack(1, 0, multiple=True, requeue=True) == OK
    # one requeue per consumer tag, "a" first: m2 is back at once, m1 may land later
    assert {d.body for d in m.deliveries(1)} == {b"m1", b"m2"}
    m.deliver(1, Deliver("b", 3, True, b"m2"))
    assert {d.body for d in m.deliveries(1)} == {b"m1", b"m3"}
    m.quiesce()
    assert {d.body for d in m.deliveries(1)} == {b"m1"}


def test_confirm_seqnos_start_at_select_and_settle_once() -> None:
    m = model()
    assert m.publish(1, "", "q", b"before").seqno is None  # PC-02
    m.confirm_select(1)
    assert [m.publish(1, "", "q", b).seqno for b in (b"a", b"b", b"c")] == [1, 2, 3]
    m.confirm_select(1)  # PC-01: no reset
    assert m.publish(1, "", "q", b"d").seqno == 4
    assert m.confirm(1, Confirm(2, multiple=True)) == [1, 2]  # PC-04
    assert m.confirm(1, Confirm(4, multiple=False)) == [4]  # PC-10: any order
    with pytest.raises(Violation):
        m.confirm(1, Confirm(2, multiple=False))  # PC-05: settled twice
    assert m.unsettled(1) == frozenset({3})


def test_unroutable_mandatory_publish_is_returned_before_its_ack() -> None:
    m = model()
    m.confirm_select(1)
    published = m.publish(1, "", "nowhere", b"x", mandatory=True)
    assert published.returned and published.queues == ()
    with pytest.raises(Violation):
        m.confirm(1, Confirm(1, multiple=False))  # PC-06
    m.returned(1, Return(312, "", "nowhere", b"x"))
    assert m.confirm(1, Confirm(1, multiple=False)) == [1]


def test_a_refused_publish_is_nacked_and_fanout_confirms_once() -> None:
    m = model("rabbitmq-4.3", ("a", "classic"), ("b", "classic"))
    m.declare_queue("full", max_length=0, overflow="reject-publish")
    m.declare_fanout("fan", ["a", "b", "full"])
    m.confirm_select(1)
    published = m.publish(1, "fan", "", b"x")
    assert published.refused == ("full",) and published.queues == ("a", "b", "full")
    with pytest.raises(Violation):
        m.confirm(1, Confirm(1, multiple=False))  # PC-08: must be a nack
    assert m.confirm(1, Confirm(1, multiple=False, nack=True)) == [1]
    assert (m.ready("a"), m.ready("b"), m.ready("full")) == (1, 1, 0)  # PC-07


def test_confirm_and_tx_exclude_each_other() -> None:
    m = model()
    m.confirm_select(1)
    assert m.tx_select(1) == ChannelClosed(406, 90, 10)  # PC-03
    assert m.tx_select(2) == OK
    assert m.confirm_select(2) == ChannelClosed(406, 85, 10)


def test_queue_delete_cancels_consumers_per_capability() -> None:
    m = BrokerModel("rabbitmq-3.10")
    m.open_connection("A", cancel_notify=True)
    m.open_connection("B", cancel_notify=False)
    m.open_channel("a", "A")
    m.open_channel("b", "B")
    m.declare_queue("q")
    m.consume("a", "q", "ca", no_ack=True)
    m.consume("b", "q", "cb", no_ack=True)
    m.consume("a", "q", "gone", no_ack=True)
    m.cancel("a", "gone")
    m.delete_queue("q")
    assert m.owed_cancels() == {"a": frozenset({"ca"})}  # CCN-02
    assert not m.may_reuse_tag("b", "cb")
    with pytest.raises(Violation):
        m.server_cancel("b", ServerCancel("cb"))  # no capability, no notification
    m.server_cancel("a", ServerCancel("ca"))
    assert m.owed_cancels() == {}
    assert m.cancel("a", "ca") == OK  # CCN-03
    assert m.consume("a", "q", "x") == ChannelClosed(404, 60, 20)  # CCN-07


def test_a_client_cancel_racing_the_broker_makes_its_notification_optional() -> None:
    m = BrokerModel("rabbitmq-4.3")
    m.open_channel(1)
    m.declare_queue("q")
    m.consume(1, "q", "c1", no_ack=True)
    m.delete_queue("q")
    assert m.cancel(1, "c1") == OK
    assert m.owed_cancels() == {}
    m.server_cancel(1, ServerCancel("c1"))  # may still come (CCN-03)


def test_reusing_a_live_tag_is_530_and_requeues_the_connection() -> None:
    m = model()
    publish(m, "q", "m1")
    m.consume(1, "q", "c1")
    deliver_all(m)
    assert m.consume(2, "q", "c1") == OK  # another channel: fine
    assert m.consume(1, "q", "c1") == ConnectionClosed(530, 60, 20)
    assert m.ready("q") == 1


def test_a_delivery_maybe_sent_behind_a_broker_close_may_come_back_redelivered() -> None:
    """RQ-04 under a race seen on RabbitMQ 4.3.6: the consumer (prefetch 2) acks m2, so m3 is due;
    a second ack of the same tag closes the channel (406) and RabbitMQ may already have written m3's
    basic.deliver behind the channel.close. Back in the queue m3 may carry either flag; m1, delivered
    before, only redelivered=true. A client's own channel.close (drained first) leaves no doubt."""
    for by_broker in (True, False):
        m = model()
        publish(m, "q", "m1", "m2", "m3")
        m.qos(2, 2)
        m.consume(2, "q", "c1")
        assert [d.body for _, d in deliver_all(m)] == [b"m1", b"m2"]
        assert m.ack(2, 2) == OK  # m3 is due to c1 now
        if by_broker:
            assert m.ack(2, 2) == ChannelClosed(406, 60, 80)  # ACK-04, then RQ-03
        else:
            m.close_channel(2)
        m.consume(1, "q", "c2", no_ack=True)
        first = sorted(m.deliveries(1), key=repr)
        assert first == [Deliver("c2", 1, True, b"m1")]
        m.deliver(1, first[0])
        flags = sorted(d.redelivered for d in m.deliveries(1))
        assert flags == ([False, True] if by_broker else [False])
