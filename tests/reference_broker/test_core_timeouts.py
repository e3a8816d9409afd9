"""Pure-core tests of consumer timeouts (RULES.md §6, seed 000): 4.3 and legacy rules."""

from __future__ import annotations

import itertools

import pytest

from codec import (
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicDeliver,
    BasicGet,
    BasicQos,
    ChannelClose,
    ChannelOpen,
    QueueDeclare,
)
from reference_broker.core import Meta, StartTimer
from tests.reference_broker.sim import Sim, methods, sends

QQ = {"x-queue-type": "quorum"}
TEXT = ("PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: {} ms. "
        "This timeout value can be configured, see consumers doc guide to learn more")


def fire(sim: Sim, at: int) -> list:
    """Advance time and fire every timer due (what the server does)."""
    sim.now = at
    effects = []
    for key in [("qtimeout", "/", "q"), *[("tick", 1, n) for n in (1, 2)]]:
        effects += sim.core.timer_fired(Meta(at), key)
    return effects + sim.core.flush()


def quorum(n: int, capable: bool = True, queue_arg: int | None = None, policy: int | None = None,
           consumer_arg: int | None = None, prefetch: int = 0, **config: object) -> tuple[Sim, list]:
    sim = Sim(**config)
    sim.connect(cancel_notify=capable)
    sim.open()
    args = dict(QQ)
    if queue_arg is not None:
        args["x-consumer-timeout"] = queue_arg
    if policy is not None:
        sim.core.set_policies("/", {"p": {"pattern": "^q$", "apply-to": "queues", "priority": 0,
                                          "definition": {"consumer-timeout": policy}}})
    sim.queue("q", **args)
    sim.publish("q", *[f"m{i}".encode() for i in range(n)])
    if prefetch:
        sim.do(1, 1, BasicQos(prefetch_count=prefetch))
    cargs = {} if consumer_arg is None else {"x-consumer-timeout": consumer_arg}
    effects = sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c", arguments=cargs))
    return sim, effects


@pytest.mark.parametrize("consumer_arg,queue_arg,policy,global_", list(itertools.product(
    [None, 700], [None, 500, 900], [None, 600, 800], [1000, 2000])))
def test_timeout_precedence_every_combination(consumer_arg: int | None, queue_arg: int | None,
                                              policy: int | None, global_: int) -> None:
    """TMO-03 (4.3): consumer argument > min(queue argument, policy) > global."""
    sim, effects = quorum(1, queue_arg=queue_arg, policy=policy, consumer_arg=consumer_arg,
                         consumer_timeout=global_)
    if consumer_arg is not None:
        expected = consumer_arg
    elif queue_arg is not None or policy is not None:
        expected = min(v for v in (queue_arg, policy) if v is not None)
    else:
        expected = global_
    timers = [e for e in effects if isinstance(e, StartTimer)]
    assert [t.at_ms for t in timers] == [sim.now + expected]


def test_timeout_with_capability_cancels_and_keeps_channel() -> None:
    """TMO-4.3-3/4: basic.cancel nowait, channel open, consumer registered until cancel-ok."""
    sim, _ = quorum(1, queue_arg=100)
    effects = fire(sim, sim.now + 100)
    assert methods(effects) == [BasicCancel("c", nowait=True)]
    ch = sim.core.connections[1].channels[1]
    assert "c" in ch.consumers and not ch.closing
    q = sim.core.find_queue("/", "q")
    assert q is not None and q.ready_count() == 1 and q.ready_messages()[0].delivery_count == 0
    sim.do(1, 1, BasicCancelOk("c"))
    assert "c" not in ch.consumers


def test_timeout_without_capability_closes_channel_with_minus_one() -> None:
    sim, _ = quorum(1, capable=False, queue_arg=100)
    close = methods(fire(sim, sim.now + 100), ChannelClose)[0]
    assert (close.reply_code, close.class_id, close.method_id) == (406, 0, 0)
    assert close.reply_text == TEXT.format(-1)


def test_timeout_basic_get_closes_channel_even_with_capability() -> None:
    sim = Sim()
    sim.connect()
    sim.open()
    sim.queue("q", **QQ, **{"x-consumer-timeout": 50})
    sim.publish("q", b"x")
    sim.do(1, 1, BasicGet(queue="q"))
    assert methods(fire(sim, sim.now + 50), ChannelClose)[0].reply_text == TEXT.format(-1)


def test_partial_timeout_pauses_consumer_until_settled() -> None:
    """TMO-4.3-2/5: only expired deliveries return; no new messages until they are settled."""
    sim, first = quorum(3, queue_arg=100, prefetch=1)
    assert len(sends(first, BasicDeliver)) == 1
    sim.now += 60
    more = sim.do(1, 1, BasicAck(1))  # frees the slot: second delivery at t+60
    assert [s.method.delivery_tag for s in sends(more, BasicDeliver)] == [2]
    sim.do(1, 1, BasicQos(prefetch_count=5))
    effects = fire(sim, sim.now + 100)  # tag 2 expired
    assert methods(effects) == [BasicCancel("c", nowait=True)]
    assert not sends(effects, BasicDeliver)  # paused
    late = sim.do(1, 1, BasicAck(2))  # TMO-4.3-5: accepted, removes nothing, resumes
    assert not methods(late, ChannelClose)
    redelivered = sends(late, BasicDeliver)
    assert redelivered[0].body == b"m1" and redelivered[0].method.redelivered


