"""The driver's probes change nothing (conformance/drivers/probes.py): none on a channel in a
transaction, none where its reply could be taken for the test's own, silences learned for exactly
the request left unanswered, and probing only against a broker shown to answer the probe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from codec import (
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    ChannelClose,
    ChannelFlow,
    ChannelOpenOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    TxCommit,
    TxCommitOk,
    TxSelect,
    TxSelectOk,
)
from conformance.drivers.address import BrokerAddress
from conformance.drivers.probes import PROBE_SUPPORT, ChannelStates, refusal, request_for
from conformance.drivers.raw import NoReply, RawClient
from conformance.drivers.silence import SILENCES, Unanswered
from conformance.interpose.frames import Frame
from conformance.interpose.relay import IN
from conformance.plugin.health import HealthProbe
from conformance.results.parts import read_table
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation, Io
from tests.conformance.test_silences import learning  # noqa: F401  (the fixture: probing on, as in a rule test)
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
BROKERS = [pytest.param(None, id="reference"),
           pytest.param(5672, marks=pytest.mark.rabbitmq, id="rabbitmq-3.10.8"),
           pytest.param(5743, marks=pytest.mark.rabbitmq43, id="rabbitmq-4.3.6")]


def sent_on(client: RawClient, channel: int) -> list[str]:
    return [type(r.frame.method).__name__ for r in client.recorder.frames
            if r.direction == "out" and r.channel == channel and hasattr(r.frame, "method")]


def upstream(port: int | None, broker: EmbeddedBroker) -> tuple[str, int]:
    if port is None:
        return broker.host, broker.port
    try:
        RawClient(f"amqp://guest:guest@127.0.0.1:{port}/", timeout=5.0).connect().close()
    except OSError as exc:
        require(False, f"RabbitMQ at 127.0.0.1:{port} ({exc})")
    return "127.0.0.1", port


class HeldReplies(Deviation):
    """A conforming but slow broker (a slow disk): replies of `held` types reach the client
    `seconds` later than the broker sent them."""

    name = "held_replies"
    held: ClassVar[tuple[type, ...]] = (TxCommitOk,)
    seconds: ClassVar[float] = 3.0

    def broker(self, frame: Frame, io: Io) -> None:
        if frame.type == 1 and isinstance(frame.method, self.held):
            io.record(f"held {frame.method.NAME}")
            io.link.send_later(self.seconds, IN, frame.raw)
            return
        io.to_client(frame.raw)


class HeldDeclareOk(HeldReplies):
    held = (QueueDeclareOk,)


class Unanswering(Deviation):
    """Requests the broker never hears (so never answers): `drops(method)` says which."""

    name = "unanswering"

    def drops(self, method: Any) -> bool:
        raise NotImplementedError

    def client(self, frame: Frame, io: Io) -> None:
        if frame.type == 1 and self.drops(frame.method):
            io.record(f"dropped {frame.method.NAME}")
            return
        io.to_broker(frame.raw)


class ExchangeDeclareUnanswered(Unanswering):
    def drops(self, method: Any) -> bool:
        return isinstance(method, ExchangeDeclare) and not method.passive


class QosWithSizeUnanswered(Unanswering):
    def drops(self, method: Any) -> bool:
        return isinstance(method, BasicQos) and method.prefetch_size != 0


class FlowUnanswered(Unanswering):
    def drops(self, method: Any) -> bool:
        return isinstance(method, ChannelFlow)


def test_a_probe_is_refused_where_it_could_change_something() -> None:
    states = ChannelStates()
    assert refusal(states, 0, [], raw=False) == "channel 0 carries no probe"
    assert "not known to be open" in str(refusal(states, 1, [], raw=False))
    states.received(1, ChannelOpenOk())
    assert refusal(states, 1, [], raw=False) is None
    assert refusal(states, 1, [], raw=True) == "raw bytes went out on this channel"
    assert "a probe on this channel is unanswered" in str(refusal(states, 1, [request_for(ChannelFlow(True), True)],
                                                                  raw=False))
    assert "awaits the probe's reply" in str(refusal(states, 1, [request_for(ChannelFlow(True))], raw=False))
    assert refusal(states, 1, [request_for(ExchangeDeclare(exchange="x"))], raw=False) is None
    states.sent(1, TxSelect())
    assert "in a transaction" in str(refusal(states, 1, [], raw=False))
    states.sent(2, ChannelClose(200, "bye", 0, 0))
    states.opened.add(2)
    assert refusal(states, 2, [], raw=False) == "the client is closing the channel"


@pytest.mark.parametrize("port", BROKERS)
@pytest.mark.usefixtures("learning")
def test_no_probe_goes_out_on_a_channel_in_a_transaction(port: int | None) -> None:
    """A commit held 3 s (a slow disk) is waited for; the probe, which RabbitMQ would answer with
    504 "unexpected command while processing 'tx.commit'", never goes out on that channel. The
    control, a queue.declare-ok held as long on a channel without a transaction, is probed."""
    with EmbeddedBroker() as broker, DeviantProxy(upstream(port, broker), HeldReplies) as proxy, \
            RawClient(proxy.url, timeout=5.0) as client:
        ch = client.channel()
        queue = client.rpc(ch, QueueDeclare(queue="", durable=True, exclusive=True), QueueDeclareOk).method.queue
        client.rpc(ch, TxSelect(), TxSelectOk)
        for n in range(20):
            client.send(ch, BasicPublish(routing_key=queue), BasicProperties(delivery_mode=2), b"%d" % n * 1000)
        assert isinstance(client.rpc(ch, TxCommit(), TxCommitOk).method, TxCommitOk)
        assert "held tx.commit-ok" in proxy.actions
        assert "ChannelFlow" not in sent_on(client, ch), sent_on(client, ch)
        assert isinstance(client.rpc(ch, QueueDelete(queue=queue), QueueDeleteOk).method, QueueDeleteOk)
    with EmbeddedBroker() as broker, DeviantProxy(upstream(port, broker), HeldDeclareOk) as proxy, \
            RawClient(proxy.url, timeout=5.0) as client:
        other = client.channel()
        client.rpc(other, QueueDeclare(queue="", exclusive=True), QueueDeclareOk)
        assert sent_on(client, other) == ["ChannelOpen", "QueueDeclare", "ChannelFlow"]  # the control: probed
        assert client.pending(other) == []  # the probe's flow-ok never reaches the test


@pytest.mark.usefixtures("learning")
def test_a_test_waiting_for_its_own_declare_ok_gets_no_reply_never_the_probes() -> None:
    """The broker never answers the test's exchange.declare: the probe goes out, its reply
    (channel.flow-ok) is matched to the probe alone, and the test's wait ends with no reply."""
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), ExchangeDeclareUnanswered) as proxy, \
            RawClient(proxy.url, timeout=1.0) as client:
        ch = client.channel()
        with pytest.raises(NoReply, match=r"exchange\.declare-ok on channel 1"):
            client.rpc(ch, ExchangeDeclare(exchange="amqpc.probes.x", exchange_type="direct"), ExchangeDeclareOk)
        assert "ChannelFlow" in sent_on(client, ch) and client.pending(ch) == []
        assert proxy.actions == ["dropped exchange.declare"]


