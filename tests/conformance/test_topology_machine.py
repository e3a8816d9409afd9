"""The topology oracle (conformance/model/topology.py) and its machine
(conformance/suite/steps/machine_topology.py) against brokers that misroute or keep what must go."""

from __future__ import annotations

import pytest

from conformance.catalogue.mentions import named_rules
from conformance.model.topology import Binding, Exchange, Queue, Topology, extra_rule, hop_rule, topic_matches
from conformance.suite.routing.test_machine_topology import EXAMPLES, SHARDS
from conformance.suite.steps.machine_support import MachineTarget
from conformance.suite.steps.machine_topology import run_topology_machine
from reference_broker.server import EmbeddedBroker


@pytest.mark.parametrize(("pattern", "key", "matches"), [
    ("#", "", True), ("#", "a.b", True), ("a.#", "a", True), ("a.#", "a.b.c", True), ("a.*", "a", False),
    ("*", "", False), ("*.b", "a.b", True), ("#.*", "", False), ("#.#", "a", True), ("a.#.b", "a.b", True),
    ("a", "a.a", False), ("", "", True), ("", "a", False)])
def test_topic_words(pattern: str, key: str, matches: bool) -> None:
    assert topic_matches(pattern, key) is matches


def _topology() -> Topology:
    t = Topology()
    t.declare_exchange("x0", Exchange("topic", alternate="x1"))
    t.declare_exchange("x1", Exchange("fanout", auto_delete=True, internal=True))
    t.declare_exchange("x2", Exchange("headers", auto_delete=True))
    for q in ("q0", "q1", "q2"):
        t.declare_queue(q, Queue())
    t.bind(Binding("x0", "q0", False, "a.#"))
    t.bind(Binding("x0", "x2", True, "b"))
    t.bind(Binding("x1", "q1", False, ""))
    t.bind(Binding("x2", "q2", False, "", (("h", "1"), ("x-match", "any"))))
    return t


def test_a_route_follows_bindings_exchanges_and_the_alternate_exchange() -> None:
    t = _topology()
    assert set(t.route("x0", "a.b").queues) == {"q0"}
    assert set(t.route("x0", "c").queues) == {"q1"}  # nothing matched: the alternate exchange
    assert hop_rule(t.route("x0", "c").queues["q1"]) == "ROUTE-12"
    route = t.route("x0", "b", {"h": "1"})  # x0 -> x2 matched, so no alternate exchange
    assert set(route.queues) == {"q2"} and hop_rule(route.queues["q2"]) == "ROUTE-09"
    cc = t.route("x0", "c", cc=("a",))
    assert set(cc.queues) == {"q0"} and hop_rule(cc.queues["q0"]) == "ROUTE-13"
    assert set(t.route("", "q1").queues) == {"q1"} and not t.route("", "nothing").queues


def test_a_removal_takes_the_auto_delete_exchanges_left_without_a_binding_as_a_source() -> None:
    t = _topology()
    removed = t.delete_queue("q2")  # x2 loses its last binding; then x0 -> x2 goes with x2
    assert removed.queues == {"q2": "QUEUE-10"} and removed.exchanges == {"x2": "EXCH-08"}
    assert removed.causes == {"x2": "QUEUE-11"}
    assert Binding("x0", "x2", True, "b") not in t.bindings and "x0" in t.exchanges  # x0 is not auto-delete
    removed = t.unbind(Binding("x1", "q1", False, ""))
    assert removed.exchanges == {"x1": "EXCH-08"} and removed.causes == {"x1": "EXCH-10"}
    assert set(t.route("x0", "c").queues) == set()  # the alternate exchange is gone: nothing routes


def test_a_copy_no_rule_explains_is_traced_to_the_binding_that_should_not_match() -> None:
    t = _topology()
    route = t.route("x0", "c.d")
    assert extra_rule(t, route, "q0") == "ROUTE-05"  # a.# looked at, no match
    t.delete_queue("q0")
    t.declare_queue("q0", Queue())
    assert extra_rule(t, t.route("x0", "a"), "q0") == "QUEUE-11"  # only a deleted queue's binding led there


