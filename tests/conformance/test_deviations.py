"""The frame-rewriting proxy and its deviations: fast checks here, the full matrix is `slow`.

The fast part shows that the proxy forwards a conforming session untouched, that a client-side
rewrite makes the broker mis-hear the client, and that a model machine alone, through a
deviation, fails with a shrunk program of at most 10 steps (a failure, never broken or Flaky).
The full matrix (`make mutation-proxy`: every deviation, suite and machines alone) is behind
the `slow` marker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from codec import (
    BasicAck,
    BasicGet,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.catalogue.rules import AREAS, rule
from conformance.interpose.frames import Frame
from conformance.mutation import Outcome
from conformance.suite.ack.test_machine_ack import AckMachine
from conformance.suite.requeue.test_machine_requeue import RequeueMachine
from conformance.suite.steps.machine_base import MachineTarget, run_machine
from reference_broker.server import EmbeddedBroker
from tests.conformance import deviation_matrix
from tests.conformance.deviant import DeviantProxy, Deviation, encode
from tests.conformance.deviations import BY_NAME, DEVIATIONS

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`

STEP = re.compile(r"^state\.(?!teardown\(\))\w+\(", re.MULTILINE)


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as embedded:
        yield embedded


def test_every_deviation_names_its_area_and_rules() -> None:
    assert len(DEVIATIONS) >= 15 and len(BY_NAME) == len(DEVIATIONS)
    for deviation in DEVIATIONS:
        assert deviation.area in AREAS and deviation.description, deviation
        assert all(rule(r).area == deviation.area for r in deviation.rules), deviation


def test_a_rewrite_keeps_every_value_in_its_field() -> None:
    """prefetch_plus_one over the whole range of prefetch_count: 65535 + 1 does not fit the short
    field (it once made the proxy's encoder raise and end the link), so it goes as 0, no limit."""
    sent: list[bytes] = []
    io = SimpleNamespace(record=lambda _text: None, to_broker=sent.append)
    for count in (1, 65534, 65535):
        BY_NAME["prefetch_plus_one"]().client(Frame(encode(1, BasicQos(prefetch_count=count))), io)  # type: ignore[arg-type]
    assert [getattr(Frame(raw).method, "prefetch_count", None) for raw in sent] == [2, 65535, 0]


@pytest.mark.parametrize("batches", [
    [(1, False), (2, False), (3, True)],  # 2 dropped, then a multiple confirm reaching past it
    [(1, False), (3, True)],  # 2 inside a multiple confirm
    [(4, True)],
], ids=["coalesced-again", "inside-multiple", "all-in-one"])
def test_a_dropped_confirm_stays_dropped_whatever_the_batching(batches: list[tuple[int, bool]]) -> None:
    """confirm_dropped: seqno 2 is never confirmed, even when the broker's later multiple=true
    confirm covers it again (the embedded broker may nack 2, then nack 3 multiple): every other
    seqno is confirmed once, singly, and nothing the client gets settles seqno 2."""
    sent: list[bytes] = []
    io = SimpleNamespace(record=lambda _text: None, to_client=sent.append)
    deviation = BY_NAME["confirm_dropped"]()
    for tag, multiple in batches:
        deviation.broker(Frame(encode(1, BasicNack(delivery_tag=tag, multiple=multiple))), io)  # type: ignore[arg-type]
    got = [(m.delivery_tag, m.multiple) for m in (Frame(raw).method for raw in sent) if isinstance(m, BasicNack)]
    assert len(got) == len(sent) and 2 not in [tag for tag, _ in got], got
    assert not any(multiple and tag >= 2 for tag, multiple in got), got
    assert sorted(tag for tag, _ in got) == [t for t in range(1, batches[-1][0] + 1) if t != 2], got


def _publish_get_ack_multiple(url: str, queue: str) -> int:
    """Three messages, three gets, one multiple ack of the last: how many come back on close?"""
    from conformance.drivers.raw import RawClient

    with RawClient(url, timeout=5.0) as client:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue=queue, auto_delete=False), QueueDeclareOk)
        for body in (b"a", b"b", b"c"):
            client.send(ch, BasicPublish(routing_key=queue), BasicProperties(), body)
        tags = [client.rpc(ch, BasicGet(queue=queue), BasicGetOk).method.delivery_tag for _ in range(3)]
        client.send(ch, BasicAck(delivery_tag=tags[-1], multiple=True))
        client.rpc(ch, ExchangeDeclare(exchange="amq.direct", exchange_type="direct", passive=True), ExchangeDeclareOk)
        client.close_channel(ch)
        ch = client.channel()
        reply = client.rpc(ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk).method
        assert isinstance(reply, QueueDeclareOk)
        return reply.message_count


def test_the_proxy_forwards_untouched_and_a_client_rewrite_is_misheard(broker: EmbeddedBroker) -> None:
    with DeviantProxy((broker.host, broker.port), Deviation) as plain:
        assert _publish_get_ack_multiple(plain.url, "deviant.plain") == 0 and not plain.actions
    with DeviantProxy((broker.host, broker.port), BY_NAME["ack_multiple_as_single"]) as proxy:
        assert _publish_get_ack_multiple(proxy.url, "deviant.single") == 2  # the broker heard multiple=false
        assert proxy.actions == ["ack_multiple_as_single"]


@pytest.mark.parametrize(("name", "machine"), [("double_settle_ignored", AckMachine),
                                               ("redelivered_dropped", RequeueMachine)])
