"""Handlers of basic.* (but publish) and channel.* methods: consumers, get, acks, qos, recover.

Rules (RULES.md): ACK-01..10 acknowledgements, RQ-01..06 requeue, QOS-01..11 prefetch,
CCN-02..07 consumers (publish: core/publish.py; confirm and tx: core/transactions.py). Each handler checks first and
changes state after, so an error leaves nothing half-settled (ACK-05).
"""

from __future__ import annotations

from itertools import takewhile

from codec import (
    AmqpError,
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
    BasicQos,
    BasicQosOk,
    BasicRecover,
    BasicRecoverAsync,
    BasicRecoverOk,
    BasicReject,
    ChannelClose,
    ChannelFlow,
    ChannelFlowOk,
    ReplyCode,
)
from reference_broker.core import durability, texts, timeouts
from reference_broker.core.broker import BrokerCore, Meta, handles, hard, soft
from reference_broker.core.effects import Effect, Send
from reference_broker.core.publish import REPLY_TO
from reference_broker.core.state import QUORUM, Channel, Consumer, Queue, Unacked

EMPTY = BasicProperties()


def resolve_queue(core: BrokerCore, ch: Channel, name: str) -> Queue:
    """The named queue, or the channel's last declared one for "" (ERR-04 texts)."""
    vhost = core.connections[ch.conn].vhost
    if not name:
        if ch.last_queue is None:
            raise soft(ReplyCode.NOT_FOUND, "no previously declared queue")
        name = ch.last_queue
    queue = core.find_queue(vhost, name)
    if queue is None:
        raise soft(ReplyCode.NOT_FOUND, texts.no_queue(name, vhost))
    if queue.exclusive_owner is not None and queue.exclusive_owner != ch.conn:
        raise soft(ReplyCode.RESOURCE_LOCKED, texts.locked(name, vhost))
    return queue


def _check_read(core: BrokerCore, ch: Channel, queue: str) -> None:
    if core.config.permissions:
        from reference_broker.core import permissions

        permissions.check(core, ch, "read", "queue", queue)


# -- consumers -----------------------------------------------------------------------------
@handles(BasicConsume)
def basic_consume(core: BrokerCore, meta: Meta, ch: Channel, m: BasicConsume,
                  props: BasicProperties | None, body: bytes) -> list[Effect]:
    if m.queue == REPLY_TO:
        return _reply_consume(core, ch, m)
    queue = resolve_queue(core, ch, m.queue)
    _check_read(core, ch, queue.name)
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
    arguments = dict(m.arguments)
    timeouts.validate_argument(core, queue.name, vhost, queue.kind, arguments.get(timeouts.ARG))
    priority = arguments.get("x-priority", 0)
    consumer = Consumer(tag, ch.conn, ch.number, queue.name, m.no_ack, m.exclusive, ch.prefetch_count,
                        arguments, priority if isinstance(priority, int) else 0)
    consumer.timeout_ms = timeouts.effective_timeout(core, queue, consumer)
    if core.fault("tags_restart_per_consumer"):
        ch.next_tag = 1
    ch.consumers[tag] = consumer
    queue.add_consumer(consumer)
    effects: list[Effect] = []
    if not m.nowait:
        effects.append(Send(ch.conn, ch.number, BasicConsumeOk(tag)))
    return effects + core.dispatch(meta, queue)


