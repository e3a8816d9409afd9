"""The client actions the machines share, each done on the wire and in the model, then compared.

Responsibility: one function per client action (publish, get, consume, cancel, qos, ack, nack,
reject, recover, channel close). Each sends the method with the raw driver, computes what the
model says, asserts both agree on the outcome (scope, code, class/method id), and recovers from
a broker close (reopens the channel or reconnects) so the run can go on.
Rules: ACK-03..07 and ACK-09 (outcomes of settlement), ACK-10 (cancel keeps deliveries),
CCN-03 (cancel is always answered), QOS-02/03 (qos-ok), QOS-07 (basic.get), RQ-03 (what a
closed channel requeues is the model's business: it is checked by the counts and deliveries
that follow).
"""

from __future__ import annotations

from typing import Any

from codec import (
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    BasicRecover,
    BasicRecoverOk,
    BasicReject,
    ChannelClose,
    ChannelCloseOk,
    ExchangeDeclareOk,
)
from codec.constants import ReplyCode
from conformance.drivers.raw import ChannelClosed, DriverError, RawClient
from conformance.model import OK, GetEmpty, GetOk, GetOutcome, Published
from conformance.suite.steps.machine_base import ModelMachine
from conformance.suite.steps.machine_support import MachineTarget
from conformance.suite.steps.queues import prompt
from conformance.suite.steps.wire import PING


def publish(m: ModelMachine, key: Any, exchange: str, routing_key: str, *, mandatory: bool = False,
            persistent: bool = False) -> Published:
    """basic.publish (no reply; the next settle or ping shows its effects)."""
    client, number = m.client(key)
    body = m.body()
    props = BasicProperties(delivery_mode=2 if persistent else 1)
    real_key = m.real.get(routing_key, routing_key) if exchange == "" else routing_key
    real_exchange = m.exchanges.get(exchange, exchange)
    client.send(number, BasicPublish(exchange=real_exchange, routing_key=real_key, mandatory=mandatory), props, body)
    return m.model.publish(key, exchange, routing_key, body, mandatory=mandatory)


def get(m: ModelMachine, key: Any, queue: str, no_ack: bool = False) -> GetOutcome:
    """basic.get: the answer must be one the model allows (RQ-01/02/04, ACK-01, QOS-07)."""
    client, number = m.client(key)
    allowed = m.model.get_outcomes(key, queue)
    observed: GetOutcome
    try:
        reply = client.rpc(number, BasicGet(queue=m.real.get(queue, queue), no_ack=no_ack), BasicGetOk, BasicGetEmpty,
                           timeout=m.target.timeout(m.SETTLE_SECONDS))
        g = reply.method
        observed = GetOk(g.delivery_tag, g.redelivered, reply.body) if isinstance(g, BasicGetOk) else GetEmpty()
    except DriverError as exc:
        observed = m.closed_outcome(key, exc)  # type: ignore[assignment]
    assert observed in allowed, f"basic.get {queue}: broker gave {observed}, the rules allow " \
        f"{sorted(allowed, key=repr)} (ACK-01 tag, RQ-01/RQ-02 order, RQ-04 redelivered, QOS-07)"
    m.model.get(key, queue, observed, no_ack=no_ack)
    if not isinstance(observed, (GetOk, GetEmpty)):
        m.recover_from(key, observed)
    return observed


def qos(m: ModelMachine, key: Any, prefetch_count: int, global_: bool = False) -> None:
    observed = m.call(key, BasicQos(prefetch_count=prefetch_count, global_=global_), BasicQosOk)
    m.expect_outcome(f"basic.qos prefetch_count={prefetch_count} global={global_}", observed,
                     m.model.qos(key, prefetch_count, global_), "QOS-01/QOS-06")
    m.recover_from(key, observed)


def consume(m: ModelMachine, key: Any, queue: str, tag: str, *, no_ack: bool = False) -> None:
    method = BasicConsume(queue=m.real.get(queue, queue), consumer_tag=tag, no_ack=no_ack)
    observed = m.call(key, method, BasicConsumeOk)
    m.expect_outcome(f"basic.consume {queue} tag={tag}", observed, m.model.consume(key, queue, tag, no_ack=no_ack),
                     "CCN-07/QOS-06")
    m.recover_from(key, observed)


def cancel(m: ModelMachine, key: Any, tag: str) -> None:
    """basic.cancel: cancel-ok even for unknown tags (CCN-03); deliveries stay (ACK-10)."""
    client, number = m.client(key)
    try:
        client.send(number, BasicCancel(consumer_tag=tag))
        reply = client.expect(number, BasicCancelOk, timeout=m.target.timeout(m.SETTLE_SECONDS))
    except DriverError as exc:
        observed = m.closed_outcome(key, exc)
        m.expect_outcome(f"basic.cancel {tag}", observed, m.model.cancel(key, tag), "CCN-03")
        return
    assert isinstance(reply.method, BasicCancelOk), f"basic.cancel {tag!r}: {reply.method} (CCN-03)"
    assert reply.method.consumer_tag == tag, \
        f"basic.cancel-ok names {reply.method.consumer_tag!r}, not {tag!r} (CCN-03)"
    # what arrived before cancel-ok came while the consumer existed (CCN-04: nothing after it)
    m.drain_channel(key, [])
    m.expect_outcome(f"basic.cancel {tag}", OK, m.model.cancel(key, tag))


