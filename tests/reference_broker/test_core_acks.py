"""Pure-core tests for acknowledgements and requeueing (RULES.md ACK-*, RQ-*)."""

from __future__ import annotations

import pytest

from codec import (
    BasicAck,
    BasicCancel,
    BasicConsume,
    BasicDeliver,
    BasicGet,
    BasicGetOk,
    BasicNack,
    BasicQos,
    BasicRecover,
    BasicRecoverOk,
    BasicReject,
    ChannelClose,
    ChannelCloseOk,
    TxCommit,
    TxRollback,
    TxSelect,
)
from tests.reference_broker.sim import Sim, closes, methods, sends


def consuming(n: int, kind: str = "classic", no_ack: bool = False) -> Sim:
    sim = Sim()
    sim.connect()
    sim.open()
    sim.queue("q", **{"x-queue-type": kind})
    sim.publish("q", *[f"m{i}".encode() for i in range(n)])
    sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c", no_ack=no_ack))
    return sim


def delivered(effects: list) -> list[tuple[int, bytes, bool]]:
    return [(s.method.delivery_tag, s.body, s.method.redelivered) for s in sends(effects, BasicDeliver)]


def test_core_tags_start_at_one_shared_by_consume_and_get() -> None:
    """ACK-01."""
    sim = Sim()
    sim.connect()
    sim.open()
    sim.queue("q")
    sim.publish("q", b"a", b"b", b"c")
    get = methods(sim.do(1, 1, BasicGet(queue="q")), BasicGetOk)
    assert get[0].delivery_tag == 1
    consumed = delivered(sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c")))
    assert [t for t, _b, _r in consumed] == [2, 3]


@pytest.mark.parametrize("method,method_id", [(BasicAck(99), 80), (BasicReject(99), 90), (BasicNack(99), 120)])
def test_core_unknown_tag_closes_channel_406(method: object, method_id: int) -> None:
    """ACK-03: channel.close 406 with the RabbitMQ text and the method's ids; unacked requeued."""
    sim = consuming(2)
    effects = sim.do(1, 1, method)  # type: ignore[arg-type]
    close = methods(effects, ChannelClose)[0]
    assert (close.reply_code, close.class_id, close.method_id) == (406, 60, method_id)
    assert close.reply_text == "PRECONDITION_FAILED - unknown delivery tag 99"
    assert not closes(effects)
    q = sim.core.find_queue("/", "q")
    assert q is not None and q.ready_count() == 2  # RQ-03


def test_core_double_ack_is_unknown_tag() -> None:
    """ACK-04."""
    sim = consuming(1)
    assert not methods(sim.do(1, 1, BasicAck(1)), ChannelClose)
    assert methods(sim.do(1, 1, BasicAck(1)), ChannelClose)[0].reply_text.endswith("unknown delivery tag 1")


def test_core_multiple_needs_the_named_tag_and_settles_nothing_otherwise() -> None:
    """ACK-05: multiple=true with an already settled N is 406 and nothing is settled."""
    sim = consuming(3)
    sim.do(1, 1, BasicAck(2))
    effects = sim.do(1, 1, BasicAck(2, multiple=True))
    assert methods(effects, ChannelClose)[0].reply_code == 406
    q = sim.core.find_queue("/", "q")
    assert q is not None and [m.body for m in q.ready_messages()] == [b"m0", b"m2"]  # requeued, not acked


def test_core_multiple_settles_everything_up_to_n() -> None:
    sim = consuming(4)
    sim.do(1, 1, BasicAck(3, multiple=True))
    assert list(sim.core.connections[1].channels[1].unacked) == [4]


def test_core_tag_zero_multiple_settles_all_and_single_is_unknown() -> None:
    """ACK-06."""
    sim = consuming(3)
    assert not sim.do(1, 1, BasicAck(0, multiple=True))
    assert sim.core.connections[1].channels[1].unacked == {}
    assert not sim.do(1, 1, BasicNack(0, multiple=True))  # nothing outstanding: still fine
    close = methods(sim.do(1, 1, BasicAck(0)), ChannelClose)[0]
    assert close.reply_text == "PRECONDITION_FAILED - unknown delivery tag 0"


def test_core_nack_requeue_redelivers_and_false_discards() -> None:
    """ACK-07 / RQ-04."""
    sim = consuming(2)
    redelivered = delivered(sim.do(1, 1, BasicNack(1, requeue=True)))
    assert redelivered == [(3, b"m0", True)]
    assert not delivered(sim.do(1, 1, BasicReject(2, requeue=False)))
    q = sim.core.find_queue("/", "q")
    assert q is not None and q.ready_count() == 0


def test_core_classic_requeue_keeps_original_position() -> None:
    """RQ-01: nacking m1 puts it back ahead of m3, where it was."""
    sim = Sim()
    sim.connect()
    sim.open()
    sim.queue("q")
    sim.publish("q", b"m0", b"m1", b"m2", b"m3")
    sim.do(1, 1, BasicQos(prefetch_count=2))
    sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))  # gets m0, m1
    sim.do(1, 1, BasicCancel("c"))
    sim.do(1, 1, BasicNack(2, requeue=True))
    q = sim.core.find_queue("/", "q")
    assert q is not None and [m.body for m in q.ready_messages()] == [b"m1", b"m2", b"m3"]


