"""The machines' teardown connection (conformance.suite.steps.machine_teardown).

One machine test's examples delete what they declared on one connection kept for the whole test;
a connection the broker dropped is reopened and the deletes are made on the new one; nothing is
left behind; outside a machine test each teardown has a connection of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from codec import (
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
)
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.suite.ack.test_machine_ack import AckMachine
from conformance.suite.steps import machine_teardown
from conformance.suite.steps.machine_base import run_machine
from conformance.suite.steps.machine_support import MachineTarget
from conformance.suite.steps.machine_teardown import Janitor, delete_after_close, kept_connections
from reference_broker.server import EmbeddedBroker


def names_held(broker: EmbeddedBroker) -> tuple[set[str], set[str]]:
    vhost = broker.call(lambda: broker.server.core.vhosts["/"])
    return (set(broker.call(lambda: list(vhost.queues))),
            {x for x in broker.call(lambda: list(vhost.exchanges)) if x and not x.startswith("amq.")})


def connections(broker: EmbeddedBroker) -> int:
    return int(broker.call(lambda: len(broker.server.core.connections)))


def test_one_connection_deletes_every_example_of_a_machine_test(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Janitor] = []
    deletes: list[int] = []
    original_init, original_delete = Janitor.__init__, Janitor.delete

    def init(self: Janitor, url: str, timeout: float) -> None:
        original_init(self, url, timeout)
        made.append(self)

    def delete(self: Janitor, methods: list[Any]) -> None:
        deletes.append(len(methods))
        original_delete(self, methods)

    monkeypatch.setattr(Janitor, "__init__", init)
    monkeypatch.setattr(Janitor, "delete", delete)
    with EmbeddedBroker() as broker:
        before = names_held(broker)
        run_machine(AckMachine, MachineTarget(broker.url, "rabbitmq-4.3"), examples=4, steps=3)
        assert names_held(broker) == before, "the machine's queues and exchanges are all deleted"
        assert connections(broker) == 0, "the kept connection is closed when the machine test ends"
    assert len(deletes) >= 4 and all(deletes), deletes  # every example deleted what it declared
    assert len({id(j) for j in made if j.opened}) == 1 and made[0].opened == 1, \
        f"one teardown connection for the whole test: {[(id(j), j.opened) for j in made]}"


def test_a_dropped_teardown_connection_is_reopened_and_the_deletes_made() -> None:
    with EmbeddedBroker() as broker, kept_connections() as janitors:
        with RawClient(broker.url) as c:
            ch = c.channel()
            for name in ("amqpc.td.q1", "amqpc.td.q2"):
                c.rpc(ch, QueueDeclare(queue=name), QueueDeclareOk)
            c.rpc(ch, ExchangeDeclare(exchange="amqpc.td.x", exchange_type="fanout"), ExchangeDeclareOk)
        delete_after_close([QueueDelete(queue="amqpc.td.q1")], broker.url, 5.0)
        (janitor,) = janitors.values()
        assert janitor.client is not None and janitor.opened == 1
        janitor.client.sock.close()  # type: ignore[union-attr]  # the connection is gone under it
        delete_after_close([QueueDelete(queue="amqpc.td.q2"), ExchangeDelete(exchange="amqpc.td.x")],
                           broker.url, 5.0)
        assert janitor.opened == 2
        queues, exchanges = names_held(broker)
        assert not {"amqpc.td.q1", "amqpc.td.q2"} & queues and "amqpc.td.x" not in exchanges


def test_a_refused_delete_skips_to_a_new_channel_and_the_rest_are_made() -> None:
    """An exclusive queue of another (open) connection: its delete is refused (405), the next is made."""
    with EmbeddedBroker() as broker, RawClient(broker.url) as owner:
        ch = owner.channel()
        owner.rpc(ch, QueueDeclare(queue="amqpc.td.mine", exclusive=True), QueueDeclareOk)
        owner.rpc(ch, QueueDeclare(queue="amqpc.td.other"), QueueDeclareOk)
        with pytest.raises(ChannelClosed), RawClient(broker.url) as c:  # the janitor meets this: the owner holds it
            c.rpc(c.channel(), QueueDelete(queue="amqpc.td.mine"), QueueDeleteOk)
        delete_after_close([QueueDelete(queue="amqpc.td.mine"), QueueDelete(queue="amqpc.td.other")], broker.url, 5.0)
        queues, _ = names_held(broker)
        assert "amqpc.td.other" not in queues and "amqpc.td.mine" in queues
        assert connections(broker) == 1, "outside a machine test the teardown's own connection is closed"


def test_no_kept_connection_outlives_its_machine_test() -> None:
    with kept_connections():
        assert machine_teardown._KEPT
    assert not machine_teardown._KEPT