def test_a_machine_alone_reports_the_deviation_shrunk(broker: EmbeddedBroker, name: str, machine: type[AckMachine],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMQPC_MACHINE_BUDGET", "60")
    with DeviantProxy((broker.host, broker.port), BY_NAME[name]) as proxy, \
            pytest.raises(AssertionError) as failure:
        run_machine(machine, MachineTarget(proxy.url, "rabbitmq-4.3"), examples=120, steps=10)
    notes = "\n".join(getattr(failure.value, "__notes__", ()))
    assert 1 <= len(STEP.findall(notes)) <= deviation_matrix.MAX_STEPS, notes
    assert "the steps as run" in notes and "frames of this run" in notes, notes


def test_a_failing_control_stops_the_matrix_with_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control runs the campaign's selection through the proxy applying no deviation; when it
    does not pass cleanly, no deviation is measured and the exit status is 2."""
    ran: list[tuple[type[Deviation], str]] = []

    def run_through(outcome: Outcome, deviation: type[Deviation], *_args: object, **_kwargs: object) -> Outcome:
        ran.append((deviation, outcome.area))
        outcome.exit_code, outcome.broken = 2, ["test_qos.py::test_x"]
        return outcome

    monkeypatch.setattr(deviation_matrix, "run_through", run_through)
    argv = ["--deviations", "prefetch_plus_one", "requeue_to_tail", "--out", str(tmp_path)]
    assert deviation_matrix.main(argv) == 2
    assert ran == [(Deviation, "qos"), (Deviation, "requeue")]  # one clean run per area
    summary = json.loads((tmp_path / "deviations.json").read_text())
    assert summary["control"]["why_not"] == ("qos: 1 test(s) broken: test_qos.py::test_x; "
                                             "requeue: 1 test(s) broken: test_qos.py::test_x")
    assert summary["suite"] == [] and summary["machines_alone"] == [] and summary["commit"]


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_the_proxy_deviation_matrix_is_fully_killed(tmp_path: Path) -> None:
    assert deviation_matrix.main(["--out", str(tmp_path)]) == 0


def test_a_deviation_met_while_a_test_prepares_is_a_failure_of_its_rule(tmp_path: Path) -> None:
    """A broker that nacks the first publish of each confirm channel (PC-08) fails the tests whose
    setup publishes with confirms, naming PC-08; nothing is `broken`, and the exit status is 1."""
    from conformance.results.parts import read_table
    from conformance.suite import SUITE_DIR

    outcome = deviation_matrix.run(BY_NAME["first_confirm_nacked"], tmp_path, [f"{SUITE_DIR}/ack/test_ack.py"],
                                   "first-nack", scale=1.0, time_limit=240.0)
    tests = read_table(tmp_path, "tests", "first-nack").to_pylist()
    verdicts = {t["verdict"] for t in tests}
    failed = [t for t in tests if t["verdict"] == "failed"]
    assert outcome.exit_code == 1 and "broken" not in verdicts and failed, (outcome, verdicts)
    assert all(t["failed_rules"] == ["PC-08"] for t in failed), [(t["test_id"], t["failed_rules"]) for t in failed]
    assert all(t["message"].startswith("PC-08 broken:") and "nacked publish 1" in t["message"] for t in failed)


def test_a_required_method_answered_with_540_fails_the_gate(tmp_path: Path) -> None:
    """540 NOT_IMPLEMENTED for basic.qos, which the profile requires (QOS-02..05): the qos tests
    fail (never `unimplemented`, which the gate would let pass) and the run exits 1."""
    from conformance.results.parts import read_table
    from conformance.suite import SUITE_DIR

    outcome = deviation_matrix.run(BY_NAME["qos_not_implemented"], tmp_path, [f"{SUITE_DIR}/qos/test_qos.py"],
                                   "qos-540", scale=1.0, time_limit=240.0)
    tests = read_table(tmp_path, "tests", "qos-540").to_pylist()
    verdicts = {t["verdict"] for t in tests}
    assert outcome.exit_code == 1 and "failed" in verdicts, (outcome, verdicts)
    assert "unimplemented" not in verdicts and "broken" not in verdicts, verdicts
    assert any("540" in (t["message"] or "") for t in tests if t["verdict"] == "failed")


def test_each_deviation_is_timed_against_the_clean_run_of_its_area() -> None:
    from conformance.mutation import Control

    control = Control([Outcome("control", "ack", [], 0, 20.0), Outcome("control", "qos", [], 0, 10.0)], 30.0)
    suite = [Outcome("a", "ack", ["ACK-05"], 1, 30.0), Outcome("b", "qos", ["QOS-02"], 1, 25.0)]
    rows = deviation_matrix.time_ratios(suite, control)
    assert [(r["deviation"], r["clean_seconds"], r["ratio"]) for r in rows] == [("b", 10.0, 2.5), ("a", 20.0, 1.5)]


@pytest.mark.parametrize(("name", "rules"), [("mandatory_ignored", {"ROUTE-11", "ROUTE-12"}),
                                           ("exchange_bind_reversed", {"ROUTE-09"})])
def test_a_routing_deviation_is_killed_as_its_own_rule(tmp_path: Path, name: str, rules: set[str]) -> None:
    """A broker ignoring the mandatory flag fails the routing tests of returns and alternate
    exchanges naming ROUTE-11 and ROUTE-12; one reading exchange.bind's source and destination
    the other way round fails the test of exchange-to-exchange bindings naming ROUTE-09. Nothing
    is `broken`, and the exit status is 1. (The other routing deviation, routing_key_case_folded,
    is measured by the slow matrix: the example tests of routes are enough here.)"""
    from conformance.suite import SUITE_DIR

    outcome = deviation_matrix.run(BY_NAME[name], tmp_path, [f"{SUITE_DIR}/routing/test_routes.py"],
                                   name, scale=1.0, time_limit=120.0)
    assert outcome.killed and set(outcome.failed_rules) == rules, (outcome.why_not, outcome.failed_rules)
