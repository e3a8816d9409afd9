"""A method the broker never answers is waited for once per run (conformance/drivers/silence.py):
the named fault `get_unanswered` drops basic.get (no reply, no 540)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from codec import BasicGet, BasicGetEmpty, BasicGetOk, QueueDeclare, QueueDeclareOk
from conformance.drivers.probes import PROBE_SUPPORT
from conformance.drivers.raw import NoReply, RawClient
from conformance.drivers.silence import SILENCES, Silences, Unanswered
from conformance.results.parts import read_table
from reference_broker.server import EmbeddedBroker

BROKER = ("127.0.0.1", 5672, "/")


def test_a_silence_is_known_once_two_tests_met_it_and_only_inside_a_test() -> None:
    silences = Silences()
    silences.learn(BROKER, "basic.get", 5.0)  # no test running: nothing learned
    silences.test = "test_a"
    silences.check(BROKER, "basic.get", "basic.get-ok on channel 1")
    silences.learn(BROKER, "basic.get", 5.0)
    silences.check(BROKER, "basic.get", "x")  # one test met it (a conforming broker may be late once): still waited for
    silences.learn(BROKER, "basic.get", 5.0)  # the same test again: still one test
    silences.check(BROKER, "basic.get", "x")
    silences.test = "test_b"
    silences.learn(BROKER, "basic.get", 5.0)  # a second test: learned
    silences.check(BROKER, "basic.qos", "basic.qos-ok on channel 1")  # another method: still waited for
    silences.check(("127.0.0.1", 5673, "/"), "basic.get", "x")  # another broker: still waited for
    with pytest.raises(Unanswered, match=r"no reply to basic.get \(waiting for x\), as in 1 earlier test of this run"):
        silences.check(BROKER, "basic.get", "x")
    silences.test = "test_c"
    with pytest.raises(Unanswered, match=r"as in 2 earlier tests of this run: the broker answered none within 5\.0 s") \
            as caught:
        silences.check(BROKER, "basic.get", "x")
    assert isinstance(caught.value, NoReply)  # a driver outcome: the test's verdict is `failed`
    silences.forget()
    silences.check(BROKER, "basic.get", "x")


@pytest.fixture
def learning(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As inside a rule test of a suite run, against a broker whose health check showed that it
    answers the driver's probe (conformance/drivers/probes.py)."""
    SILENCES.forget()
    SILENCES.test = "test_the_driver_waits_once_for_a_method_the_broker_drops"
    monkeypatch.setattr(PROBE_SUPPORT, "allows", lambda broker: True)
    try:
        yield
    finally:
        SILENCES.test = None
        SILENCES.forget()


def test_the_driver_stops_waiting_for_a_method_the_broker_drops(learning: None) -> None:
    with EmbeddedBroker(faults=["get_unanswered"]) as broker, RawClient(broker.url, timeout=1.0) as client:
        ch = client.channel()
        queue = client.rpc(ch, QueueDeclare(queue="", exclusive=True), QueueDeclareOk).method.queue
        for test in ("test_one", "test_two"):  # two tests meet the silence, each after a whole wait
            SILENCES.test = test
            client.send(ch, BasicGet(queue=queue, no_ack=True))
            started = time.monotonic()
            with pytest.raises(NoReply) as waited:
                client.expect(ch, BasicGetOk, BasicGetEmpty)
            assert not isinstance(waited.value, Unanswered) and time.monotonic() - started >= 1.0
        assert client.rpc(ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk)  # the channel still works
        SILENCES.test = "test_three"
        client.send(ch, BasicGet(queue=queue, no_ack=True))  # sent again: the broker sees the same traffic
        with pytest.raises(Unanswered, match=r"no reply to basic.get\(ticket=0, queue='amq.gen-[^']+', no_ack=True\) .*as in 2 earlier tests"):
            client.expect(ch, BasicGetOk, BasicGetEmpty)  # raised before any read (silence.check)
        assert client.poll(ch, BasicGetOk, duration=0.1) is None  # a look is never cut short


def test_a_clean_broker_teaches_nothing(learning: None) -> None:
    with EmbeddedBroker() as broker, RawClient(broker.url, timeout=1.0) as client:
        ch = client.channel()
        queue = client.rpc(ch, QueueDeclare(queue="", exclusive=True), QueueDeclareOk).method.queue
        for _ in range(2):
            assert client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk, BasicGetEmpty)
    assert SILENCES.waited == {}