def test_unexpired_deliveries_stay_checked_out() -> None:
    """TMO-4.3-2: a partial timeout returns only what expired."""
    sim, _ = quorum(1, consumer_arg=100)
    start = sim.now
    sim.now += 50
    later = sim.publish("q", b"late")  # delivered at t+50 as tag 2
    assert [s.method.delivery_tag for s in sends(later, BasicDeliver)] == [2]
    effects = fire(sim, start + 100)
    assert methods(effects) == [BasicCancel("c", nowait=True)]
    q = sim.core.find_queue("/", "q")
    assert q is not None and [m.body for m in q.ready_messages()] == [b"m0"]
    ch = sim.core.connections[1].channels[1]
    assert ch.unacked[2].timed_out is False and ch.unacked[1].timed_out is True
    # tag 2 now expires: the consumer is still registered (no cancel-ok), so a second basic.cancel,
    # as 4.3.6 sends one per firing (rabbit_channel:handle_queue_actions, `released` action)
    assert methods(fire(sim, start + 150)) == [BasicCancel("c", nowait=True)]
    assert [m.body for m in q.ready_messages()] == [b"m0", b"late"]


def test_classic_queues_never_time_out_in_43() -> None:
    """TMO-4.3-1."""
    sim = Sim(consumer_timeout=10)
    sim.connect()
    sim.open()
    sim.queue("q")
    sim.publish("q", b"x")
    effects = sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))
    assert not [e for e in effects if isinstance(e, StartTimer)]
    assert fire(sim, sim.now + 10_000) == []


def test_argument_validation() -> None:
    """TMO-04: classic queue refuses the consumer argument; negative values are 406."""
    sim = Sim()
    sim.connect()
    sim.open()
    sim.queue("cq")
    close = methods(sim.do(1, 1, BasicConsume(queue="cq", arguments={"x-consumer-timeout": 5})), ChannelClose)[0]
    assert close.reply_code == 406 and "of queue type rabbit_classic_queue" in close.reply_text
    sim.open(1, 2)
    bad = sim.do(1, 2, QueueDeclare(queue="qq", durable=True, arguments={**QQ, "x-consumer-timeout": -1}))
    assert methods(bad, ChannelClose)[0].reply_code == 406


def test_legacy_tick_checks_oldest_delivery_of_any_queue_type() -> None:
    """TMO-3x-1/2: every queue type, channel closed with the global value, on the tick."""
    sim = Sim(timeout_mode="legacy", legacy_ruleset="3.10", consumer_timeout=500, tick_interval=1000)
    sim.connect()
    opened = sim.do(1, 1, ChannelOpen())
    assert [e.at_ms for e in opened if isinstance(e, StartTimer)] == [sim.now + 1000]
    sim.queue("q")
    sim.publish("q", b"x")
    sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))
    start = sim.now
    assert not methods(fire(sim, start + 500), ChannelClose)  # strictly older than T
    close = methods(fire(sim, start + 1000), ChannelClose)[0]
    assert close.reply_text == TEXT.format(500) and (close.class_id, close.method_id) == (0, 0)
    q = sim.core.find_queue("/", "q")
    assert q is not None and q.ready_count() == 1  # requeued


def test_legacy_global_read_at_channel_open() -> None:
    """TMO-3x-4: a runtime change affects only channels opened later."""
    sim = Sim(timeout_mode="legacy", legacy_ruleset="3.10", consumer_timeout=100_000, tick_interval=1000)
    sim.connect()
    sim.open()
    sim.core.config.consumer_timeout = 10
    sim.queue("q")
    sim.publish("q", b"x")
    sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))
    assert not methods(fire(sim, sim.now + 1000), ChannelClose)


def test_legacy_312_uses_queue_argument_and_policy() -> None:
    sim = Sim(timeout_mode="legacy", legacy_ruleset="3.12", consumer_timeout=100_000, tick_interval=100)
    sim.connect()
    sim.open()
    sim.queue("q", **{"x-consumer-timeout": 50})
    sim.publish("q", b"x")
    sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))
    assert methods(fire(sim, sim.now + 100), ChannelClose)[0].reply_text == TEXT.format(50)


def test_client_cancel_of_timed_out_consumer_resumes_nothing_and_closes_cleanly() -> None:
    sim, _ = quorum(1, queue_arg=10)
    fire(sim, sim.now + 10)
    assert methods(sim.do(1, 1, BasicCancel("c"))) == [BasicCancelOk("c")]
    assert not methods(sim.do(1, 1, BasicAck(1)), ChannelClose)  # late ack still accepted