def test_a_broker_that_never_answers_exchange_declare_fails_dcl02_with_no_reply(tmp_path: Path) -> None:
    """Through the plugin, as a user runs it: DCL-02's tests fail with "no reply", never "succeeded"."""
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), ExchangeDeclareUnanswered) as proxy:
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                              "-o", "addopts=", "--broker-url", proxy.url, "--results-dir", str(tmp_path),
                              "--run-id", "dcl02", "--timeout-scale", "0.4", "-k", "test_an_unknown_exchange_type",
                              "--pyargs", "conformance.suite"],
                             capture_output=True, text=True, timeout=240, check=False, cwd=ROOT)
    assert run.returncode == 1, run.stdout[-3000:]
    rows = read_table(tmp_path, "tests", "dcl02").to_pylist()
    assert len(rows) == 2 and {r["verdict"] for r in rows} == {"failed"}, rows
    for row in rows:
        assert "DCL-02" in row["failed_rules"] and "no reply" in row["message"], row["message"]
        assert "succeeded" not in row["message"], row["message"]


@pytest.mark.usefixtures("learning")
def test_a_silence_of_qos_with_a_size_does_not_fail_a_plain_qos() -> None:
    """basic.qos(prefetch_size=10) left unanswered in two tests is learned; a plain basic.qos, which
    the broker answers, is still waited for and answered; the same sized qos is cut short."""
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), QosWithSizeUnanswered) as proxy, \
            RawClient(proxy.url, timeout=1.0) as client:
        for test in ("test_one", "test_two"):
            SILENCES.test = test
            ch = client.channel()
            with pytest.raises(NoReply) as waited:
                client.rpc(ch, BasicQos(prefetch_size=10), BasicQosOk)
            assert not isinstance(waited.value, Unanswered)
        SILENCES.test = "test_three"
        ch = client.channel()
        assert isinstance(client.rpc(ch, BasicQos(prefetch_size=0, prefetch_count=10), BasicQosOk).method, BasicQosOk)
        with pytest.raises(Unanswered, match=r"no reply to basic.qos\(prefetch_size=10, prefetch_count=0"):
            client.rpc(client.channel(), BasicQos(prefetch_size=10), BasicQosOk)


