"""Scenarios: deliveries as the application sees them, and odd input (CL-DLV, CL-ODD).

Deliveries come from the engine (requeue sets redelivered; ack tag 0 multiple settles all), or
are sent by the script to a no-ack consumer (every property set). Odd input: unknown
capabilities and server-properties of every field type, and frames on a channel that is
closing or closed.
"""

from __future__ import annotations

from codec import (
    BasicAck,
    BasicDeliver,
    BasicProperties,
    ChannelClose,
    ChannelCloseOk,
    Command,
    ConnectionClose,
)
from codec.constants import ReplyCode
from conformance.client_judge.broker import ScriptedConnection
from conformance.client_judge.scenario import Play, scenario
from conformance.drivers import interface as di
from conformance.embedded import Output

ALL_PROPERTIES = BasicProperties(
    content_type="application/json", content_encoding="utf-8",
    headers={"s": "text", "i": -7, "big": 2 ** 40, "t": True, "f": False, "nested": {"a": {"b": "c"}},
             "list": [1, "two", {"three": 3}], "bytes": b"\x00\xff"},
    delivery_mode=2, priority=5, correlation_id="corr-1", reply_to="replies", expiration="60000",
    message_id="msg-1", timestamp=1_700_000_000, message_type="kind", user_id="guest", app_id="conformance")


@scenario("redelivered", ("CL-DLV-01",), "the redelivered flag of a requeued message", smoke=True)
def redelivered(p: Play) -> None:
    p.connect()
    ch = p.client.open_channel()
    p.client.declare_queue(ch, "rq")
    p.client.consume(ch, "rq")
    p.client.publish(ch, "", "rq", b"again")
    first = p.event(di.Delivered, what="the first delivery").delivery
    p.expect(first.redelivered is False, "a first delivery arrived with redelivered=true")
    p.client.reject(ch, first.delivery_tag, requeue=True)
    second = p.event(di.Delivered, what="the redelivery").delivery
    p.expect(second.redelivered is True and second.body == b"again",
             f"the redelivery arrived with redelivered={second.redelivered}")
    p.client.ack(ch, second.delivery_tag)


@scenario("ack-tag-zero-multiple", ("CL-DLV-02",), "ack(0, multiple=true) acknowledges everything outstanding")
def ack_tag_zero(p: Play) -> None:
    p.connect()
    ch = p.client.open_channel()
    p.client.declare_queue(ch, "zq")
    p.client.consume(ch, "zq")
    for i in range(3):
        p.client.publish(ch, "", "zq", f"m{i}".encode())
    for i in range(3):
        p.event(di.Delivered, what=f"delivery {i + 1} of 3")
    p.client.ack(ch, 0, multiple=True)
    ack = p.sent(BasicAck)
    p.expect((ack.delivery_tag, ack.multiple) == (0, True), f"the client sent basic.ack{tuple(ack)}, not (0, True)")
    p.expect(p.client.declare_queue(ch, "zq") == "zq", "the channel closed after ack(0, multiple)")
    unacked = p.broker.core_call(lambda core: sum(len(c.unacked) for conn in core.connections.values()
                                                  for c in conn.channels.values()))
    p.expect(unacked == 0, f"{unacked} deliveries are still unacknowledged at the broker")


@scenario("properties-intact", ("CL-DLV-03",), "every basic property and a rich headers table arrive intact",
          smoke=True)
def properties_intact(p: Play) -> None:
    conn = p.connect()
    ch = p.client.open_channel()
    p.client.declare_queue(ch, "pq")
    tag = p.client.consume(ch, "pq", no_ack=True)
    p.broker.inject(conn, ch, BasicDeliver(tag, 1, False, "amq.direct", "pq"), ALL_PROPERTIES, b"{}")
    got = p.event(di.Delivered, what="the delivery").delivery
    want, have = di.present(ALL_PROPERTIES), di.present(got.properties)
    wrong = {k: (want.get(k), have.get(k)) for k in sorted(set(want) | set(have)) if want.get(k) != have.get(k)}
    p.expect(not wrong, f"properties changed on the way (sent, seen): {wrong}")
    p.expect((got.exchange, got.routing_key, got.body) == ("amq.direct", "pq", b"{}"),
             f"the delivery arrived as {got.exchange!r} {got.routing_key!r} {got.body!r}")


