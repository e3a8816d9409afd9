"""The reference broker as a cluster over sockets: `--nodes 3` listens on three
ports; the management API stops and starts a node, as the node_control command does."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from codec import (
    BasicCancel,
    BasicConsume,
    BasicConsumeOk,
    BasicQos,
    BasicQosOk,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.drivers.raw import ChannelClosed, ConnectionLost, RawClient
from reference_broker.node_control import main as node_control
from reference_broker.server import EmbeddedBroker


@pytest.fixture
def cluster() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(nodes=3, management_port=0) as broker:
        yield broker


def client(broker: EmbeddedBroker, node: int) -> RawClient:
    port = broker.server.node_ports[node]
    return RawClient(f"amqp://guest:guest@127.0.0.1:{port}/", timeout=5).connect()


def control(broker: EmbeddedBroker, node: int, action: str) -> int:
    return node_control([str(broker.management_url), str(node), action, "--timeout", "10"])


def test_three_nodes_on_consecutive_ports_and_a_node_that_stops_and_starts(cluster: EmbeddedBroker) -> None:
    ports = cluster.server.node_ports
    assert sorted(ports) == [1, 2, 3] and len(set(ports.values())) == 3
    on3, on2 = client(cluster, 3), client(cluster, 2)
    ch3, ch2 = on3.channel(), on2.channel()
    on3.rpc(ch3, QueueDeclare(queue="cq", durable=True), QueueDeclareOk)
    on2.rpc(ch2, BasicConsume(queue="cq", consumer_tag="c"), BasicConsumeOk)
    assert control(cluster, 3, "stop") == 0
    assert on2.expect(ch2, BasicCancel, timeout=5).method == BasicCancel("c", nowait=True)  # CLU-01
    assert on2.rpc(ch2, BasicQos(prefetch_count=1), BasicQosOk)
    with pytest.raises(ConnectionLost):
        on3.rpc(ch3, BasicQos(prefetch_count=1), BasicQosOk)  # its node's connections died with it
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", ports[3]), timeout=2).close()
    with pytest.raises(ChannelClosed, match="process is stopped by supervisor"):
        on2.rpc(on2.channel(), QueueDeclare(queue="cq", passive=True), QueueDeclareOk)  # CLU-04
    assert control(cluster, 3, "stop") == 0  # already stopped: said, not an error
    assert control(cluster, 3, "start") == 0
    again = client(cluster, 3)
    assert again.rpc(again.channel(), QueueDeclare(queue="cq", passive=True), QueueDeclareOk)
    for c in (on2, on3, again):
        c.close()


def test_a_single_node_has_no_node_to_stop() -> None:
    with EmbeddedBroker(management_port=0) as broker:
        assert control(broker, 1, "stop") == 1
        assert broker.server.node_ports == {1: broker.port}
