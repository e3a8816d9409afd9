"""The applied-count barrier of a quorum queue's confirms (conformance/suite/steps/confirms.py rules):
where it is used, that a conforming broker whose consensus is slow still passes, that a withheld
confirm fails as PC-07 by the barrier (not after the 10-s bound), and the premise on live RabbitMQ.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import ClassVar

import pytest

from codec import (
    BasicAck,
    BasicProperties,
    BasicPublish,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
)
from conformance.catalogue.profiles import Profile
from conformance.drivers.raw import RawClient
from conformance.interpose.frames import Frame
from conformance.results.parts import read_table
from conformance.suite.steps.confirms import applied_barrier, collect_applied
from conformance.suite.steps.wire import Confirms, publish_burst
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation, Io, encode
from tests.conformance.deviations import ConfirmDropped
from tests.conformance.test_probes import BROKERS, upstream
from tests.conformance.test_slow_paths import suite_run

TEST = "test_quorum_queue_confirms"


def profile(product: str, version: str) -> Profile:
    return Profile("rabbitmq-4.3", server_properties={"product": product, "version": version})


def test_the_barrier_only_where_its_evidence_holds() -> None:
    assert applied_barrier(profile("RabbitMQ", "4.3.6"), 1)
    assert applied_barrier(profile("RabbitMQ", "3.10.8"), 1)
    emulating = Profile("rabbitmq-4.3", server_properties={"product": "amqp-conformance reference broker",
                                                           "emulates": "RabbitMQ 4.3.6"})
    assert applied_barrier(emulating, 1)
    assert not applied_barrier(profile("RabbitMQ", "4.3.6"), 3)  # a cluster: a notice to another node may wait
    assert not applied_barrier(profile("RabbitMQ", "4.3.6"), None)  # no admin: the nodes are unknown
    assert not applied_barrier(profile("RabbitMQ", "3.9.29"), 1)  # older than the source read
    assert not applied_barrier(profile("LavinMQ", "2.1.0"), 1)  # another product's count may come first


class ConsensusLate(Deviation):
    """A conforming broker whose quorum queue applies late (a slow disk): for `LAG` s after each
    publish, basic.acks are held and queue.declare-ok counts no message; the first frame after that
    is preceded by the held acks, as RabbitMQ's channel sends them once the leader applied."""

    name = "consensus_late"
    LAG: ClassVar[float] = 3.0  # well over the barrier's round trips, under the 10-s bound

    def __init__(self) -> None:
        super().__init__()
        self.held: list[bytes] = []
        self.until = 0.0  # monotonic: the consensus of the last publish is reached

    def client(self, frame: Frame, io: Io) -> None:
        if frame.type == 1 and isinstance(frame.method, BasicPublish):
            self.until = time.monotonic() + self.LAG
        io.to_broker(frame.raw)

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method if frame.type == 1 else None
        late = time.monotonic() < self.until
        if isinstance(m, BasicAck) and late:
            self.held.append(frame.raw)
            io.record("held")
            return
        if not late:
            for raw in self.held:
                io.to_client(raw)
            self.held = []
        if isinstance(m, QueueDeclareOk) and late:
            io.record("uncounted")
            io.to_client(encode(frame.channel, m._replace(message_count=0)))
            return
        io.to_client(frame.raw)


def run_through(deviation: type[Deviation], tmp_path: Path) -> tuple[list[dict[str, object]], list[str], str]:
    with EmbeddedBroker(management_port=0) as broker, DeviantProxy((broker.host, broker.port), deviation) as proxy:
        run = suite_run(proxy.url, tmp_path, "qq", TEST, timeout=120,
                        extra=["--broker-admin", broker.management_url or "none"])
        actions = list(proxy.actions)
    return read_table(tmp_path, "tests", "qq").to_pylist(), actions, run.stdout[-3000:]


def test_a_slow_consensus_is_waited_for(tmp_path: Path) -> None:
    rows, actions, stdout = run_through(ConsensusLate, tmp_path)
    assert [r["verdict"] for r in rows] == ["passed"], (stdout, [r["message"] for r in rows])
    assert "held" in actions and "uncounted" in actions  # the count lagged and was waited for


def test_a_withheld_confirm_fails_by_the_barrier(tmp_path: Path) -> None:
    rows, _, stdout = run_through(ConfirmDropped, tmp_path)
    assert [r["verdict"] for r in rows] == ["failed"], (stdout, [r["message"] for r in rows])
    message = str(rows[0]["message"])
    assert "PC-07" in message and "counted 3 of the 3 publishes" in message and "seqnos [2]" in message, message


@pytest.mark.parametrize("port", BROKERS)
def test_the_count_proves_the_confirms_on_a_single_node(port: int | None) -> None:
    """The premise on the live broker with its disk busy: 200 persistent messages of 64 KiB to a
    quorum queue in one write; once the queue counts them all, every confirm has come within the
    barrier's round trips."""
    with EmbeddedBroker() as broker, RawClient("amqp://guest:guest@{}:{}/".format(*upstream(port, broker)),
                                               timeout=5.0) as client:
        ch = client.channel()
        client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
        queue = f"amqpc.slow.applied.{uuid.uuid4().hex[:8]}"
        client.rpc(ch, QueueDeclare(queue=queue, durable=True, arguments={"x-queue-type": "quorum"}), QueueDeclareOk)
        try:
            publish_burst(client, ch, [queue] * 200, properties=BasicProperties(delivery_mode=2), body=bytes(64 * 1024))
            confirms = collect_applied(Confirms.expecting(1, 200), client, ch, queue, 200, 60.0, barrier=True)
        finally:
            client.rpc(ch, QueueDelete(queue=queue), QueueDeleteOk, timeout=30.0)
    assert not confirms.nacked and confirms.acked == set(range(1, 201)), confirms.seen