@scenario("get-ok-and-empty", ("CL-DLV-04",), "basic.get-empty is no message; basic.get-ok is one")
def get_ok_and_empty(p: Play) -> None:
    p.connect()
    ch = p.client.open_channel()
    p.client.declare_queue(ch, "gq")
    p.expect(p.client.get(ch, "gq") is None, "basic.get-empty reached the application as a message")
    p.client.publish(ch, "", "gq", b"one")
    p.client.publish(ch, "", "gq", b"two")
    got = p.client.get(ch, "gq")  # one channel: the broker handles the publishes before the get
    p.expect(got is not None and got.body == b"one", f"basic.get-ok reached the application as {got}")
    assert got is not None
    p.expect(got.message_count == 1, f"basic.get-ok's message count arrived as {got.message_count}, not 1")
    p.client.ack(ch, got.delivery_tag)


@scenario("unknown-capabilities", ("CL-ODD-01",), "unknown capabilities and server-properties of every type",
          smoke=True)
def unknown_capabilities(p: Play) -> None:
    p.broker.script.capabilities = {"x-future-feature": True, "x-table": {"a": [1, "b", {"c": None}]},
                                    "x-bytes": b"\x00\x01", "x-float": 1.5, "x-void": None, "x-int": -1}
    p.broker.script.properties = {"x-cluster": {"nodes": ["a", "b"]}, "x-void": None, "x-long": 2 ** 40}
    p.connect()
    ch = p.client.open_channel()
    p.expect(p.client.declare_queue(ch, "uq") == "uq", "the connection is unusable")
    p.alive("unknown capabilities")


@scenario("frame-on-closing-channel", ("CL-ODD-02",), "a delivery between the client's channel.close and close-ok")
def frame_on_closing_channel(p: Play) -> None:
    p.connect()
    ch = p.client.open_channel()
    p.client.declare_queue(ch, "oq")
    tag = p.client.consume(ch, "oq", no_ack=True)

    def deliver_first(conn: ScriptedConnection, command: Command) -> list[Output] | None:
        if command.channel != ch or not isinstance(command.method, ChannelClose):
            return None
        p.broker.script.intercept = None
        return [conn.write(ch, BasicDeliver(tag, 1, False, "", "oq"), BasicProperties(), b"late"), *conn.engine(command)]

    p.broker.script.intercept = deliver_first
    p.client.close_channel(ch)
    p.settle()
    p.alive("a delivery on a channel it was closing")
    other = p.client.open_channel()
    p.expect(p.client.declare_queue(other, "oq") == "oq", "the connection is unusable")


@scenario("frame-on-closed-channel", ("CL-ODD-02",), "a delivery on a channel that is closed")
def frame_on_closed_channel(p: Play) -> None:
    conn = p.connect()
    ch = p.client.open_channel()
    p.client.close_channel(ch)
    p.sent(ChannelClose)
    p.broker.wait_method(ChannelCloseOk, p.t(3.0), direction="out")
    p.broker.inject(conn, ch, BasicDeliver("ghost", 1, False, "", "oq"), BasicProperties(), b"ghost")
    p.settle()
    closes = [m for _ch, m in p.broker.methods("in") if isinstance(m, ConnectionClose)]
    if closes:  # closing the connection is allowed, with 504 CHANNEL_ERROR
        p.expect(closes[0].reply_code == ReplyCode.CHANNEL_ERROR, f"the client closed the connection with {closes[0].reply_code}, "
                                              "not 504 CHANNEL_ERROR")
        return
    p.alive("a delivery on a closed channel")