def test_core_quorum_returns_come_first_in_return_order() -> None:
    """RQ-02: returned messages go ahead of never-delivered ones, in return order."""
    sim = Sim()
    sim.connect()
    sim.open()
    sim.queue("q", **{"x-queue-type": "quorum"})
    sim.publish("q", b"m0", b"m1", b"m2", b"m3")
    sim.do(1, 1, BasicQos(prefetch_count=2))
    sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))
    sim.do(1, 1, BasicCancel("c"))
    sim.do(1, 1, BasicNack(2, requeue=True))
    sim.do(1, 1, BasicNack(1, requeue=True))
    q = sim.core.find_queue("/", "q")
    assert q is not None and [m.body for m in q.ready_messages()] == [b"m1", b"m0", b"m2", b"m3"]


def test_core_quorum_redelivery_headers_and_counts() -> None:
    """RQ-05 (4.3): no header on first delivery; reject counts, nack does not (RQ-06)."""
    sim = consuming(1, kind="quorum")
    first = sends(sim.do(1, 1, BasicQos()), BasicDeliver)
    assert not first
    again = sends(sim.do(1, 1, BasicReject(1, requeue=True)), BasicDeliver)[0]
    assert again.method.redelivered
    assert again.properties is not None and again.properties.headers == {"x-delivery-count": 1, "x-acquired-count": 1}
    third = sends(sim.do(1, 1, BasicNack(2, requeue=True)), BasicDeliver)[0]
    assert third.properties is not None and third.properties.headers == {"x-delivery-count": 1, "x-acquired-count": 2}


def test_core_channel_close_requeues_unacked() -> None:
    """RQ-03; no-ack deliveries are lost."""
    sim = consuming(3)
    effects = sim.do(1, 1, ChannelClose(200, "bye", 0, 0))
    assert methods(effects, ChannelCloseOk)
    q = sim.core.find_queue("/", "q")
    assert q is not None and q.ready_count() == 3 and all(m.delivered for m in q.ready_messages())
    lost = consuming(3, no_ack=True)
    lost.do(1, 1, ChannelClose(200, "bye", 0, 0))
    q2 = lost.core.find_queue("/", "q")
    assert q2 is not None and q2.ready_count() == 0


def test_core_connection_loss_requeues_unacked() -> None:
    from reference_broker.core import Meta

    sim = consuming(2)
    sim.core.connection_closed(Meta(sim.now), 1)
    q = sim.core.find_queue("/", "q")
    assert q is not None and q.ready_count() == 2 and not q.consumers


def test_core_tx_checks_tags_at_once_and_rollback_restores() -> None:
    """ACK-08."""
    sim = consuming(2)
    sim.do(1, 1, TxSelect())
    assert methods(sim.do(1, 1, BasicAck(1)), ChannelClose) == []
    ch = sim.core.connections[1].channels[1]
    assert list(ch.unacked) == [2]
    sim.do(1, 1, TxRollback())
    assert list(ch.unacked) == [1, 2]
    sim.do(1, 1, BasicAck(2))
    sim.do(1, 1, TxCommit())
    assert list(ch.unacked) == [1]
    assert methods(sim.do(1, 1, BasicAck(5)), ChannelClose)[0].reply_code == 406


def test_core_recover_requeues_with_redelivered_and_requeue_false_is_540() -> None:
    """ACK-09."""
    sim = consuming(2)
    effects = sim.do(1, 1, BasicRecover(requeue=True))
    assert methods(effects)[0] == BasicRecoverOk()
    assert [r for _t, _b, r in delivered(effects)] == [True, True]
    bad = sim.do(1, 1, BasicRecover(requeue=False))
    assert (closes(bad)[0].code, closes(bad)[0].text) == (540, "NOT_IMPLEMENTED - requeue=false")


def test_core_cancel_leaves_deliveries_unacked() -> None:
    """ACK-10."""
    sim = consuming(2)
    sim.do(1, 1, BasicCancel("c"))
    ch = sim.core.connections[1].channels[1]
    assert list(ch.unacked) == [1, 2]
    assert not methods(sim.do(1, 1, BasicAck(2, multiple=True)), ChannelClose)


def test_core_quorum_delivery_limit_counts_rejects_not_nacks() -> None:
    """RQ-06 (4.3): rejects count toward the limit, nack requeues never do."""
    sim = Sim()
    sim.connect()
    sim.open()
    sim.queue("dlq")
    sim.queue("q", **{"x-queue-type": "quorum", "x-delivery-limit": 2, "x-dead-letter-exchange": "",
                      "x-dead-letter-routing-key": "dlq"})
    sim.publish("q", b"m")
    effects = sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))
    for _ in range(5):  # unlimited nack requeues
        tag = sends(effects, BasicDeliver)[0].method.delivery_tag
        effects = sim.do(1, 1, BasicNack(tag, requeue=True))
    for _ in range(2):
        tag = sends(effects, BasicDeliver)[0].method.delivery_tag
        effects = sim.do(1, 1, BasicReject(tag, requeue=True))
    tag = sends(effects, BasicDeliver)[0].method.delivery_tag
    assert not sends(sim.do(1, 1, BasicReject(tag, requeue=True)), BasicDeliver)  # third failure: over 2
    dlq = sim.core.find_queue("/", "dlq")
    assert dlq is not None and [m.body for m in dlq.ready_messages()] == [b"m"]
    death = dlq.ready_messages()[0].properties.headers["x-death"][0]  # type: ignore[index]
    assert death["reason"] == "delivery_limit" and death["queue"] == "q"
