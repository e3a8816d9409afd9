"""Priority queues in the reference broker (PRI-01, PRI-02): the model's order through the pure
core, quorum returns still first, and a durable priority queue's order over a restart."""

from __future__ import annotations

from pathlib import Path

from codec import (
    BasicAck,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.drivers.raw import RawClient
from conformance.model.priorities import classic_order, quorum_order
from reference_broker.server import EmbeddedBroker
from tests.reference_broker.sim import Sim, sends

PRIORITIES: list[int | None] = [None, 5, 1, 10, 5, 200, 0, 9, 3, None, 31, 40, 4, 2]


def _sim_with(queue: str, config: dict[str, object] | None = None, **args: object) -> Sim:
    sim = Sim(**(config or {}))
    sim.connect()
    sim.open()
    sim.queue(queue, **args)
    for i, p in enumerate(PRIORITIES):
        sim.do(1, 1, BasicPublish(routing_key=queue), BasicProperties(priority=p), b"%d" % i)
    return sim


def _get_all(sim: Sim, queue: str, no_ack: bool = True) -> list[int]:
    got: list[int] = []
    while oks := sends(sim.do(1, 1, BasicGet(queue=queue, no_ack=no_ack)), BasicGetOk):
        got.append(int(oks[0].body))
    return got


def test_classic_priorities_follow_the_model() -> None:
    assert _get_all(_sim_with("p", **{"x-max-priority": 10}), "p") == classic_order(PRIORITIES, 10)
    assert _get_all(_sim_with("f"), "f") == classic_order(PRIORITIES, None)  # no argument: FIFO
    assert _get_all(_sim_with("m", **{"x-max-priority": 255}), "m") == classic_order(PRIORITIES, 255)


def test_a_maximum_of_zero_is_two_levels_as_from_3_13_4_and_one_in_legacy_mode() -> None:
    assert _get_all(_sim_with("z", **{"x-max-priority": 0}), "z") == classic_order(PRIORITIES, 0, True)
    assert classic_order(PRIORITIES, 0, True) == classic_order(PRIORITIES, 1)
    legacy = _sim_with("z", {"timeout_mode": "legacy"}, **{"x-max-priority": 0})
    assert _get_all(legacy, "z") == classic_order(PRIORITIES, 0) == list(range(len(PRIORITIES)))


def test_quorum_priorities_follow_4_3_and_returns_go_first() -> None:
    sim = _sim_with("q", **{"x-queue-type": "quorum"})
    order = quorum_order(PRIORITIES, (4, 3))
    first = [int(sends(sim.do(1, 1, BasicGet(queue="q")), BasicGetOk)[0].body) for _ in range(3)]
    assert first == order[:3]
    sim.do(1, 1, BasicNack(delivery_tag=3, multiple=False, requeue=True))  # RQ-02: served first
    assert _get_all(sim, "q") == [order[2], *order[3:]]


def test_durable_priority_queue_keeps_its_order_over_a_restart(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=str(tmp_path)) as broker, RawClient(broker.url) as client:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue="dp", durable=True, arguments={"x-max-priority": 10}), QueueDeclareOk)
        client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
        for i, p in enumerate(PRIORITIES):
            client.send(ch, BasicPublish(routing_key="dp"), BasicProperties(priority=p, delivery_mode=2), b"%d" % i)
            client.expect(ch, BasicAck)
    with EmbeddedBroker(data_dir=str(tmp_path)) as broker, RawClient(broker.url) as client:
        ch = client.channel()
        got = []
        while isinstance((reply := client.rpc(ch, BasicGet(queue="dp", no_ack=True), BasicGetOk,
                                              BasicGetEmpty)).method, BasicGetOk):
            got.append(int(reply.body))
    assert got == classic_order(PRIORITIES, 10)
