"""A conforming broker on a slow path is not a deviation: the machines wait for what a consensus
holds up as long as its rule's evidence says (conformance/suite/steps/machine_base.py, `sync`).

The proxy here plays a loaded RabbitMQ whose quorum queue applies commands late: the ready
count a passive queue.declare reports for a queue whose name ends in ".quorum" lags the broker's
by `LAG` s after every change (Ra applies a return, a settle or a channel's close some time after
the command). The requeue machine, which compares every queue's count after every step, must pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import ClassVar

import pytest

from codec import (
    BasicAck,
    BasicNack,
    BasicProperties,
    ChannelCloseOk,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    encode_method,
)
from conformance.drivers.raw import NoReply, RawClient
from conformance.interpose.frames import Frame
from conformance.interpose.relay import IN
from conformance.results.parts import read_table
from conformance.suite.steps.queues import CLASSIC, DECLARED, QUORUM, Publisher, confirm_wait, declare, prompt
from conformance.suite.steps.wire import Confirms, publish_burst
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation, Io, encode
from tests.conformance.test_probes import BROKERS, upstream

ROOT = Path(__file__).resolve().parents[2]


def suite_run(url: str, out: Path, run_id: str, test: str, *, timeout: float,
              env: dict[str, str] | None = None, extra: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """The suite's test(s) named by `test` (a -k expression) against `url`, as a user runs them
    (`extra`: more of the plugin's options)."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                           "-o", "addopts=", "--broker-url", url, "--results-dir", str(out), "--run-id", run_id,
                           *(extra or []), "-k", test, "--pyargs", "conformance.suite"],
                          capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT, env=env)


class QuorumCountLags(Deviation):
    """A quorum queue's ready count, as queue.declare-ok reports it, trails the truth by `LAG` s."""

    name = "quorum_count_lags"
    LAG: ClassVar[float] = 3.0  # over the machines' 2 s settle, under the 10 s a consensus is given

    def __init__(self) -> None:
        super().__init__()
        self.shown: dict[str, tuple[int, int, float]] = {}  # queue -> (count shown, true count, since)

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method if frame.type == 1 else None
        if not isinstance(m, QueueDeclareOk) or not m.queue.endswith(".quorum"):
            io.to_client(frame.raw)
            return
        now = time.monotonic()
        shown, true, since = self.shown.get(m.queue, (m.message_count, m.message_count, now))
        if m.message_count != true:  # the broker's count moved: the old one is shown for LAG s
            true, since = m.message_count, now
        if now - since >= self.LAG:
            shown = true
        self.shown[m.queue] = (shown, true, since)
        if shown != m.message_count:
            io.record("lagged")
        io.to_client(encode(frame.channel, m._replace(message_count=shown)))


@pytest.mark.gate  # the requeue machine end to end, about 40 s: `make test-gates`
@pytest.mark.timeout(300)
def test_the_requeue_machine_waits_for_a_quorum_queue_applying_commands_late(tmp_path: Path) -> None:
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), QuorumCountLags) as proxy:
        env = {**os.environ, "AMQPC_MACHINE_EXAMPLES": "6"}
        run = suite_run(proxy.url, tmp_path, "lag", "test_requeue_order_and_redelivered_match_the_model", timeout=280, env=env)
        lagged = proxy.actions.count("lagged")
    rows = read_table(tmp_path, "tests", "lag").to_pylist()
    assert [r["verdict"] for r in rows] == ["passed"], (run.stdout[-3000:], [r["message"] for r in rows])
    assert lagged > 0  # the slow path was taken: counts were shown late and waited for


class MethodLate(Deviation):
    """Every `METHOD` the broker sends reaches the client `LAG` s late (recorded as "late")."""

    METHOD: ClassVar[type | tuple[type, ...]]
    LAG: ClassVar[float]

    def broker(self, frame: Frame, io: Io) -> None:
        if frame.type == 1 and isinstance(frame.method, self.METHOD):
            io.record("late")
            io.link.send_later(self.LAG, IN, frame.raw)
            return
        io.to_client(frame.raw)


class ConfirmsLate(MethodLate):
    """A broker whose disk or consensus is slow: every basic.ack reaches the client `LAG` s late."""

    name = "confirms_late"
    METHOD = BasicAck
    LAG = 3.0


@pytest.mark.parametrize("kind", [QUORUM, CLASSIC])
def test_a_setup_publish_waits_for_a_confirm_as_long_as_its_queue_allows(kind: str) -> None:
    """A Publisher (a test's setup step) waits 10 s for a quorum queue's confirm and 5 s for a
    persistent message in a durable queue, so a confirm 3 s late fails nothing there; only what
    no disk or consensus holds up (a transient message to a transient classic queue) is owed at once."""
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), ConfirmsLate) as proxy, \
            RawClient(proxy.url, timeout=5.0) as client:
        ch = client.channel()
        queue = declare(client, ch, f"amqpc.slow.{kind}.{uuid.uuid4().hex[:8]}", kind)
        assert confirm_wait(client, queue, persistent=False) == {QUORUM: 10.0, CLASSIC: 2.0}[kind]
        if kind == QUORUM:
            Publisher(client).publish(queue, [b"m1"])  # 3 s late: within the consensus's 10 s
        else:
            with pytest.raises(NoReply, match="PC-05"):
                Publisher(client).publish(queue, [b"m1"])  # transient, transient queue: owed at once
        assert "late" in proxy.actions


