"""The message-lifecycle model (conformance.model.lifecycle): expiry at the head, dead-lettering,
x-death and cycles, without a broker."""

from __future__ import annotations

from conformance.model.lifecycle import LifecycleModel, QueueSpec


def model(legacy: bool = False, **specs: tuple[bool, str | None]) -> LifecycleModel:
    return LifecycleModel({q: QueueSpec(*s) for q, s in specs.items()}, legacy)


def test_an_expired_message_leaves_only_from_the_head() -> None:
    m = model(a=(False, None))
    m.publish("a", "live", short_expiration=False)
    m.publish("a", "short", short_expiration=True)
    assert m.bodies("a") == ["live", "short"]  # counted behind a live head (TTL-03)
    assert m.get("a", 1) is not None and m.bodies("a") == []  # the fetch exposed it: gone
    assert m.rules_for("a") == ["TTL-03"]
    m.begin_step()
    m.publish("a", "again", short_expiration=False)
    assert m.rules_for("a") == []


def test_a_requeued_message_goes_back_to_its_place() -> None:
    m = model(a=(False, None))
    for body in ("m1", "m2"):
        m.publish("a", body, short_expiration=False)
    m.get("a", 1)
    m.reject(1, requeue=True)
    assert m.bodies("a") == ["m1", "m2"]


def test_an_expiry_cycle_is_dropped_where_it_closes() -> None:
    m = model(a=(True, "b"), b=(True, "a"))
    m.publish("a", "m", short_expiration=False)
    assert m.bodies("a") == m.bodies("b") == []
    assert [e.rule for e in m.events] == ["TTL-03", "DLX-01", "TTL-03", "DLX-04"]
    assert m.hops == 2  # the TTLs of a and of b must pass


def test_a_rejection_cycle_goes_round_and_counts() -> None:
    m = model(a=(False, "a"))
    m.publish("a", "m", short_expiration=False)
    for tag in (1, 2):
        m.get("a", tag)
        m.reject(tag, requeue=False)
    got = m.get("a", 3)
    assert got is not None and got.deaths == [("a", "rejected", 2)]


def test_before_3_13_the_deaths_are_regrouped_first() -> None:
    deaths_by_mode = {}
    for legacy in (False, True):
        m = model(legacy, a=(False, "b"), b=(True, "c"), c=(False, "a"))
        m.publish("a", "m", short_expiration=False)
        for tag, queue in ((1, "a"), (2, "c")):
            m.get(queue, tag)
            m.reject(tag, requeue=False)
        got = m.get("a", 3)
        assert got is not None
        deaths_by_mode[legacy] = got.deaths
        assert got.recent == deaths_by_mode.get(False, got.recent)
    assert deaths_by_mode[False] == [("c", "rejected", 1), ("b", "expired", 1), ("a", "rejected", 1)]
    assert deaths_by_mode[True] == [("c", "rejected", 1), ("a", "rejected", 1), ("b", "expired", 1)]