@pytest.mark.gate  # the qos area with every basic.get unanswered, each test waiting: `make test-gates`
@pytest.mark.timeout(300)
def test_through_the_suite_each_test_waits_for_its_own_request(tmp_path: Path) -> None:
    """The qos area against the fault, one worker: a silence is learned for exactly the request left
    unanswered, and each test's basic.get names that test's own queue, so every test waits for its
    own reply (none is cut short by another test's silence) and fails with its own verdict naming QOS-07."""
    with EmbeddedBroker(faults=["get_unanswered"]) as broker:
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                              "-o", "addopts=", "--broker-url", broker.url, "--results-dir", str(tmp_path),
                              "--run-id", "silence", "-m", "area_qos", "--pyargs", "conformance.suite"],
                             capture_output=True, text=True, timeout=240, check=False)
    assert run.returncode == 1, run.stdout[-3000:]
    rows = read_table(tmp_path, "tests", "silence").to_pylist()
    failed = [r for r in rows if r["verdict"] == "failed"]
    assert "broken" not in {r["verdict"] for r in rows} and all("QOS-07" in r["failed_rules"] for r in failed), rows
    assert len(failed) >= 3, rows
    skipped = [r for r in failed if "so this wait was not made again" in r["message"]]
    assert skipped == [], [r["message"] for r in skipped]


def test_a_channel_the_broker_closed_without_telling_teaches_nothing(learning: None) -> None:
    """The deviation proxy hides a channel.close: the next method on that channel goes unanswered,
    the driver's probe proves the channel closed (hidden_close), so no silence of the method is learned."""
    from conformance.drivers.raw import ConnectionClosed
    from tests.conformance.deviant import DeviantProxy
    from tests.conformance.deviations import BY_NAME

    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), BY_NAME["channel_close_hidden"]) as proxy:
        for test in ("test_one", "test_two", "test_three"):
            SILENCES.test = test
            client = RawClient(proxy.url, timeout=0.5).connect()
            ch = client.channel()
            client.send(ch, BasicGet(queue="amqpc.silence.missing", no_ack=True))  # 404: the broker closes ch
            with pytest.raises(ConnectionClosed) as closed:  # the close is hidden: proven by the probe, or (the
                client.expect(ch, BasicGetOk, BasicGetEmpty)  # proxy's close-ok got there first) by the broker's own 504
            assert closed.value.code == 504 and "expected 'channel.open'" in closed.value.text, closed.value
            client.close()
    assert SILENCES.met == {}


def test_the_health_probe_waits_even_for_a_method_learned_unanswered(learning: None) -> None:
    from conformance.plugin.health import HealthProbe

    with EmbeddedBroker() as broker:
        key = (broker.host, broker.port, "/")
        for test in ("test_one", "test_two"):
            SILENCES.test = test
            SILENCES.learn(key, "queue.declare", 5.0)
        SILENCES.test = "test_three"
        assert HealthProbe(broker.url, 2.0).check() is None  # not "broker wedged": the probe made its wait


def test_a_reply_that_comes_while_the_ping_is_awaited_is_late_not_missing(learning: None,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow broker (every frame held 0.3 s from its basic.get on, as a loaded runner can): the
    wait of 0.2 s ends, the driver pings the channel, and the basic.get-ok arrives before the ping's
    reply. It is the reply, late: `expect` returns it and nothing is learned."""
    from conformance.drivers import raw_probing
    from tests.conformance.hostile import HostileProxy, Mode, Plan

    monkeypatch.setattr(raw_probing, "PROBE", 2.0)  # the ping's reply is held too: wait for it, not for the clock
    with EmbeddedBroker() as broker, HostileProxy(
            (broker.host, broker.port), Plan(Mode.DELAY, on_request=lambda m: isinstance(m, BasicGet), delay=0.3)
    ) as proxy, RawClient(proxy.url, timeout=5.0) as client:
        ch = client.channel()
        queue = client.rpc(ch, QueueDeclare(queue="", exclusive=True), QueueDeclareOk).method.queue
        client.send(ch, BasicGet(queue=queue, no_ack=True))
        got = client.expect(ch, BasicGetOk, BasicGetEmpty, timeout=0.2)
        assert isinstance(got.method, BasicGetEmpty)
        sent = [getattr(getattr(f.frame, "method", None), "NAME", None) for f in client.recorder.frames
                if f.direction == "out"]
        assert "channel.flow" in sent  # it was pinged: the reply came after the wait
    assert SILENCES.waited == {}