def test_a_persistent_message_to_a_durable_queue_is_given_the_disk_wait() -> None:
    with EmbeddedBroker() as broker, RawClient(broker.url, timeout=5.0) as client:
        ch = client.channel()
        durable = f"amqpc.slow.durable.{uuid.uuid4().hex[:8]}"
        client.rpc(ch, QueueDeclare(queue=durable, durable=True), QueueDeclareOk)
        assert confirm_wait(client, durable, persistent=True) == 10.0  # declared raw: its kind is unknown
        DECLARED[durable] = (CLASSIC, True)
        assert confirm_wait(client, durable, persistent=True) == 5.0
        assert confirm_wait(client, durable, persistent=False) == 2.0


class SlowLink(Deviation):
    """Every method frame from the broker arrives `DELAY` s late (a slow link; the order is kept)."""

    name = "slow_link"
    DELAY: ClassVar[float] = 0.05  # as long as the lifecycle machine's SHORT TTL

    def broker(self, frame: Frame, io: Io) -> None:
        if frame.type == 1:
            time.sleep(self.DELAY)  # the link's latency: part of the scenario, not a wait for anything
            io.record("delayed")
        io.to_client(frame.raw)


@pytest.mark.gate  # the lifecycle machine end to end behind a slow link: `make test-gates`
@pytest.mark.timeout(300)
def test_the_lifecycle_machine_passes_behind_a_slow_link(tmp_path: Path) -> None:
    """Its TTLs are counted from the replies, which a slow link delays: a message's TTL passes
    earlier on the broker's clock than the machine assumes, never later."""
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), SlowLink) as proxy:
        env = {**os.environ, "AMQPC_MACHINE_EXAMPLES": "6"}
        run = suite_run(proxy.url, tmp_path, "slow", "test_the_message_lifecycle_matches_the_model", timeout=280, env=env)
        delayed = proxy.actions.count("delayed")
    rows = read_table(tmp_path, "tests", "slow").to_pylist()
    assert [r["verdict"] for r in rows] == ["passed"], (run.stdout[-3000:], [r["message"] for r in rows])
    assert delayed > 0


class CloseOkLate(MethodLate):
    """A busy broker: every channel.close-ok reaches the client `LAG` s late."""

    name = "close_ok_late"
    METHOD = ChannelCloseOk
    LAG = 1.0  # over the 0.3 s ERR-03's test once looked for it in (a flake on 4.3.6)


def test_methods_after_a_channel_close_wait_for_a_late_close_ok(tmp_path: Path) -> None:
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), CloseOkLate) as proxy:
        run = suite_run(proxy.url, tmp_path, "late", "test_methods_after_a_broker_channel_close_are_ignored", timeout=120)
        late = proxy.actions.count("late")
    rows = read_table(tmp_path, "tests", "late").to_pylist()
    assert [r["verdict"] for r in rows] == ["passed"], (run.stdout[-3000:], [r["message"] for r in rows])
    assert late > 0


class DeleteLate(MethodLate):
    """A slow disk under a queue's deletion: queue.delete-ok and every confirm reach the client
    `LAG` s late, in the order the broker sent them."""

    name = "delete_late"
    METHOD = (QueueDeleteOk, BasicAck, BasicNack)
    LAG = 3.0  # over the 2 s owed after the delete-ok, under the delete-ok's 10 s


@pytest.mark.parametrize("port", BROKERS)
def test_a_deleted_queues_confirms_are_waited_for_behind_a_late_delete_ok(port: int | None, tmp_path: Path) -> None:
    """PC-09's test gives the deletion the disk's 10 s and what is still unconfirmed after its
    delete-ok the 2 s owed at once: a delete-ok and confirms 3 s late fail nothing."""
    with EmbeddedBroker() as broker, DeviantProxy(upstream(port, broker), DeleteLate) as proxy:
        run = suite_run(proxy.url, tmp_path, "late", "test_queue_deleted_with_confirms_pending_means_ack", timeout=120)
        late = proxy.actions.count("late")
    rows = read_table(tmp_path, "tests", "late").to_pylist()
    assert [r["verdict"] for r in rows] == ["passed", "passed"], (run.stdout[-3000:], [r["message"] for r in rows])
    assert late > 2  # the delete-ok and confirms of both tests came late


@pytest.mark.parametrize("port", BROKERS)
def test_a_deleted_durable_queue_settles_what_its_disk_still_held_with_its_delete_ok(port: int | None) -> None:
    """The evidence behind PC-09's short wait, on the live broker with its disk busy: 200
    persistent messages of 256 KiB (50 MiB for the message store) and the queue's deletion in one
    write. Whatever is unconfirmed when queue.delete-ok comes is acked within the 2 s owed at once."""
    with EmbeddedBroker() as broker, RawClient("amqp://guest:guest@{}:{}/".format(*upstream(port, broker)),
                                               timeout=5.0) as client:
        ch = client.channel()
        client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
        queue = f"amqpc.slow.deleted.{uuid.uuid4().hex[:8]}"
        client.rpc(ch, QueueDeclare(queue=queue, durable=True), QueueDeclareOk)
        publish_burst(client, ch, [queue] * 200, properties=BasicProperties(delivery_mode=2), body=bytes(256 * 1024),
                      tail=encode_method(ch, QueueDelete(queue=queue)))
        client.expect(ch, QueueDeleteOk, timeout=60.0)
        before = len(client.pending(ch))
        confirms = Confirms.expecting(1, 200).collect(client, ch, prompt(client))
    assert not confirms.nacked and confirms.acked == set(range(1, 201)), (before, confirms.seen)

