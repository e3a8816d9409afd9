"""The total-queue checker on small hand-made histories, one per category."""

from __future__ import annotations

from tests.reliability.totalqueue import (
    AFTER_ACK_LOST_IN_KILL,
    AFTER_ACK_SAME_EPOCH,
    NOT_FLAGGED,
    Delivery,
    check_total_queue,
)


def d(mid: str, redelivered: bool = False, acked: bool = True, epoch: int = 0) -> Delivery:
    return Delivery(mid, redelivered, acked, epoch)


def test_totalqueue_clean_history_is_ok() -> None:
    r = check_total_queue(["m1", "m2"], ["m1", "m2"], [], [d("m1"), d("m2")])
    assert r.ok
    assert (r.published, r.confirmed, r.delivered, r.delivered_ids) == (2, 2, 2, 2)
    assert r.lost == r.unexpected == ()
    assert r.duplicated == ()
    assert r.summary()[-1] == "verdict: ok"


def test_totalqueue_confirmed_never_delivered_is_lost() -> None:
    r = check_total_queue(["m1", "m2", "m3"], ["m1", "m2"], [], [d("m1")])
    assert r.lost == ("m2",)  # m3 was never confirmed: its absence is allowed
    assert not r.ok
    assert "lost ids: m2" in "\n".join(r.summary())


def test_totalqueue_delivered_unacked_then_gone_is_lost() -> None:
    r = check_total_queue(["m1"], ["m1"], [], [d("m1", acked=False)])
    assert r.lost == ("m1",)


def test_totalqueue_delivered_unacked_then_drained_is_not_lost() -> None:
    r = check_total_queue(["m1"], ["m1"], [], [d("m1", acked=False)],
                          drain=[d("m1", redelivered=True, epoch=1)])
    assert r.ok
    assert (r.drained, r.recovered, r.redelivered) == (1, 1, 1)


def test_totalqueue_unacked_redelivered_with_flag_is_legal() -> None:
    r = check_total_queue(["m1"], ["m1"], [], [d("m1", acked=False), d("m1", redelivered=True, epoch=1)])
    assert r.ok
    assert r.duplicated == ()
    assert r.recovered == 1


def test_totalqueue_repeat_without_redelivered_flag_is_illegal() -> None:
    r = check_total_queue(["m1"], ["m1"], [], [d("m1", acked=False), d("m1", epoch=1)])
    assert [(x.id, x.index, x.kind) for x in r.duplicated] == [("m1", 1, NOT_FLAGGED)]
    assert r.illegal_duplicates == r.duplicated
    assert not r.ok


def test_totalqueue_redelivery_after_ack_in_same_epoch_is_illegal() -> None:
    r = check_total_queue(["m1"], ["m1"], [], [d("m1", epoch=3), d("m1", redelivered=True, epoch=3)])
    assert [x.kind for x in r.duplicated] == [AFTER_ACK_SAME_EPOCH]
    assert not r.ok


def test_totalqueue_redelivery_after_ack_lost_in_kill_is_a_legal_duplicate() -> None:
    r = check_total_queue(["m1"], ["m1"], [], [d("m1", epoch=0)], drain=[d("m1", redelivered=True, epoch=1)])
    assert [x.kind for x in r.duplicated] == [AFTER_ACK_LOST_IN_KILL]
    assert r.illegal_duplicates == ()
    assert r.ok
    assert "  duplicates after ack, lost in a kill: 1: m1@1" in r.summary()


def test_totalqueue_unflagged_repeat_after_ack_is_illegal_whatever_the_epoch() -> None:
    r = check_total_queue(["m1"], ["m1"], [], [d("m1", epoch=0), d("m1", epoch=1)])
    assert [x.kind for x in r.duplicated] == [NOT_FLAGGED]


def test_totalqueue_first_delivery_flagged_redelivered_is_allowed() -> None:
    # an earlier delivery went to a connection that died before the consumer read it
    r = check_total_queue(["m1"], ["m1"], [], [d("m1", redelivered=True, epoch=2)])
    assert r.ok
    assert r.duplicated == ()
    assert r.recovered == 0


def test_totalqueue_unpublished_delivery_is_unexpected() -> None:
    r = check_total_queue(["m1"], ["m1"], [], [d("m1"), d("x9")])
    assert r.unexpected == ("x9",)
    assert not r.ok


def test_totalqueue_unconfirmed_and_nacked_deliveries_are_allowed_and_counted() -> None:
    r = check_total_queue(["m1", "m2", "m3", "m4"], ["m1"], ["m3"],
                          [d("m1"), d("m2"), d("m3")])
    assert r.ok
    assert (r.unconfirmed_delivered, r.nacked_delivered, r.nacked) == (1, 1, 1)
    assert r.lost == ()  # m4: unconfirmed, never delivered


def test_totalqueue_confirmed_and_nacked_is_a_failure() -> None:
    r = check_total_queue(["m1"], ["m1"], ["m1"], [d("m1")])
    assert r.confirmed_and_nacked == ("m1",)
    assert not r.ok


def test_totalqueue_reports_ids_in_publish_order() -> None:
    ids = [f"m{i}" for i in range(1, 13)]
    r = check_total_queue(ids, ids, [], [])
    assert r.lost == tuple(ids)
    assert "... (+2)" in r.summary()[3]