def settle(m: ModelMachine, key: Any, how: str, tag: int, multiple: bool = False, requeue: bool = True) -> None:
    """basic.ack / basic.nack / basic.reject with any tag (ACK-03..07)."""
    if how == "ack":
        observed = m.call_async(key, BasicAck(delivery_tag=tag, multiple=multiple))
        expected = m.model.ack(key, tag, multiple)
    elif how == "nack":
        observed = m.call_async(key, BasicNack(delivery_tag=tag, multiple=multiple, requeue=requeue))
        expected = m.model.nack(key, tag, multiple, requeue)
    else:
        observed = m.call_async(key, BasicReject(delivery_tag=tag, requeue=requeue))
        expected = m.model.reject(key, tag, requeue)
    m.expect_outcome(f"basic.{how} delivery_tag={tag} multiple={multiple} requeue={requeue}", observed, expected,
                     "ACK-03/ACK-04/ACK-05/ACK-06/ACK-07")
    m.recover_from(key, observed)


def recover(m: ModelMachine, key: Any, requeue: bool = True) -> None:
    """basic.recover (ACK-09): requeue=true recovers, requeue=false is connection.close 540."""
    observed = m.call(key, BasicRecover(requeue=requeue), BasicRecoverOk)
    m.expect_outcome(f"basic.recover requeue={requeue}", observed, m.model.recover(key, requeue), "ACK-09")
    m.recover_from(key, observed)


def close_channel(m: ModelMachine, key: Any) -> None:
    """Client channel.close and reopen under the same number (RQ-03: unacked go back)."""
    client, number = m.client(key)
    m.drain_channel(key, [])
    client.rpc(number, ChannelClose(200, "bye", 0, 0), ChannelCloseOk, timeout=m.target.timeout(m.SETTLE_SECONDS))
    m.drain_channel(key, [])
    m.model.close_channel(key)
    conn, _ = m.channels[key]
    m.open(key, conn, number)


def held_below_multiple(m: ModelMachine) -> str | None:
    """The cause of a missing delivery when a probe proves it (ACK-05), else None. A consumer the
    model says must receive has room because its channel's last basic.ack/nack multiple=true also
    settled deliveries of that consumer below the named tag. Acking the lowest of them again tells
    which: a broker that settled it closes the channel (406, ACK-04: the probe proves nothing, the
    failure keeps its own wording); one that still holds it accepts the ack (the round trip behind
    it is answered), so the multiple settle did not settle it and the consumer's prefetch still
    counts it. An accepted ack proves that only on a broker shown, in this run, to refuse an unknown
    tag at once (`refuses_unknown_tags`): on one that accepts unknown tags, or sends its 406 after
    the next reply, it proves nothing, and the failure keeps its own wording. Run only when the
    machine is about to fail, so the probe changes no verdict."""
    for key, consumer, _ in m.model.due_consumers():
        settle = m.model.multiple_settle(key)
        tags = settle.tags_of(consumer) if settle is not None else []
        client, number = m.client(key)
        if settle is None or not tags or client.sock is None or client.lost or client.connection_closed is not None:
            continue
        if not refuses_unknown_tags(m.target):
            return None
        try:
            client.send(number, BasicAck(delivery_tag=tags[0]))
            client.rpc(number, PING,
                       ExchangeDeclareOk, timeout=m.settle_seconds())
        except DriverError:
            return None
        return (f"ACK-05: basic.{settle.method} multiple=true delivery-tag={settle.named} must settle every outstanding "
                f"tag up to {settle.named}, among them {tags} of consumer {consumer!r}; the broker still held tag "
                f"{tags[0]} (a basic.ack of it, sent now as a probe, was accepted, and this broker refuses an "
                "unknown tag at once), so the consumer's prefetch still counted it and the delivery the rules "
                "require did not arrive")
    return None


REFUSES_UNKNOWN_TAGS: dict[str, bool] = {}  # per broker URL, learned once a process (this run's)


def refuses_unknown_tags(target: MachineTarget) -> bool:
    """Whether the broker closes a channel with 406 at once for a delivery tag it never issued
    (ACK-03): on a connection of its own, never the test's, a basic.ack of tag 1 on a fresh channel,
    then a round trip that a broker refusing at once never answers (RabbitMQ raises the 406 while it
    handles the ack: rabbit_channel `precondition_failed("unknown delivery tag ~w")`, v3.10.8
    l. 2066, v4.0.5 l. 1968, v4.3.5 l. 1998)."""
    if target.url not in REFUSES_UNKNOWN_TAGS:
        REFUSES_UNKNOWN_TAGS[target.url] = _refuses_unknown_tag(target)
    return REFUSES_UNKNOWN_TAGS[target.url]


def _refuses_unknown_tag(target: MachineTarget) -> bool:
    try:
        with RawClient(target.url, timeout=target.timeout(5.0), silences=False) as client:
            number = client.channel()
            client.send(number, BasicAck(delivery_tag=1))
            client.rpc(number, PING,
                       ExchangeDeclareOk, timeout=prompt(client))
    except ChannelClosed as closed:
        return closed.code == ReplyCode.PRECONDITION_FAILED
    except (DriverError, OSError):
        return False
    return False
