"""The model's prefetch rules (QOS-02..09): per-consumer and channel-wide limits, per profile."""

from __future__ import annotations

import pytest

from conformance.model import ConnectionClosed, GetOk
from tests.conformance.model_steps import deliver_all, get, model, publish


def test_per_consumer_prefetch_applies_to_new_consumers_only() -> None:
    m = model()
    publish(m, "q", "m1", "m2", "m3")
    m.consume(1, "q", "c1")
    m.qos(1, 1)
    m.consume(1, "q", "c2")
    deliveries = deliver_all(m)
    assert len(deliveries) == 3  # c1 is unlimited (QOS-02)
    assert sum(d.consumer_tag == "c2" for _, d in deliveries) <= 1


@pytest.mark.parametrize("profile", ["rabbitmq-3.10", "rabbitmq-4.3"])
def test_global_qos_is_channel_wide_only_before_4_3(profile: str) -> None:
    m = model(profile)
    publish(m, "q", "m1", "m2", "m3", "m4")
    m.qos(1, 2, global_=True)
    m.consume(1, "q", "c1")
    m.consume(1, "q", "c2")
    delivered = len(deliver_all(m))
    assert delivered == (2 if profile == "rabbitmq-3.10" else 4)  # QOS-03


def test_global_limit_counts_gets_and_recover_lowers_it() -> None:
    m = model("rabbitmq-3.10")
    publish(m, "q", "m1", "m2", "m3")
    get(m)
    m.qos(1, 2, global_=True)  # QOS-05: the get already counts
    m.consume(1, "q", "c1")
    assert len(deliver_all(m)) == 1
    m.recover(1)  # QOS-05: recover subtracts the consumer's delivery only
    assert len(deliver_all(m)) == 1


def test_global_false_switches_a_global_limit_off_before_4_3() -> None:
    m = model("rabbitmq-3.10")
    publish(m, "q", "m1", "m2", "m3")
    m.qos(1, 1, global_=True)
    m.consume(1, "q", "c1")
    assert len(deliver_all(m)) == 1
    m.qos(1, 5, global_=False)  # rabbit_channel: unlimit_prefetch
    assert len(deliver_all(m)) == 2


def test_no_ack_consumers_are_paused_by_a_reached_global_limit() -> None:
    m = model("rabbitmq-3.10")
    publish(m, "q", "m1", "m2")
    m.qos(1, 1, global_=True)
    m.consume(1, "q", "manual")
    deliver_all(m)
    m.consume(1, "q", "auto", no_ack=True)
    assert not m.due() and not m.deliveries(1)  # QOS-08
    m.ack(1, 1)
    assert m.deliveries(1)


def test_quorum_consume_under_a_global_limit_is_540() -> None:
    m = model("rabbitmq-3.10", ("qq", "quorum"))
    m.qos(1, 1, global_=True)
    assert m.consume(1, "qq", "c1") == ConnectionClosed(540, 60, 20)  # QOS-06


def test_basic_get_ignores_prefetch() -> None:
    m = model("rabbitmq-3.10")
    publish(m, "q", "m1", "m2")
    m.qos(1, 1, global_=True)
    assert isinstance(get(m), GetOk) and isinstance(get(m), GetOk)  # QOS-07


def test_lowering_a_limit_in_flight_allows_a_transient_overshoot() -> None:
    m = model("rabbitmq-3.10")
    m.qos(1, 3, global_=True)
    m.consume(1, "q", "c1")
    publish(m, "q", "m1", "m2", "m3")
    m.qos(1, 1, global_=True)  # QOS-09: three were allowed when the change happened
    for body in (b"m1", b"m2", b"m3"):
        (delivery,) = m.deliveries(1)
        assert delivery.body == body
        m.deliver(1, delivery)
        assert not m.due()  # only the first one had to come under the new limit
    assert not m.deliveries(1)
    m.quiesce()
    assert not m.deliveries(1)
