"""Pure-core tests of stream queues (reference_broker/core/streams.py): what live RabbitMQ 4.3.6
did for each, over raw AMQP."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from codec import (
    BasicAck,
    BasicCancel,
    BasicConsume,
    BasicDeliver,
    BasicGet,
    BasicNack,
    BasicQos,
    BasicRecover,
    BasicRecoverOk,
    BasicReject,
    ChannelClose,
    ChannelOpen,
    QueueDeclare,
    QueueDeclareOk,
    QueuePurge,
    ReplyCode,
)
from codec.fields import Typed
from reference_broker.core import Meta, StartTimer, durability
from reference_broker.core.effects import Persist
from reference_broker.core.state import STREAM
from reference_broker.storage import Store
from tests.reference_broker.sim import Sim, closes, methods, sends

SQ = {"x-queue-type": "stream"}
Q = "queue 's' in vhost '/'"


def stream(n: int = 0, **config: object) -> Sim:
    sim = Sim(**config)
    sim.connect()
    sim.open()
    sim.queue("s", **SQ)
    sim.publish("s", *[f"m{i}".encode() for i in range(1, n + 1)])
    return sim


def consume(sim: Sim, offset: object = "first", prefetch: int = 10, tag: str = "c", ch: int = 1) -> list:
    if prefetch:
        sim.do(1, ch, BasicQos(prefetch_count=prefetch))
    args = {} if offset is None else {"x-stream-offset": offset}
    return sim.do(1, ch, BasicConsume(queue="s", consumer_tag=tag, arguments=args))


def delivered(effects: list) -> list[tuple[str, int, bool, bytes, object]]:
    return [(s.method.consumer_tag, s.method.delivery_tag, s.method.redelivered, s.body,
             (s.properties.headers or {}).get("x-stream-offset")) for s in sends(effects, BasicDeliver)]


def closed(effects: list) -> tuple[int, str]:
    close = methods(effects, ChannelClose)
    if close:
        return close[0].reply_code, close[0].reply_text
    hard = closes(effects)
    assert hard, effects
    return hard[0].code, hard[0].text


@pytest.mark.parametrize("flags,label", [({"durable": False}, "non-durable"), ({"exclusive": True}, "exclusive-owner"),
                                         ({"auto_delete": True}, "auto-delete")])
def test_stream_declare_refuses_what_a_stream_cannot_be(flags: dict, label: str) -> None:
    """406 "invalid property '<label>'" (rabbit_queue_type_util, live 4.3.6)."""
    sim = Sim()
    sim.connect()
    sim.open()
    effects = sim.do(1, 1, QueueDeclare(queue="s", **{"durable": True, **flags}, arguments=SQ))
    assert closed(effects) == (ReplyCode.PRECONDITION_FAILED,
                               f"PRECONDITION_FAILED - invalid property '{label}' for {Q}")


@pytest.mark.parametrize("arg", ["x-max-priority", "x-consumer-timeout", "x-message-ttl", "x-max-length"])
def test_stream_declare_refuses_other_types_arguments(arg: str) -> None:
    sim = Sim()
    sim.connect()
    sim.open()
    effects = sim.do(1, 1, QueueDeclare(queue="s", durable=True, arguments={**SQ, arg: 5}))
    assert closed(effects) == (ReplyCode.PRECONDITION_FAILED,
                               f"PRECONDITION_FAILED - invalid arg '{arg}' for {Q} of queue type rabbit_stream_queue")


def test_stream_is_declared_durable_and_counts_its_log() -> None:
    sim = stream(3)
    assert sim.core.find_queue("/", "s").kind == STREAM
    ok = methods(sim.do(1, 1, QueueDeclare(queue="s", passive=True)), QueueDeclareOk)
    assert ok == [QueueDeclareOk("s", 3, 0)]


def test_stream_consumer_needs_a_prefetch_and_manual_ack() -> None:
    sim = stream(1)
    assert closed(consume(sim, prefetch=0)) == (
        ReplyCode.PRECONDITION_FAILED, f"PRECONDITION_FAILED - consumer prefetch count is not set for stream {Q}")
    sim.open(ch=2)
    sim.do(1, 2, BasicQos(prefetch_count=5))
    effects = sim.do(1, 2, BasicConsume(queue="s", no_ack=True))
    assert closed(effects) == (ReplyCode.NOT_IMPLEMENTED,
                               f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream {Q}")


def test_stream_basic_get_and_purge_are_refused() -> None:
    for method, what in ((BasicGet(queue="s"), "basic.get"), (QueuePurge(queue="s"), "queue.purge")):
        sim = stream(1)
        assert closed(sim.do(1, 1, method)) == (
            ReplyCode.NOT_IMPLEMENTED, f"NOT_IMPLEMENTED - {what} not supported by stream queues {Q}")


@pytest.mark.parametrize("offset,bodies", [
    ("first", [b"m1", b"m2", b"m3"]), (0, [b"m1", b"m2", b"m3"]), (-1, [b"m1", b"m2", b"m3"]), (1, [b"m2", b"m3"]),
    ("last", [b"m3"]), ("next", []), (None, []), (99, []), ("1h", [b"m1", b"m2", b"m3"])])
def test_stream_offset_chooses_where_a_consumer_starts(offset: object, bodies: list[bytes]) -> None:
    """first, last (each publish a chunk), next (the default), an integer (below the log: its
    start; past the end: nothing yet), an interval (live 4.3.6)."""
    sim = stream(3)
    got = delivered(consume(sim, offset))
    assert [body for _c, _t, _r, body, _o in got] == bodies
    assert all(not redelivered for _c, _t, redelivered, _b, _o in got)


def test_stream_deliveries_carry_their_offset_as_a_long() -> None:
    sim = stream(2)
    got = delivered(consume(sim, 1))
    assert got == [("c", 1, False, b"m2", Typed(b"l", 1))]


def test_stream_offset_past_the_end_waits_for_the_log() -> None:
    sim = stream(1)
    consume(sim, 2)
    assert delivered(sim.publish("s", b"m2")) == []
    assert [d[3] for d in delivered(sim.publish("s", b"m3"))] == [b"m3"]


def test_stream_bad_offsets_are_refused() -> None:
    sim = stream(1)
    assert closed(consume(sim, "bogus")) == (
        ReplyCode.PRECONDITION_FAILED, "PRECONDITION_FAILED - invalid arg 'x-stream-offset' for "
        f"{Q}: {{invalid_stream_offset_arg,{{longstr,<<\"bogus\">>}}}}")
    sim.open(ch=2)
    code, text = closed(consume(sim, datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), ch=2))
    assert code == ReplyCode.PRECONDITION_FAILED and "wall clock" in text


def test_stream_settlement_gives_credit_and_never_redelivers() -> None:
    """ack, nack requeue, reject requeue, nack: each lets the next offset through; nothing comes
    back (rabbit_stream_queue:settle/5; live 4.3.6)."""
    sim = stream(6)
    assert [d[3] for d in delivered(consume(sim, "first", prefetch=2))] == [b"m1", b"m2"]
    for method, want in ((BasicAck(1), b"m3"), (BasicNack(2, requeue=True), b"m4"),
                         (BasicReject(3, requeue=True), b"m5"), (BasicNack(4, requeue=False), b"m6")):
        assert [(d[2], d[3]) for d in delivered(sim.do(1, 1, method))] == [(False, want)]
    assert delivered(sim.do(1, 1, BasicAck(5))) == []


def test_stream_messages_stay_for_the_next_consumer() -> None:
    sim = stream(2)
    consume(sim, "first")
    sim.do(1, 1, BasicAck(0, multiple=True))
    sim.do(1, 1, ChannelClose(200, "", 0, 0))
    sim.do(1, 2, ChannelOpen())
    assert [d[3] for d in delivered(consume(sim, "first", ch=2, tag="again"))] == [b"m1", b"m2"]


def test_stream_recover_and_channel_close_return_nothing() -> None:
    sim = stream(2)
    consume(sim, "first", prefetch=1)
    effects = sim.do(1, 1, BasicRecover(requeue=True))
    assert methods(effects, BasicRecoverOk) and [d[3] for d in delivered(effects)] == [b"m2"]
    assert sim.core.find_queue("/", "s").ready_count() == 0


def test_stream_consumers_read_independently() -> None:
    sim = stream(2)
    sim.open(ch=2)
    assert [d[3] for d in delivered(consume(sim, "first", tag="a"))] == [b"m1", b"m2"]
    assert [d[3] for d in delivered(consume(sim, "first", tag="b", ch=2))] == [b"m1", b"m2"]
    both = delivered(sim.publish("s", b"m3"))
    assert sorted(d[0] for d in both) == ["a", "b"]


def test_stream_consumers_never_time_out() -> None:
    """TMO-4.3-1: a consumer-timeout policy and global value give a stream consumer no deadline;
    the fault streams_time_out gives it one (the quorum queue's timer)."""
    policy = {"p": {"pattern": "^s$", "apply-to": "streams", "priority": 0, "definition": {"consumer-timeout": 50}}}
    sim = stream(1, consumer_timeout=50)
    sim.core.set_policies("/", policy)
    assert not [e for e in consume(sim) if isinstance(e, StartTimer)]
    faulty = stream(1, consumer_timeout=50, faults=["streams_time_out"])
    faulty.core.set_policies("/", policy)
    timers = [e for e in consume(faulty) if isinstance(e, StartTimer)]
    assert [t.at_ms for t in timers] == [faulty.now + 50]
    fired = faulty.core.timer_fired(Meta(faulty.now + 50), timers[0].key)
    assert methods(fired, BasicCancel) == [BasicCancel("c", nowait=True)]


def test_stream_log_survives_a_restart(tmp_path: Path) -> None:
    """Every message of a stream is stored, whatever its delivery mode; an ack deletes none of
    them; a restart rebuilds the log in offset order."""
    sim = Sim(data_dir=str(tmp_path))
    sim.connect()
    sim.open()
    effects = sim.do(1, 1, QueueDeclare(queue="s", durable=True, arguments=SQ))
    effects += sim.publish("s", b"m1", b"m2")
    effects += consume(sim) + sim.do(1, 1, BasicAck(0, multiple=True))
    store = Store(tmp_path)
    store.write([op for e in effects if isinstance(e, Persist) for op in e.ops])
    definitions, rows = store.load()
    assert [row.body for row in rows] == [b"m1", b"m2"]
    again = Sim(data_dir=str(tmp_path))
    durability.restore(again.core, Meta(again.now), definitions, rows)
    again.connect()
    again.open()
    assert [d[3] for d in delivered(consume(again))] == [b"m1", b"m2"]
