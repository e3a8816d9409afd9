"""Consumers and their window: basic.consume, basic.cancel, basic.get, basic.qos.

Rules (RULES.md): CCN-02..07 consumers, QOS-01..10 prefetch, ACK-01 delivery tags shared by
consume and get, ACK-10 a cancelled consumer's deliveries stay unacked (settlement:
settlement.py; publish: publish.py; confirm and tx: transactions.py). A stream consumer's
checks and starting offset are streams.py's; basic.get on a stream is refused there.
"""

from __future__ import annotations

from codec import (
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicQos,
    BasicQosOk,
    ReplyCode,
)
from reference_broker.core import cluster, durability, lease, permissions, streams, texts, timeouts
from reference_broker.core.arguments import field_type, is_int
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.delivery import after_consumer_change, checkout, dead_letter, dispatch, expire_head
from reference_broker.core.effects import Effect, Send
from reference_broker.core.errors import hard, soft
from reference_broker.core.publish import REPLY_TO
from reference_broker.core.resources import resolve_queue
from reference_broker.core.settlement import settle
from reference_broker.core.state import QUORUM, STREAM, Channel, Consumer, Unacked

EMPTY = BasicProperties()


def _check_read(core: BrokerState, ch: Channel, queue: str, method: str) -> None:
    if core.config.permissions:
        permissions.check(core, ch, "read", "queue", queue, method)


# -- consumers -----------------------------------------------------------------------------
def basic_consume(core: BrokerState, meta: Meta, ch: Channel, m: BasicConsume,
                  props: BasicProperties | None, body: bytes) -> list[Effect]:
    if m.queue == REPLY_TO:
        return _reply_consume(core, ch, m)
    queue = resolve_queue(core, ch, m.queue)
    _check_read(core, ch, queue.name, "basic.consume")
    cluster.ensure_available(core, queue)  # CLU-04
    vhost = queue.vhost
    tag = m.consumer_tag
    if not tag:
        tag = f"amq.ctag-{ch.conn}.{ch.number}-{core.next_id()}"
    if tag in ch.consumers or tag == ch.reply_tag:
        raise hard(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")  # CCN-07
    if queue.consumers and (m.exclusive or any(c.exclusive for c in queue.consumers.values())):
        raise soft(ReplyCode.ACCESS_REFUSED, f"{texts.q(queue.name, vhost)} in exclusive use")
    if queue.kind == QUORUM and ch.global_prefetch:
        raise hard(ReplyCode.NOT_IMPLEMENTED, f"{texts.q(queue.name, vhost)} does not support global qos")
    offset = streams.check_consume(core, meta, queue, ch, m) if queue.kind == STREAM else 0
    arguments = dict(m.arguments)
    timeouts.validate_argument(core, queue.name, vhost, queue.kind, arguments.get(timeouts.ARG))
    priority = arguments.get("x-priority", 0)
    if not is_int(priority):  # QUEUE-14: rabbit_amqqueue check_consume_arguments (check_int_arg)
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg 'x-priority' for {texts.q(queue.name, vhost)}: "
                   f'"expected integer, got {field_type(priority)}"')
    consumer = Consumer(tag, ch.conn, ch.number, queue.name, m.no_ack, m.exclusive, ch.prefetch_count,
                        arguments, priority if isinstance(priority, int) else 0)
    consumer.timeout_ms = timeouts.effective_timeout(core, queue, consumer)
    consumer.offset = offset
    ch.next_tag = core.rules.consumer_first_tag(ch.next_tag)
    ch.consumers[tag] = consumer
    queue.add_consumer(consumer)
    effects: list[Effect] = []
    if not m.nowait:
        effects.append(Send(ch.conn, ch.number, BasicConsumeOk(tag)))
    return effects + dispatch(core, meta, queue)