def _reply_consume(core: BrokerCore, ch: Channel, m: BasicConsume) -> list[Effect]:
    if not m.no_ack:
        raise soft(ReplyCode.PRECONDITION_FAILED, "reply consumer cannot acknowledge")
    if ch.reply_tag is not None:
        raise soft(ReplyCode.PRECONDITION_FAILED, "reply consumer already set")
    tag = m.consumer_tag or f"amq.ctag-{ch.conn}.{ch.number}-{core.next_id()}"
    if tag in ch.consumers:
        raise hard(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
    ch.reply_tag = tag
    return [] if m.nowait else [Send(ch.conn, ch.number, BasicConsumeOk(tag))]


def cancel_consumer(core: BrokerCore, meta: Meta, ch: Channel, tag: str) -> list[Effect]:
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
    effects: list[Effect] = []
    if core.fault("cancel_requeues"):
        own = [u for u in ch.unacked.values() if u.consumer_tag == tag]
        effects = settle(core, meta, ch, own, True, False)
    return effects + core.after_consumer_change(meta, queue)


@handles(BasicCancel)
def basic_cancel(core: BrokerCore, meta: Meta, ch: Channel, m: BasicCancel,
                 props: BasicProperties | None, body: bytes) -> list[Effect]:
    # CCN-03: an unknown tag is not an error. CCN-04: cancel-ok precedes nothing of it.
    if core.fault("cancel_unknown_tag_error") and m.consumer_tag not in ch.consumers and (
            m.consumer_tag != ch.reply_tag):
        raise soft(ReplyCode.NOT_FOUND, f"unknown consumer tag '{m.consumer_tag}'")
    effects = cancel_consumer(core, meta, ch, m.consumer_tag)
    reply: list[Effect] = [] if m.nowait else [Send(ch.conn, ch.number, BasicCancelOk(m.consumer_tag))]
    return reply + effects


@handles(BasicCancelOk)
def basic_cancel_ok(core: BrokerCore, meta: Meta, ch: Channel, m: BasicCancelOk,
                    props: BasicProperties | None, body: bytes) -> list[Effect]:
    """CCN-05: 4.3 accepts a client cancel-ok (finishing a broker cancel); ≤4.2 answers 503."""
    if core.config.timeout_mode == "legacy":
        raise hard(ReplyCode.COMMAND_INVALID, "unimplemented method")
    return cancel_consumer(core, meta, ch, m.consumer_tag)


@handles(BasicGet)
def basic_get(core: BrokerCore, meta: Meta, ch: Channel, m: BasicGet,
              props: BasicProperties | None, body: bytes) -> list[Effect]:
    queue = resolve_queue(core, ch, m.queue)
    _check_read(core, ch, queue.name)
    if queue.kind == QUORUM and queue.arguments.get("x-single-active-consumer") is True:
        # ERR-04, 4.3's text: rabbit_channel formats the queue type's alias (a binary) with ~p
        raise soft(ReplyCode.RESOURCE_LOCKED, f"cannot obtain access to locked {texts.q(queue.name, queue.vhost)}. "
                   'basic.get operations are not supported by <<"quorum">> queues with single active consumer')
    effects: list[Effect] = []
    if core.fault("get_obeys_prefetch") and ch.prefetch_count and len(ch.unacked) >= ch.prefetch_count:
        return [Send(ch.conn, ch.number, BasicGetEmpty())]
    while (message := queue.pop()) is not None:
        if message.expires_at is not None and message.expires_at <= meta.now_ms:
            effects += core.dead_letter(meta, queue, message, "expired")
            continue
        tag = ch.next_tag  # ACK-01: get-ok shares the channel's counter
        ch.next_tag += 1
        redelivered, properties = core.checkout(queue, message)
        reply = BasicGetOk(tag, redelivered, message.exchange, message.routing_key, queue.ready_count())
        effects.append(Send(ch.conn, ch.number, reply, properties, message.body))
        if m.no_ack:
            durability.forget(core, message)
        else:
            unacked = ch.unacked[tag] = Unacked(tag, queue.name, message, None, meta.now_ms)
            queue.checked_out += 1
            effects += timeouts.arm(core, meta, queue, ch, unacked, timeouts.get_timeout(core, queue))
        return effects
    return [*effects, Send(ch.conn, ch.number, BasicGetEmpty())]


# -- acknowledgements ----------------------------------------------------------------------
def collect(core: BrokerCore, ch: Channel, tag: int, multiple: bool) -> list[Unacked]:
    """rabbit_channel:collect_acks (ACK-03..06): check everything before changing anything."""
    if multiple and tag == 0:
        return [] if core.fault("tag_zero_multiple_ignored") else list(ch.unacked.values())
    if tag not in ch.unacked:
        if (multiple and core.fault("multi_unknown_tag_silent")) or (
                not multiple and core.fault("double_ack_accepted")):
            return []
        if core.fault("unknown_tag_closes_connection"):
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, texts.unknown_tag(tag), scope="connection")
        raise soft(ReplyCode.PRECONDITION_FAILED, texts.unknown_tag(tag))
    if multiple and core.fault("multi_ack_only_named"):
        return [ch.unacked[tag]]
    if multiple:
        # `unacked` is in tag order (tags only grow; rollback re-sorts): stop at N, so a
        # multi-ack costs what it settles, not the whole backlog.
        return list(takewhile(lambda u: u.tag <= tag, ch.unacked.values()))
    return [ch.unacked[tag]]