def test_the_health_check_learns_whether_the_broker_answers_the_probe() -> None:
    PROBE_SUPPORT.forget()
    try:
        with EmbeddedBroker() as broker:
            probe = HealthProbe(broker.url, 2.0)
            assert probe.check() is None and PROBE_SUPPORT.allows(("127.0.0.1", broker.port, "/"))
            probe.close()
            with DeviantProxy((broker.host, broker.port), FlowUnanswered) as proxy:
                silent = HealthProbe(proxy.url, 2.0)
                assert silent.check() is None  # still healthy: the question is not a health check
                key = BrokerAddress.parse(proxy.url).key
                assert PROBE_SUPPORT.known(key) and not PROBE_SUPPORT.allows(key)
                assert silent.check() is None and proxy.actions == ["dropped channel.flow"]  # asked once a run
                silent.close()
    finally:
        PROBE_SUPPORT.forget()


@pytest.mark.usefixtures("learning")
def test_without_support_no_probe_goes_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PROBE_SUPPORT, "allows", lambda broker: False)
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), HeldDeclareOk) as proxy, \
            RawClient(proxy.url, timeout=5.0) as client:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue="", exclusive=True), QueueDeclareOk)
        assert sent_on(client, ch) == ["ChannelOpen", "QueueDeclare"]


@pytest.mark.parametrize("port, baseline", [  # 3.10.8: `make test-gates`; 4.3.6: `make test-rabbitmq43`
    pytest.param(5672, "rabbitmq-3.10.8.toml", marks=[pytest.mark.rabbitmq, pytest.mark.gate], id="rabbitmq-3.10.8"),
    pytest.param(5743, "rabbitmq-4.3.6.toml", marks=pytest.mark.rabbitmq43, id="rabbitmq-4.3.6")])
def test_the_confirms_area_passes_with_commits_held_back(port: int, baseline: str, tmp_path: Path) -> None:
    """The confirms area on real RabbitMQ with every tx.commit-ok 3 s late (a slow disk): PC-11's
    commit of persistent messages to a durable queue included, every test passes or is accepted by
    the baseline (exit 0), and no probe went out on a channel in a transaction."""
    with EmbeddedBroker() as broker, DeviantProxy(upstream(port, broker), HeldReplies) as proxy:
        done = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--broker-url", proxy.url,
                               "--baseline", str(ROOT / "baselines" / baseline), "--select", "confirms",
                               "--out", str(tmp_path / "out")],
                              capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert "held tx.commit-ok" in proxy.actions, proxy.actions
