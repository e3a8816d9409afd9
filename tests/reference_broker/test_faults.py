"""The fault switchboard: off by default, named, and each one observable in the core."""

from __future__ import annotations

import pytest

from codec import (
    BasicAck,
    BasicConsume,
    BasicDeliver,
    BasicNack,
    BasicQos,
    ChannelClose,
    ChannelCloseOk,
    ConfirmSelect,
    QueueDeclare,
    QueueDeclareOk,
)
from reference_broker.config import BrokerConfig
from reference_broker.core import BrokerCore
from reference_broker.core.rules import Rules
from reference_broker.faults import BY_NAME, ENV, FAULTS, from_environment, rules_with
from tests.reference_broker.sim import Sim, closes, methods, sends


def test_faults_are_off_by_default_and_named_uniquely() -> None:
    assert BrokerCore(BrokerConfig()).faults == frozenset()
    assert len(BY_NAME) == len(FAULTS) >= 30
    assert {f.area for f in FAULTS} >= {"ack", "requeue", "qos", "confirms", "cancel", "timeout", "errors", "framing"}


def test_unknown_fault_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault"):
        BrokerCore(BrokerConfig(faults=["no_such_fault"]))


def test_faults_come_from_the_edge_not_from_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment is parsed at the edge (reference-broker, the harness's embedded broker);
    the core reads only its BrokerConfig."""
    monkeypatch.setenv(ENV, "confirm_duplicated, prefetch_off_by_one")
    assert from_environment() == ["confirm_duplicated", "prefetch_off_by_one"]
    assert BrokerCore(BrokerConfig()).faults == frozenset()
    assert BrokerCore(BrokerConfig(faults=from_environment())).faults == {"confirm_duplicated", "prefetch_off_by_one"}


def test_every_fault_substitutes_a_policy() -> None:
    """A fault is a substitution of rules (core/rules.py), never a switch the rule code asks about."""
    for fault in FAULTS:
        assert fault.substitutes, fault.name
        assert set(fault.substitutes) <= set(Rules.__dataclass_fields__), fault.name
        assert rules_with(frozenset({fault.name})) != Rules(), fault.name


def consuming(n: int, fault: str, prefetch: int = 0) -> tuple[Sim, list]:
    sim = Sim(faults=[fault])
    sim.connect()
    sim.open()
    sim.queue("q")
    sim.publish("q", *[f"m{i}".encode() for i in range(n)])
    if prefetch:
        sim.do(1, 1, BasicQos(prefetch_count=prefetch))
    return sim, sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))


def test_fault_examples_change_behaviour() -> None:
    sim, _ = consuming(3, "multi_ack_only_named")
    sim.do(1, 1, BasicAck(3, multiple=True))
    assert list(sim.core.connections[1].channels[1].unacked) == [1, 2]
    sim, _ = consuming(1, "unknown_tag_closes_connection")
    assert closes(sim.do(1, 1, BasicAck(9)))[0].code == 406
    sim, effects = consuming(5, "prefetch_off_by_one", prefetch=2)
    assert len(sends(effects, BasicDeliver)) == 3
    sim, _ = consuming(1, "nack_requeue_false_requeues")
    assert sends(sim.do(1, 1, BasicNack(1, requeue=False)), BasicDeliver)
    sim = Sim(faults=["confirm_duplicated"])
    sim.connect()
    sim.open()
    sim.queue("q")
    sim.do(1, 1, ConfirmSelect())
    assert methods(sim.publish("q", b"x"), BasicAck) == [BasicAck(1), BasicAck(1)]
    sim, _ = consuming(0, "soft_errors_close_connection")
    assert closes(sim.do(1, 1, BasicAck(5)))
    assert not methods(sim.do(1, 1, BasicAck(5)), ChannelClose)


def test_a_closing_channel_drops_what_follows_the_brokers_close_unless_the_fault_answers_it() -> None:
    """ERR-03: once the broker sent channel.close, methods other than close and close-ok are
    dropped; `closing_channel_answers` carries them out."""
    for fault, answered in ((None, []), ("closing_channel_answers", [QueueDeclareOk("q2", 0, 0)])):
        sim, _ = consuming(0, fault) if fault else consuming(0, "priorities_ignored")  # any fault of another rule
        assert methods(sim.do(1, 1, BasicAck(5)), ChannelClose)
        assert methods(sim.do(1, 1, QueueDeclare(queue="q2")), QueueDeclareOk) == answered
        assert methods(sim.do(1, 1, ChannelClose(200, "bye", 0, 0)), ChannelCloseOk) == [ChannelCloseOk()]