def settle(core: BrokerCore, meta: Meta, ch: Channel, items: list[Unacked], requeue: bool | None,
           failed: bool) -> list[Effect]:
    """Ack (requeue None), requeue, or discard/dead-letter deliveries, then dispatch."""
    vhost = core.connections[ch.conn].vhost
    touched: dict[str, Queue] = {}
    effects: list[Effect] = []
    for u in items:
        ch.unacked.pop(u.tag, None)
        consumer = ch.consumers.get(u.consumer_tag) if u.consumer_tag is not None else None
        if consumer is not None:
            consumer.timed_out.discard(u.tag)  # TMO-4.3-5: settling clears the timeout state
            if not u.timed_out:
                consumer.unacked -= 1
        queue = core.find_queue(vhost, u.queue)
        if queue is None:
            continue  # the queue was deleted: settling just forgets the delivery
        if u.deadline is not None:
            timeouts.forget(queue, ch.conn, ch.number, u.tag)
        touched[queue.name] = queue
        if u.timed_out:
            if core.fault("late_ack_removes_message") and requeue is None:
                queue.remove(u.message)
            continue  # already returned by a timeout: a late ack removes nothing (TMO-4.3-5)
        queue.checked_out -= 1
        if requeue is None:
            durability.forget(core, u.message)
        elif requeue:
            effects += core.return_to_queue(meta, queue, u.message, failed)
        else:
            effects += core.dead_letter(meta, queue, u.message, "rejected")
    for queue in touched.values():
        effects += core.dispatch(meta, queue)
    return effects


@handles(BasicAck)
def basic_ack(core: BrokerCore, meta: Meta, ch: Channel, m: BasicAck,
              props: BasicProperties | None, body: bytes) -> list[Effect]:
    items = collect(core, ch, m.delivery_tag, m.multiple)
    if ch.tx:
        return _defer(ch, items, "ack", False)  # ACK-08
    return settle(core, meta, ch, items, None, False)


@handles(BasicNack)
def basic_nack(core: BrokerCore, meta: Meta, ch: Channel, m: BasicNack,
               props: BasicProperties | None, body: bytes) -> list[Effect]:
    items = collect(core, ch, m.delivery_tag, m.multiple)
    requeue = m.requeue or core.fault("nack_requeue_false_requeues")
    if ch.tx:
        return _defer(ch, items, "nack", requeue)
    return settle(core, meta, ch, items, requeue, False)  # RQ-06 4.3: nack does not count


@handles(BasicReject)
def basic_reject(core: BrokerCore, meta: Meta, ch: Channel, m: BasicReject,
                 props: BasicProperties | None, body: bytes) -> list[Effect]:
    items = collect(core, ch, m.delivery_tag, False)
    if ch.tx:
        return _defer(ch, items, "reject", m.requeue)
    return settle(core, meta, ch, items, m.requeue, True)  # RQ-06 4.3: reject counts


def _defer(ch: Channel, items: list[Unacked], kind: str, requeue: bool) -> list[Effect]:
    for u in items:
        ch.tx_settles.append((kind, u.tag, False, requeue))
        ch.unacked.pop(u.tag, None)
        ch.tx_held[u.tag] = u
    return []


@handles(BasicRecover, BasicRecoverAsync)
def basic_recover(core: BrokerCore, meta: Meta, ch: Channel, m: BasicRecover | BasicRecoverAsync,
                  props: BasicProperties | None, body: bytes) -> list[Effect]:
    if not m.requeue:
        raise hard(ReplyCode.NOT_IMPLEMENTED, "requeue=false")  # ACK-09
    if core.fault("recover_no_redelivered"):
        for u in ch.unacked.values():
            u.message.delivered, u.message.acquired_count = False, 0
    effects = settle(core, meta, ch, list(ch.unacked.values()), True, False)
    if isinstance(m, BasicRecover):
        effects.insert(0, Send(ch.conn, ch.number, BasicRecoverOk()))
    return effects


# -- prefetch, flow ------------------------------------------------------------------------
@handles(BasicQos)
def basic_qos(core: BrokerCore, meta: Meta, ch: Channel, m: BasicQos,
              props: BasicProperties | None, body: bytes) -> list[Effect]:
    if m.prefetch_size != 0 and not core.fault("prefetch_size_accepted"):
        raise hard(ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})")  # QOS-01
    if m.global_ and (core.config.global_qos or core.fault("global_qos_channel_wide")):
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
            effects += core.dispatch(meta, queue)
    return effects


@handles(ChannelFlow)
def channel_flow(core: BrokerCore, meta: Meta, ch: Channel, m: ChannelFlow,
                 props: BasicProperties | None, body: bytes) -> list[Effect]:
    if not m.active:
        raise hard(ReplyCode.NOT_IMPLEMENTED, "active=false")  # QOS-11
    return [Send(ch.conn, ch.number, ChannelFlowOk(True))]


@handles(ChannelClose)
def channel_close(core: BrokerCore, meta: Meta, ch: Channel, m: ChannelClose,
                  props: BasicProperties | None, body: bytes) -> list[Effect]:
    return core.close_channel(meta, ch)