def _reply_consume(core: BrokerState, ch: Channel, m: BasicConsume) -> list[Effect]:
    if not m.no_ack:
        raise soft(ReplyCode.PRECONDITION_FAILED, "reply consumer cannot acknowledge")
    if ch.reply_tag is not None:
        raise soft(ReplyCode.PRECONDITION_FAILED, "reply consumer already set")
    tag = m.consumer_tag or f"amq.ctag-{ch.conn}.{ch.number}-{core.next_id()}"
    if tag in ch.consumers:
        raise hard(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
    ch.reply_tag = tag
    return [] if m.nowait else [Send(ch.conn, ch.number, BasicConsumeOk(tag))]


def cancel_consumer(core: BrokerState, meta: Meta, ch: Channel, tag: str) -> list[Effect]:
    """Drop a consumer; its deliveries stay unacked on the channel (ACK-10)."""
    if tag == ch.reply_tag:
        ch.reply_tag = None
        return []
    consumer = ch.consumers.pop(tag, None)
    if consumer is None:
        return []
    queue = core.find_queue(core.connections[ch.conn].vhost, consumer.queue)
    if queue is None:
        return []
    queue.remove_consumer(consumer)
    own = [u for u in ch.unacked.values() if u.consumer_tag == tag]
    effects = settle(core, meta, ch, core.rules.requeued_on_cancel(own), True, False)
    return effects + after_consumer_change(core, meta, queue)


def basic_cancel(core: BrokerState, meta: Meta, ch: Channel, m: BasicCancel,
                 props: BasicProperties | None, body: bytes) -> list[Effect]:
    # CCN-03: an unknown tag is not an error. CCN-04: cancel-ok precedes nothing of it.
    if m.consumer_tag not in ch.consumers and m.consumer_tag != ch.reply_tag and (
            error := core.rules.unknown_cancel(m.consumer_tag)):
        raise error
    effects = cancel_consumer(core, meta, ch, m.consumer_tag)
    reply: list[Effect] = [] if m.nowait else [Send(ch.conn, ch.number, BasicCancelOk(m.consumer_tag))]
    return reply + effects


def basic_cancel_ok(core: BrokerState, meta: Meta, ch: Channel, m: BasicCancelOk,
                    props: BasicProperties | None, body: bytes) -> list[Effect]:
    """CCN-05: 4.3 accepts a client cancel-ok (finishing a broker cancel); ≤4.2 answers 503."""
    if core.config.timeout_mode == "legacy":
        raise hard(ReplyCode.COMMAND_INVALID, "unimplemented method")
    return cancel_consumer(core, meta, ch, m.consumer_tag)


def basic_get(core: BrokerState, meta: Meta, ch: Channel, m: BasicGet,
              props: BasicProperties | None, body: bytes) -> list[Effect]:
    queue = resolve_queue(core, ch, m.queue)
    _check_read(core, ch, queue.name, "basic.get")
    cluster.ensure_available(core, queue)  # CLU-04
    if queue.kind == STREAM:
        raise streams.refused(queue, "basic.get")
    if queue.kind == QUORUM and queue.arguments.get("x-single-active-consumer") is True:
        # ERR-04, 4.3's text: rabbit_channel formats the queue type's alias (a binary) with ~p
        raise soft(ReplyCode.RESOURCE_LOCKED, f"cannot obtain access to locked {texts.q(queue.name, queue.vhost)}. "
                   'basic.get operations are not supported by <<"quorum">> queues with single active consumer')
    effects: list[Effect] = lease.touch(core, meta, queue)  # QUEUE-08: a get renews the lease
    if not core.rules.get_allowed(ch):
        return [*effects, Send(ch.conn, ch.number, BasicGetEmpty())]
    while (message := queue.pop()) is not None:
        if message.expires_at is not None and message.expires_at <= meta.now_ms:
            effects += dead_letter(core, meta, queue, message, "expired")
            continue
        tag = ch.next_tag  # ACK-01: get-ok shares the channel's counter
        ch.next_tag += 1
        redelivered, properties = checkout(core, queue, message)
        reply = BasicGetOk(tag, redelivered, message.exchange, message.routing_key, queue.ready_count())
        effects.append(Send(ch.conn, ch.number, reply, properties, message.body))
        if m.no_ack:
            durability.forget(core, message)
        else:
            unacked = ch.unacked[tag] = Unacked(tag, queue.name, message, None, meta.now_ms)
            queue.checked_out += 1
            effects += timeouts.arm(core, meta, queue, ch, unacked, timeouts.get_timeout(core, queue))
        return effects + expire_head(core, meta, queue)  # TTL-03: after a fetch
    return [*effects, Send(ch.conn, ch.number, BasicGetEmpty())]


# -- prefetch ------------------------------------------------------------------------
def basic_qos(core: BrokerState, meta: Meta, ch: Channel, m: BasicQos,
              props: BasicProperties | None, body: bytes) -> list[Effect]:
    if core.rules.prefetch_size_refused(m.prefetch_size):
        raise hard(ReplyCode.NOT_IMPLEMENTED,
                   f"prefetch_size!=0 ({core.rules.prefetch_size_named(m.prefetch_size)})")  # QOS-01
    if m.global_ and core.rules.global_qos(core.config.global_qos):
        ch.global_prefetch = m.prefetch_count  # QOS-03 (3.x), QOS-05 counts outstanding
    else:
        ch.prefetch_count = m.prefetch_count  # QOS-02; 4.3 treats global=true this way
        if not m.global_:
            ch.global_prefetch = 0  # 3.x: global=false unlimits the channel (checked live on 3.10.8)
    effects: list[Effect] = [Send(ch.conn, ch.number, BasicQosOk())]
    vhost = core.connections[ch.conn].vhost
    for name in {c.queue for c in ch.consumers.values()}:
        queue = core.find_queue(vhost, name)
        if queue is not None:
            effects += dispatch(core, meta, queue)
    return effects
