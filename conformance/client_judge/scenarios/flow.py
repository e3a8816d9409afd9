"""Scenarios: flow control and heartbeats (CL-FLOW, CL-HB).

connection.blocked/unblocked and channel.flow are sent by the script; heartbeats are the
engine's own (HB-01), switched off for the silent-broker scenario. Heartbeat checks wait on
frames and events with bounds of a few intervals: the broker side is exact, the client's timer
is what is judged.
"""

from __future__ import annotations

import time

from codec import (
    BasicAck,
    ChannelFlow,
    ChannelFlowOk,
    ConnectionBlocked,
    ConnectionStartOk,
    ConnectionTuneOk,
    ConnectionUnblocked,
    HeartbeatFrame,
)
from conformance.client_judge.scenario import Play, scenario
from conformance.drivers import interface as di


@scenario("blocked-unblocked", ("CL-FLOW-01",), "connection.blocked and unblocked reach the application",
          smoke=True)
def blocked_unblocked(p: Play) -> None:
    conn = p.connect()
    caps = dict(p.sent(ConnectionStartOk).client_properties).get("capabilities") or {}
    if caps.get("connection.blocked") is not True:
        p.not_applicable("the client does not advertise connection.blocked, so a broker never sends it")
    p.broker.inject(conn, 0, ConnectionBlocked("low on memory"))
    blocked = p.event(di.Blocked, what="blocked notice")
    p.expect(blocked.reason == "low on memory", f"the blocked notice said {blocked.reason!r}")
    p.broker.inject(conn, 0, ConnectionUnblocked())
    p.event(di.Unblocked, what="unblocked notice")
    p.alive("connection.blocked and unblocked")


@scenario("channel-flow", ("CL-FLOW-02",), "channel.flow from the broker is answered with flow-ok")
def channel_flow(p: Play) -> None:
    conn = p.connect()
    ch = p.client.open_channel()
    # the flow-ok answers the script's channel.flow: the engine (which never sends one) must not see it
    p.broker.script.intercept = lambda _conn, command: [] if isinstance(command.method, ChannelFlowOk) else None
    p.broker.inject(conn, ch, ChannelFlow(False))
    ok = p.sent(ChannelFlowOk)
    p.expect(ok.active is False, "channel.flow-ok did not echo active=false")
    mark = p.mark()
    p.broker.inject(conn, ch, ChannelFlow(True))
    ok = p.sent(ChannelFlowOk, start=mark)
    p.expect(ok.active is True, "channel.flow-ok did not echo active=true")
    p.alive("channel.flow")


@scenario("slow-consumer-blocked", ("CL-FLOW-03",), "a slow consumer keeps acking while the connection is blocked")
def slow_consumer_blocked(p: Play) -> None:
    conn = p.connect()
    ch = p.client.open_channel()
    p.client.declare_queue(ch, "slow")
    for i in range(3):
        p.client.publish(ch, "", "slow", f"m{i}".encode())
    p.client.qos(ch, 1)
    p.broker.inject(conn, 0, ConnectionBlocked("low on memory"))
    p.client.consume(ch, "slow")
    for i in range(3):
        delivery = p.event(di.Delivered, what=f"delivery {i + 1} of 3 while blocked").delivery
        p.client.ack(ch, delivery.delivery_tag)
        tag: int = delivery.delivery_tag
        p.sent(BasicAck, where=lambda m: bool(m.delivery_tag == tag))  # noqa: B023 (used at once)
    p.broker.inject(conn, 0, ConnectionUnblocked())
    p.alive("a blocked connection with a slow consumer")


@scenario("heartbeat-negotiation", ("CL-HB-01",), "the lower of two non-zero heartbeat values",
          broker={"heartbeat": 4})
def heartbeat_negotiation(p: Play) -> None:
    p.connect(heartbeat=10)
    tune_ok = p.sent(ConnectionTuneOk)
    p.expect(tune_ok.heartbeat == 4, f"tune-ok heartbeat {tune_ok.heartbeat}: the client wanted 10 and the broker "
                                     "proposed 4, so 4")


def _heartbeats_from_client(p: Play, count: int, timeout: float) -> None:
    deadline, start = time.monotonic() + p.t(timeout), 0
    for _ in range(count):
        record = p.broker.wait_frame(lambda r: r.direction == "in" and isinstance(r.frame, HeartbeatFrame),
                                     max(deadline - time.monotonic(), 0.01), "a heartbeat from the client", start)
        start = p.broker.frames.index(record) + 1


@scenario("heartbeat-client-sends", ("CL-HB-02",), "an idle client sends heartbeats", broker={"heartbeat": 1})
def heartbeat_client_sends(p: Play) -> None:
    p.connect(heartbeat=1)
    p.expect(p.sent(ConnectionTuneOk).heartbeat == 1, "the client did not accept a 1 s heartbeat")
    try:
        _heartbeats_from_client(p, 2, 4.0)
    except di.NoReply:
        p.expect(False, f"the client sent {len(p.broker.heartbeats('in'))} heartbeat(s) in 4 s of a 1 s heartbeat")
    p.alive("2 s of idle time with a 1 s heartbeat")


@scenario("heartbeat-broker-silent", ("CL-HB-03",), "a broker that stops sending heartbeats is declared dead",
          broker={"heartbeat": 1})
def heartbeat_broker_silent(p: Play) -> None:
    p.broker.script.heartbeats = False
    p.connect(heartbeat=1)
    p.expect(p.sent(ConnectionTuneOk).heartbeat == 1, "the client did not accept a 1 s heartbeat")
    try:
        # 0-9-1 §4.2.7 asks for two intervals; allow 3 intervals plus 10 s of the client's own slack
        p.event(di.ConnectionClosedEvent, timeout=13.0, what="notice that the silent broker is dead")
    except AssertionError:
        if p.client.state().get("connection") == "open":
            raise
