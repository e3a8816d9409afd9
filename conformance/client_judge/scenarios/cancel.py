"""Scenarios: consumer cancel notification (CL-CCN), including the RabbitMQ 4.3 consumer-timeout cycle.

Rules checked: the client advertises consumer_cancel_notify (CL-CCN-01); a broker basic.cancel
reaches the application's cancel callback and leaves the channel and connection open
(CL-CCN-02); a repeated broker cancel of one tag, as RabbitMQ 4.3 sends after a consumer-timeout
redelivery cycle, does not break the client (CL-CCN-03); a delivery for a consumer the broker
cancelled does not break it either (CL-CCN-04); a broker cancel that crosses the client's own
cancel leaves both sides consistent (CL-CCN-05).
"""

from __future__ import annotations

from codec import BasicCancel, BasicDeliver, BasicProperties, Command, ConnectionStartOk
from conformance.client_judge.broker import ScriptedConnection
from conformance.client_judge.scenario import Play, scenario
from conformance.drivers import interface as di
from conformance.embedded import Output

QUORUM = {"x-queue-type": "quorum"}


def _consumer(p: Play, queue: str = "cq", arguments: dict[str, object] | None = None) -> tuple[int, str]:
    p.connect()
    ch = p.client.open_channel()
    p.client.declare_queue(ch, queue, durable=bool(arguments), arguments=arguments)
    return ch, p.client.consume(ch, queue)


@scenario("capabilities-advertised", ("CL-CCN-01",), "the client asks for cancel notifications", smoke=True)
def capabilities_advertised(p: Play) -> None:
    p.connect()
    start_ok = p.sent(ConnectionStartOk)
    caps = dict(start_ok.client_properties).get("capabilities") or {}
    p.expect(caps.get("consumer_cancel_notify") is True,
             f"connection.start-ok capabilities lack consumer_cancel_notify=true: {dict(caps)}")


@scenario("server-cancel", ("CL-CCN-02",), "a broker basic.cancel reaches the application", smoke=True)
def server_cancel(p: Play) -> None:
    ch, tag = _consumer(p)
    p.client.declare_queue(ch, "other")
    other = p.client.consume(ch, "other")
    p.broker.delete_queue("cq")  # as an operator would: the engine sends basic.cancel (CCN-02)
    cancelled = p.event(di.BrokerCancelled, what="cancel callback")
    p.expect(cancelled.consumer_tag == tag, f"the cancel callback named {cancelled.consumer_tag!r}, not {tag!r}")
    p.client.publish(ch, "", "other", b"after the cancel")  # the channel is still usable
    delivered = p.event(di.Delivered, what="delivery to the other consumer")
    p.expect(delivered.delivery.consumer_tag == other, "the message reached the cancelled consumer's callback")
    p.alive("a broker basic.cancel")


@scenario("repeated-cancel", ("CL-CCN-03",), "two broker cancels of one consumer tag")
def repeated_cancel(p: Play) -> None:
    ch, tag = _consumer(p)
    conn = p.broker.connection()
    p.broker.inject(conn, ch, BasicCancel(tag, nowait=True))
    p.event(di.BrokerCancelled, what="first cancel callback")
    p.broker.inject(conn, ch, BasicCancel(tag, nowait=True))
    p.settle()
    p.alive("a second broker basic.cancel of the same tag")


@scenario("consumer-timeout-cycle", ("CL-CCN-03", "CL-CCN-04"),
          "RabbitMQ 4.3: timeout, cancel, late ack, redelivery, timeout again", smoke=True)
def consumer_timeout_cycle(p: Play) -> None:
    """TMO-4.3-2..5 played by the engine itself; only the clock is the script's (`fire_timers`)."""
    ch, _tag = _consumer(p, "tq", {**QUORUM, "x-consumer-timeout": 60_000})
    p.client.publish(ch, "", "tq", b"slow work")
    first = p.event(di.Delivered, what="the first delivery").delivery
    p.broker.fire_timers()  # the delivery times out: basic.cancel, the message goes back
    p.event(di.BrokerCancelled, what="cancel callback after the consumer timeout")
    p.client.ack(ch, first.delivery_tag)  # the late ack: the consumer leaves timeout state
    p.settle()  # the engine redelivers to the same tag (the client may drop it)
    p.broker.fire_timers()  # ... which times out again: a second basic.cancel of the tag
    p.settle()
    p.alive("a consumer-timeout redelivery cycle (a second broker basic.cancel of one tag)")
    queue_ok = p.client.declare_queue(ch, "tq", durable=True, arguments={**QUORUM, "x-consumer-timeout": 60_000})
    p.expect(queue_ok == "tq", "the channel is unusable after the cycle")


@scenario("delivery-after-server-cancel", ("CL-CCN-04",), "a delivery for a consumer the broker cancelled")
def delivery_after_cancel(p: Play) -> None:
    ch, tag = _consumer(p)
    conn = p.broker.connection()
    p.broker.inject(conn, ch, BasicCancel(tag, nowait=True))
    p.event(di.BrokerCancelled, what="cancel callback")
    p.broker.inject(conn, ch, BasicDeliver(tag, 1, False, "", "cq"), BasicProperties(), b"late")
    p.settle()
    p.alive("a delivery for a consumer tag the broker had cancelled")
    p.expect(p.client.declare_queue(ch, "cq") == "cq", "the channel is unusable after the delivery")


@scenario("cancel-race", ("CL-CCN-05",), "a broker cancel crosses the client's own basic.cancel")
def cancel_race(p: Play) -> None:
    ch, tag = _consumer(p)

    def crossing(conn: ScriptedConnection, command: Command) -> list[Output] | None:
        method = command.method
        if not (isinstance(method, BasicCancel) and method.consumer_tag == tag):
            return None
        p.broker.script.intercept = None
        return [conn.write(command.channel, BasicCancel(tag, nowait=True)), *conn.engine(command)]

    p.broker.script.intercept = crossing
    p.client.cancel(ch, tag)
    p.settle()
    p.alive("a broker basic.cancel that crossed the client's basic.cancel")
    p.client.declare_queue(ch, "cq")  # the channel is still usable
