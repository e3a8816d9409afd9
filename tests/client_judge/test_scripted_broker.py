"""ScriptedBroker: the reference engine with recording, injection, intercepts, held timers, silence."""

from __future__ import annotations

import pytest

from codec import (
    BasicAck,
    BasicCancel,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicPublish,
    ChannelFlow,
    ChannelFlowOk,
    ConfirmSelect,
    ConfirmSelectOk,
    ConnectionClose,
    ConnectionCloseOk,
    HeartbeatFrame,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.client_judge.broker import Script, ScriptedBroker
from conformance.drivers.interface import NoReply
from conformance.drivers.raw import RawClient


def test_frames_are_recorded_both_ways_and_waitable() -> None:
    with ScriptedBroker() as broker, RawClient(broker.url) as client:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue="q"), QueueDeclareOk)
        declared = broker.wait_method(QueueDeclare, 2.0)
        assert declared.queue == "q"
        assert broker.wait_method(QueueDeclareOk, 2.0, direction="out").queue == "q"
        assert [type(m).__name__ for _c, m in broker.methods("in")][:3] == [
            "ConnectionStartOk", "ConnectionTuneOk", "ConnectionOpen"]
        with pytest.raises(NoReply, match=r"basic\.publish"):
            broker.wait_method(BasicPublish, 0.1)


def test_inject_reaches_the_client_and_the_intercept_takes_a_command() -> None:
    script = Script(intercept=lambda _conn, cmd: [] if isinstance(cmd.method, ChannelFlowOk) else None)
    with ScriptedBroker(script) as broker, RawClient(broker.url) as client:
        ch = client.channel()
        broker.inject(broker.connection(), ch, ChannelFlow(False))
        assert client.expect(ch, ChannelFlow).method == ChannelFlow(False)
        client.send(ch, ChannelFlowOk(False))
        assert broker.wait_method(ChannelFlowOk, 2.0).active is False
        client.rpc(ch, QueueDeclare(queue="q"), QueueDeclareOk)  # the engine never saw the flow-ok: no 503


def test_drop_removes_the_engines_own_confirms() -> None:
    script = Script(drop=lambda send: isinstance(send.method, BasicAck))
    with ScriptedBroker(script) as broker, RawClient(broker.url) as client:
        ch = client.channel()
        client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
        client.send(ch, BasicPublish(routing_key="nowhere"), body=b"x")
        client.rpc(ch, QueueDeclare(queue="q"), QueueDeclareOk)
        assert client.poll(ch, BasicAck, duration=0.2) is None


def test_fire_timers_runs_a_consumer_timeout_at_its_deadline() -> None:
    with ScriptedBroker() as broker, RawClient(broker.url) as client:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue="tq", durable=True, arguments={"x-queue-type": "quorum",
                                                                          "x-consumer-timeout": 60_000}),
                   QueueDeclareOk)
        tag = client.rpc(ch, BasicConsume(queue="tq"), BasicConsumeOk).method.consumer_tag
        client.send(ch, BasicPublish(routing_key="tq"), body=b"m")
        client.expect(ch, BasicDeliver)
        assert client.poll(ch, BasicCancel, duration=0.2) is None  # the clock alone never fires it
        assert broker.fire_timers() == 1
        assert client.expect(ch, BasicCancel).method == BasicCancel(tag, nowait=True)


def test_a_silent_broker_sends_no_heartbeats_and_close_connection_waits_for_close_ok() -> None:
    with ScriptedBroker(Script(heartbeats=False), heartbeat=1) as broker:
        with RawClient(broker.url, heartbeat=1) as client:
            client.channel()
            assert client.poll(0, duration=1.3) is None
            assert not [r for r in broker.frames if r.direction == "out" and isinstance(r.frame, HeartbeatFrame)]
            broker.close_connection(broker.connection(), 320, "CONNECTION_FORCED - test")
            assert client.expect(0, ConnectionClose).method.reply_code == 320  # the raw client answers close-ok
        broker.wait_method(ConnectionCloseOk, 2.0)
