"""Durable storage: what survives a restart, confirms after the write (PC-07),
the journal the core emits, compaction, and a torn WAL after a crash.

Core tests drive the pure core (sim.Sim) and look at its `Persist` effects; restart tests
stop and start an `EmbeddedBroker` on the same data directory and talk to it with py-amqp.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import amqp
import pytest

from codec import (
    BasicAck,
    BasicConsume,
    BasicProperties,
    BasicPublish,
    ConfirmSelect,
    QueueDeclare,
    QueueDelete,
    QueuePurge,
    TxCommit,
    TxCommitOk,
    TxSelect,
)
from reference_broker.core import Meta, durability
from reference_broker.core.effects import Persist
from reference_broker.server import EmbeddedBroker
from reference_broker.storage import DB_NAME, Store
from tests.reference_broker.sim import Sim, methods

PERSISTENT = BasicProperties(delivery_mode=2)
TRANSIENT = BasicProperties(delivery_mode=1)


def persists(effects: list) -> list[Persist]:
    return [e for e in effects if isinstance(e, Persist)]


def ops(effects: list) -> list[object]:
    return [op for p in persists(effects) for op in p.ops]


@pytest.fixture
def sim(tmp_path: Path) -> Sim:
    s = Sim(data_dir=str(tmp_path))
    s.connect()
    s.open()
    return s


# -- the journal ---------------------------------------------------------------------------
def test_persistent_message_in_durable_queue_is_journalled_and_its_confirm_waits(sim: Sim) -> None:
    sim.queue("q")
    sim.do(1, 1, ConfirmSelect())
    out = sim.do(1, 1, BasicPublish(routing_key="q"), PERSISTENT, b"x")
    puts = [op for op in ops(out) if isinstance(op, durability.Put)]
    assert [(p.queue, p.message.body) for p in puts] == [("q", b"x")]
    assert methods(out, BasicAck) == []  # PC-07: not before the write
    position = persists(out)[-1].position
    sim.core.stored(position)
    assert methods(sim.core.flush(), BasicAck) == [BasicAck(1, False)]


def test_transient_messages_and_non_durable_queues_are_not_journalled(sim: Sim) -> None:
    sim.queue("q")
    sim.do(1, 1, QueueDeclare(queue="t", durable=False))
    sim.do(1, 1, ConfirmSelect())
    out = sim.do(1, 1, BasicPublish(routing_key="q"), TRANSIENT, b"a")
    out += sim.do(1, 1, BasicPublish(routing_key="t"), PERSISTENT, b"b")
    assert not [op for op in ops(out) if isinstance(op, durability.Put)]
    assert methods(out, BasicAck) == [BasicAck(1, False), BasicAck(2, False)]


def test_a_multiple_ack_never_covers_a_confirm_waiting_for_the_store(sim: Sim) -> None:
    sim.queue("q")
    sim.do(1, 1, ConfirmSelect())
    batch = sim.core.apply(Meta(sim.now), 1, 1, BasicPublish(routing_key="q"), TRANSIENT, b"1")
    batch += sim.core.apply(Meta(sim.now), 1, 1, BasicPublish(routing_key="q"), PERSISTENT, b"2")
    batch += sim.core.apply(Meta(sim.now), 1, 1, BasicPublish(routing_key="q"), TRANSIENT, b"3")
    batch += sim.core.apply(Meta(sim.now), 1, 1, BasicPublish(routing_key="q"), TRANSIENT, b"4")
    out = batch + sim.core.flush()
    assert methods(out, BasicAck) == [BasicAck(1, True), BasicAck(3, False), BasicAck(4, False)]
    sim.core.stored(persists(out)[-1].position)
    assert methods(sim.core.flush(), BasicAck) == [BasicAck(2, False)]


def test_tx_commit_ok_waits_for_the_store_when_the_commit_stored_messages(sim: Sim) -> None:
    sim.queue("q")
    sim.do(1, 1, TxSelect())
    sim.do(1, 1, BasicPublish(routing_key="q"), PERSISTENT, b"x")
    out = sim.do(1, 1, TxCommit())
    assert methods(out, TxCommitOk) == [] and persists(out)
    assert methods(sim.core.stored(persists(out)[-1].position), TxCommitOk) == [TxCommitOk()]
    sim.do(1, 1, BasicPublish(routing_key="q"), TRANSIENT, b"y")
    assert methods(sim.do(1, 1, TxCommit()), TxCommitOk) == [TxCommitOk()]  # nothing to write


def test_ack_purge_and_delete_journal_removals(sim: Sim) -> None:
    sim.queue("q")
    sim.do(1, 1, BasicPublish(routing_key="q"), PERSISTENT, b"a")
    sim.do(1, 1, BasicPublish(routing_key="q"), PERSISTENT, b"b")
    out = sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))
    out += sim.do(1, 1, BasicAck(1, False))
    assert [type(op) for op in ops(out)].count(durability.Delete) == 1
    sim.do(1, 1, BasicPublish(routing_key="q"), PERSISTENT, b"c")  # delivered, unacked
    out = sim.do(1, 1, QueuePurge(queue="q"))
    assert not [op for op in ops(out) if isinstance(op, durability.Delete)]  # nothing ready
    out = sim.do(1, 1, QueueDelete(queue="q"))
    assert durability.Drop("/", "q") in ops(out)
    assert any(isinstance(op, durability.Definitions) for op in ops(out))


def test_no_ack_delivery_removes_at_once(sim: Sim) -> None:
    sim.queue("q")
    sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c", no_ack=True))
    out = sim.do(1, 1, BasicPublish(routing_key="q"), PERSISTENT, b"a")
    kinds = [type(op) for op in ops(out)]
    assert kinds[:2] == [durability.Put, durability.Delete]


# -- restarts ------------------------------------------------------------------------------
@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def _client(broker: EmbeddedBroker) -> amqp.Connection:
    conn = amqp.Connection(f"{broker.host}:{broker.port}", connect_timeout=5, read_timeout=5)
    conn.connect()
    return conn


@pytest.fixture
def restartable(data_dir: Path) -> Iterator[list[EmbeddedBroker]]:
    brokers: list[EmbeddedBroker] = []
    yield brokers
    for broker in brokers:
        broker.stop()


def _start(brokers: list[EmbeddedBroker], data_dir: Path) -> EmbeddedBroker:
    if brokers:
        brokers[-1].stop()
    broker = EmbeddedBroker(data_dir=str(data_dir)).start()
    brokers.append(broker)
    return broker


def test_durable_definitions_survive_and_transient_ones_do_not(restartable: list[EmbeddedBroker],
                                                               data_dir: Path) -> None:
    broker = _start(restartable, data_dir)
    broker.server.apply_policies("/", {"ttl": {"pattern": "^dq$", "definition": {"message-ttl": 600000},
                                               "apply-to": "queues", "priority": 1}})
    with _client(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare("dx", "topic", durable=True, auto_delete=False, arguments={"alt": "x"})
        ch.exchange_declare("tx", "fanout", durable=False, auto_delete=False)
        ch.queue_declare("dq", durable=True, auto_delete=False, arguments={"x-max-length": 10})
        ch.queue_declare("tq", durable=False, auto_delete=False)
        ch.queue_declare("eq", durable=True, exclusive=True)
        ch.queue_bind("dq", "dx", "a.#")
        ch.queue_bind("tq", "dx", "b.#")
    broker = _start(restartable, data_dir)
    vhost = broker.call(lambda: broker.server.core.vhosts["/"])
    assert set(vhost.queues) == {"dq"}
    assert vhost.queues["dq"].arguments == {"x-max-length": 10}
    assert "dx" in vhost.exchanges and "tx" not in vhost.exchanges
    assert vhost.exchanges["dx"].arguments == {"alt": "x"}
    assert [(b.destination, b.routing_key) for b in vhost.exchanges["dx"].bindings] == [("dq", "a.#")]
    assert broker.call(lambda: broker.server.core.policies["/"])["ttl"]["definition"] == {"message-ttl": 600000}


def test_persistent_messages_survive_with_redelivered_and_acked_ones_do_not(
        restartable: list[EmbeddedBroker], data_dir: Path) -> None:
    broker = _start(restartable, data_dir)
    with _client(broker) as conn:
        ch = conn.channel()
        ch.confirm_select()
        ch.queue_declare("dq", durable=True, auto_delete=False)
        for i in range(5):
            ch.basic_publish_confirm(amqp.Message(f"p{i}", delivery_mode=2), "", "dq", timeout=5)
        ch.basic_publish_confirm(amqp.Message("transient", delivery_mode=1), "", "dq", timeout=5)
        first = ch.basic_get("dq")
        ch.basic_ack(first.delivery_tag)
        second = ch.basic_get("dq")  # delivered, never acked: it must come back
        assert second.body == "p1"
    broker = _start(restartable, data_dir)
    with _client(broker) as conn:
        ch = conn.channel()
        got = []
        while (m := ch.basic_get("dq", no_ack=True)) is not None:
            got.append((m.body, m.delivery_info["redelivered"]))
    assert got == [("p1", True), ("p2", True), ("p3", True), ("p4", True)]
    broker.stop()  # writes what was submitted before it closes the store
    assert Store(data_dir).message_count() == 0


def test_a_committed_transaction_survives(restartable: list[EmbeddedBroker], data_dir: Path) -> None:
    broker = _start(restartable, data_dir)
    with _client(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("dq", durable=True, auto_delete=False)
        ch.tx_select()
        ch.basic_publish(amqp.Message("in-tx", delivery_mode=2), "", "dq")
        ch.tx_commit()  # returns at tx.commit-ok: after the write
    broker = _start(restartable, data_dir)
    with _client(broker) as conn:
        got = conn.channel().basic_get("dq", no_ack=True)
        assert got is not None and got.body == "in-tx"


def test_dead_lettered_persistent_message_moves_between_durable_queues(
        restartable: list[EmbeddedBroker], data_dir: Path) -> None:
    broker = _start(restartable, data_dir)
    with _client(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("dlq", durable=True, auto_delete=False)
        ch.queue_declare("src", durable=True, auto_delete=False,
                         arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
        ch.confirm_select()
        ch.basic_publish_confirm(amqp.Message("m", delivery_mode=2), "", "src", timeout=5)
        m = ch.basic_get("src")
        ch.basic_reject(m.delivery_tag, requeue=False)
    broker = _start(restartable, data_dir)
    with _client(broker) as conn:
        ch = conn.channel()
        dead = ch.basic_get("dlq", no_ack=True)
        assert dead is not None and dead.body == "m"
        assert ch.basic_get("src", no_ack=True) is None


# -- the store itself ----------------------------------------------------------------------
def _put(i: int, queue: str = "q") -> durability.Put:
    from reference_broker.core.state import Message

    return durability.Put(i, "/", queue, Message("", queue, PERSISTENT, b"body-%d" % i))


def test_a_put_deleted_in_the_same_batch_is_never_written(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.write([_put(1), _put(2), durability.Delete(1), _put(3, "other"), durability.Drop("/", "other")])
    _defs, messages = store.load()
    assert [m.id for m in messages] == [2]
    store.write([durability.Drop("/", "q"), _put(4)])
    assert [m.id for m in store.load()[1]] == [4]


def test_compaction_truncates_the_wal(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.write([_put(i) for i in range(1, 2001)])
    store.compact()
    full = (tmp_path / DB_NAME).stat().st_size
    store.write([durability.Delete(i) for i in range(1, 2001)])
    wal = tmp_path / (DB_NAME + "-wal")
    assert wal.stat().st_size > 0
    store.compact()
    assert wal.stat().st_size == 0
    assert (tmp_path / DB_NAME).stat().st_size < full / 4  # the freed pages went back
    assert store.message_count() == 0


def test_a_torn_last_wal_record_is_skipped(tmp_path: Path) -> None:
    """Commit two batches, crash (a copy of the files as a killed process leaves them),
    tear the last WAL frame: the first batch is intact, the torn one is skipped."""
    live = tmp_path / "live"
    store = Store(live)
    store.write([_put(1), _put(2)])
    wal = live / (DB_NAME + "-wal")
    size_after_first = wal.stat().st_size
    store.write([_put(3)])
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    for name in (DB_NAME, DB_NAME + "-wal"):
        shutil.copy(live / name, crashed / name)
    store.close()
    torn = crashed / (DB_NAME + "-wal")
    with torn.open("r+b") as f:
        f.truncate(torn.stat().st_size - 100)  # the last frame loses its tail
    assert torn.stat().st_size > size_after_first
    recovered = Store(crashed)
    assert [m.id for m in recovered.load()[1]] == [1, 2]
    assert sqlite3.connect(crashed / DB_NAME).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_an_unusable_data_dir_is_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = subprocess.run([sys.executable, "-m", "reference_broker", "--port", "0", "--data-dir", str(blocker)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "cannot use data directory" in proc.stderr


def test_users_and_permissions_live_in_the_data_dir_once_it_exists(data_dir: Path) -> None:
    """The configuration seeds a new data directory; after that the stored users apply."""
    with EmbeddedBroker(data_dir=str(data_dir), users={"alice": "secret"},
                        permissions={"alice": {"/": ["^alice\\.", ".*", ".*"]}}) as broker, \
            amqp.Connection(f"{broker.host}:{broker.port}", userid="alice", password="secret",
                            connect_timeout=5, read_timeout=5) as conn:
        conn.channel().queue_declare("alice.q", durable=True, auto_delete=False)
    with EmbeddedBroker(data_dir=str(data_dir)) as broker:  # default config: guest only
        assert broker.call(lambda: broker.server.core.config.users) == {"alice": "secret"}
        with amqp.Connection(f"{broker.host}:{broker.port}", userid="alice", password="secret",
                             connect_timeout=5, read_timeout=5) as conn:
            ch = conn.channel()
            assert ch.queue_declare("alice.q", passive=True).queue == "alice.q"
            with pytest.raises(amqp.exceptions.AccessRefused):
                ch.queue_declare("bob.q", durable=True, auto_delete=False)