@pytest.mark.parametrize(("fault", "rule"), [
    ("topic_hash_one_word", "ROUTE-05"),
    pytest.param("binding_kept_after_queue_delete", "QUEUE-11", marks=pytest.mark.gate)])  # 20 s of CPU: test-gates
def test_the_machine_reports_a_fault_as_its_rule_in_a_few_steps(fault: str, rule: str) -> None:
    """The suite's shards, in order, as the suite runs them: one fails, naming the rule. Which one
    fails first is not asserted: Hypothesis also draws constants from the modules a process has
    loaded (`providers._get_local_constants`), so a shard's examples here are not the suite's."""
    with EmbeddedBroker(faults=[fault]) as broker, pytest.raises(AssertionError) as failure:
        for shard in range(1, SHARDS + 1):
            run_topology_machine(MachineTarget(broker.url, "rabbitmq-4.3"), examples=EXAMPLES, steps=10, shard=shard)
    notes = "\n".join(getattr(failure.value, "__notes__", ()))
    assert named_rules(str(failure.value))[:1] == (rule,), str(failure.value)
    steps = notes.split("Failing test case")[1].count("\nstate.") - 1  # the teardown line is not a step
    assert 1 <= steps <= 6, notes
    assert "frames of this run" in notes, notes


@pytest.mark.parametrize(("fault", "rule", "probed"), [
    ("topic_hash_one_word", "ROUTE-05", True),  # x0's '#.b' does not take 'a.b.b' on, alone either
    ("exchange_bindings_ignored", "ROUTE-09", False),  # the binding matches alone: routing on is what broke
])
def test_a_copy_missing_behind_an_exchange_binding_names_the_binding_that_failed_alone(
        fault: str, rule: str, probed: bool) -> None:
    """The rule named does not depend on how far shrinking got: the route x0 (topic) -> x1 (fanout)
    -> q0 is the one Hypothesis left in a hurried run (it read as ROUTE-09 for a broken '#')."""
    from conformance.suite.steps.machine_topology import TopologyMachine

    with EmbeddedBroker(faults=[fault]) as broker:
        machine = TopologyMachine(MachineTarget(broker.url, "rabbitmq-4.3"))
        try:
            machine.build(exchanges=[Exchange("topic"), Exchange("fanout")], queues=[Queue()],
                          bindings=[(0, 1, True, "#.b", {}), (1, 0, False, "", {})])
            with pytest.raises(AssertionError) as failure:
                machine.publish(exchange="x0", key="a.b.b", headers={}, cc=[], mandatory=False)
        finally:
            machine.close()
    text = str(failure.value)
    assert named_rules(text)[:1] == (rule,), text
    assert ("tried alone, x0 did not take it on to a queue bound with key '#.b'" in text) is probed, text
    assert "q0 did not get it" in text and "x0 -> exchange x1 key '#.b'" in text, text


def test_a_copy_missing_behind_an_alternate_exchange_names_its_binding_when_that_fails_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """x1 (direct, alternate x0) -> x0 (topic) '#' -> q0, key '': under `topic_hash_one_word` the
    alternate exchange's own binding does not take the message on when tried alone, so the rule is
    the topic rule's (ROUTE-05), not the alternate exchange's (ROUTE-12), however far shrinking got
    (under load it stopped at this route). When the binding takes it on alone, ROUTE-12 stays."""
    from conformance.suite.steps.machine_topology import TopologyMachine

    def missing(fault: str | None) -> str:
        with EmbeddedBroker(faults=[fault] if fault else []) as broker:
            machine = TopologyMachine(MachineTarget(broker.url, "rabbitmq-4.3"))
            try:
                machine.build(exchanges=[Exchange("topic"), Exchange("direct", alternate="x0")], queues=[Queue()],
                              bindings=[(0, 0, False, "#", {})])
                route = machine.model.route("x1", "", {}, ())
                rule, probed = machine._missing_rule(route, route.queues["q0"], "", {})
            finally:
                machine.close()
        return rule + probed

    found = missing("topic_hash_one_word")
    assert found.startswith("ROUTE-05; tried alone, the alternate exchange x0 did not take it on"), found
    monkeypatch.setattr(TopologyMachine, "_taken_alone", lambda *_: True)  # the binding works alone
    assert missing(None) == "ROUTE-12"
