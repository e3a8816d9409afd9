"""The pure x-death and cycle functions of the reference broker (reference_broker.core.deaths)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reference_broker.core.deaths import (
    death_routing_keys,
    is_cycle,
    legacy_grouped,
    legacy_recorded,
    recorded,
)

QUEUES = st.sampled_from(["a", "b", "c"])
REASONS = st.sampled_from(["rejected", "expired", "maxlen"])
ENTRIES = st.lists(st.builds(lambda q, r, n: {"queue": q, "reason": r, "count": n}, QUEUES, REASONS,
                             st.integers(1, 5)), max_size=6)


def entry(queue: str, reason: str, **more: object) -> dict[str, object]:
    return {"queue": queue, "reason": reason, "count": 1, **more}


def test_a_new_death_goes_in_front_and_a_repeated_one_counts_and_moves_to_the_front() -> None:
    deaths = recorded(None, entry("a", "expired"))
    deaths = recorded(deaths, entry("b", "expired"))
    assert [(d["queue"], d["count"]) for d in deaths] == [("b", 1), ("a", 1)]
    deaths = recorded(deaths, entry("a", "expired", time=2))
    assert deaths == [{"queue": "a", "reason": "expired", "count": 2}, {"queue": "b", "reason": "expired", "count": 1}]
    assert recorded(deaths, entry("a", "rejected"))[0] == entry("a", "rejected")


def test_unmerged_deaths_are_each_their_own_entry() -> None:
    deaths = recorded(recorded(None, entry("a", "expired")), entry("a", "expired"), merged=False)
    assert [d["count"] for d in deaths] == [1, 1]


@given(ENTRIES, QUEUES, REASONS)
def test_recording_keeps_one_entry_per_queue_and_reason_and_adds_exactly_one(before: list[dict[str, object]],
                                                                            queue: str, reason: str) -> None:
    grouped = legacy_grouped(before)
    after = recorded(grouped, entry(queue, reason))
    keys = [(d["queue"], d["reason"]) for d in after]
    assert len(keys) == len(set(keys))
    assert after[0]["queue"] == queue and after[0]["reason"] == reason
    total = sum(int(str(d["count"])) for d in after)
    assert total == sum(int(str(d["count"])) for d in grouped) + 1


def test_legacy_grouping_reverses_and_counts_repeats_that_carry_no_count() -> None:
    header = [{"queue": "a", "reason": "expired"}, {"queue": "b", "reason": "rejected"},
              {"queue": "a", "reason": "expired"}]
    assert legacy_grouped(header) == [{"count": 1, "queue": "b", "reason": "rejected"},
                                      {"count": 2, "queue": "a", "reason": "expired"}]
    assert legacy_grouped([{"queue": "a", "reason": "expired"}]) == [{"queue": "a", "reason": "expired"}]


def test_legacy_recording_sets_first_death_only_without_a_header_and_replaces_a_non_array() -> None:
    new = entry("q", "rejected")
    assert legacy_recorded(None, new) == ([new], True)
    assert legacy_recorded("garbage", new) == ([new], False)
    deaths, first = legacy_recorded([entry("q", "rejected", count=4)], new)
    assert (deaths, first) == ([entry("q", "rejected", count=5)], False)


def test_an_expiry_cycle_is_detected_unless_a_rejection_is_in_it() -> None:
    expired_twice = [entry("b", "expired"), entry("a", "expired")]
    assert is_cycle("a", expired_twice)
    assert not is_cycle("c", expired_twice)
    with_rejection = [entry("b", "expired"), entry("a", "rejected")]
    assert not is_cycle("a", with_rejection)
    assert is_cycle("a", with_rejection, rejections_break=False)
    # a rejection older than the queue's latest death does not break the cycle
    assert is_cycle("a", [entry("a", "expired"), entry("b", "rejected")])


def test_death_routing_keys_are_the_key_and_the_cc_keys() -> None:
    assert death_routing_keys("rk", {}) == ["rk"]
    assert death_routing_keys("rk", {"CC": ["x", 3, "y"], "BCC": ["z"]}) == ["rk", "x", "y"]
    assert death_routing_keys("rk", {"CC": "x"}) == ["rk"]
