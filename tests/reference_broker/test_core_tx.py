"""Pure-core tests for transactions (TX-01..06): held publishes routed when published, the
commit's returns before its commit-ok, rollback, and the deleted queue's commit per mode."""

from __future__ import annotations

from codec import (
    BasicProperties,
    BasicPublish,
    BasicReturn,
    ChannelClose,
    ExchangeDeclare,
    QueueBind,
    QueueDelete,
    QueueUnbind,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    TxSelect,
    TxSelectOk,
)
from tests.reference_broker.sim import Sim, closes, methods


def tx_sim(**config: object) -> Sim:
    sim = Sim(**config)
    sim.connect()
    sim.open()
    sim.queue("q")
    assert methods(sim.do(1, 1, TxSelect()), TxSelectOk)
    return sim


def ready(sim: Sim, name: str) -> int:
    q = sim.core.find_queue("/", name)
    assert q is not None
    return q.ready_count()


def test_core_select_twice_and_empty_commit_and_rollback_are_answered() -> None:
    """TX-01."""
    sim = tx_sim()
    assert methods(sim.do(1, 1, TxSelect()), TxSelectOk)
    assert methods(sim.do(1, 1, TxCommit())) == [TxCommitOk()]
    assert methods(sim.do(1, 1, TxRollback())) == [TxRollbackOk()]


def test_core_publishes_wait_for_the_commit_and_rollback_drops_them() -> None:
    """TX-02."""
    sim = tx_sim()
    sim.publish("q", b"a", b"b")
    assert ready(sim, "q") == 0
    sim.do(1, 1, TxRollback())
    sim.publish("q", b"c")
    assert methods(sim.do(1, 1, TxCommit())) == [TxCommitOk()]
    assert ready(sim, "q") == 1


def test_core_return_comes_at_the_commit_before_commit_ok() -> None:
    """TX-05: nothing at the publish; basic.return, then tx.commit-ok."""
    sim = tx_sim()
    assert not sim.publish("nowhere", b"x", mandatory=True)
    assert [type(m) for m in methods(sim.do(1, 1, TxCommit()))] == [BasicReturn, TxCommitOk]


def test_core_routed_when_published() -> None:
    """TX-06: a binding made after the publish does not get it; one removed after it still does."""
    sim = tx_sim()
    sim.queue("q2")
    sim.do(1, 1, ExchangeDeclare(exchange="x", exchange_type="direct"))
    sim.do(1, 1, QueueBind(queue="q", exchange="x", routing_key="k"))
    sim.do(1, 1, BasicPublish(exchange="x", routing_key="k"), BasicProperties(), b"m")
    sim.do(1, 1, QueueBind(queue="q2", exchange="x", routing_key="k"))
    sim.do(1, 1, QueueUnbind(queue="q", exchange="x", routing_key="k"))
    sim.do(1, 1, TxCommit())
    assert (ready(sim, "q"), ready(sim, "q2")) == (1, 0)


def test_core_deleted_queue_closes_the_connection_506_in_4_3_mode() -> None:
    """TX-06 4.3: connection.close 506 (90/20) naming the queue."""
    sim = tx_sim()
    sim.publish("q", b"m", mandatory=True)
    sim.do(1, 1, QueueDelete(queue="q"))
    (close,) = closes(sim.do(1, 1, TxCommit()))
    assert (close.code, close.class_id, close.method_id) == (506, 90, 20)
    assert close.text == 'RESOURCE_ERROR - failed to deliver message: {not_found,{resource,<<"/">>,queue,<<"q">>}}'


def test_core_deleted_queue_is_returned_in_legacy_mode() -> None:
    """TX-06 3.x: the routed name finds no queue: basic.return, then tx.commit-ok."""
    sim = tx_sim(timeout_mode="legacy")
    sim.publish("q", b"m", mandatory=True)
    sim.do(1, 1, QueueDelete(queue="q"))
    effects = sim.do(1, 1, TxCommit())
    assert not closes(effects) and not methods(effects, ChannelClose)
    assert [type(m) for m in methods(effects)] == [BasicReturn, TxCommitOk]
