"""basic.publish: routing, enqueueing with TTL and overflow, mandatory returns, confirms,
and direct reply-to.

Rules: PC-02 sequence numbers, PC-06 a return precedes its confirm, PC-08 nacks for refused
publishes, PC-12 immediate/size errors; direct reply-to stamps the requester's current
delivery tag without incrementing it (ACK-01's quirk).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codec import BasicAck, BasicDeliver, BasicProperties, BasicPublish, BasicReturn, ReplyCode
from reference_broker.core import durability, texts
from reference_broker.core.broker import BrokerCore, Meta, handles, hard, soft
from reference_broker.core.effects import Effect, Send
from reference_broker.core.routing import binding_matches
from reference_broker.core.state import Channel, Message, PendingPublish, Queue

EMPTY = BasicProperties()


def route(core: BrokerCore, vhost: str, exchange_name: str, routing_key: str,
          headers: Mapping[str, Any] | None) -> list[Queue]:
    """Queues reached from an exchange, following exchange-to-exchange bindings once each."""
    v = core.vhosts[vhost]
    if exchange_name == "":
        queue = v.queues.get(routing_key)
        return [queue] if queue is not None else []
    seen_exchanges, queues, todo = set(), {}, [exchange_name]
    while todo:
        name = todo.pop()
        exchange = v.exchanges.get(name)
        if exchange is None or name in seen_exchanges:
            continue
        seen_exchanges.add(name)
        for b in exchange.bindings:
            if binding_matches(exchange.kind, b.routing_key, b.arguments, routing_key, headers):
                if b.is_exchange:
                    todo.append(b.destination)
                elif b.destination in v.queues:
                    queues[b.destination] = v.queues[b.destination]
    return list(queues.values())


def route_and_enqueue(core: BrokerCore, meta: Meta, vhost: str, exchange: str, routing_key: str,
                      properties: BasicProperties, body: bytes) -> tuple[list[Effect], bool | None]:
    """Route and enqueue; returns (effects, accepted): None = unroutable, False = a queue refused."""
    queues = route(core, vhost, exchange, routing_key, properties.headers)
    if not queues:
        return [], None
    effects: list[Effect] = []
    accepted = True
    for queue in queues:
        message = Message(exchange, routing_key, properties, body)
        ttl = message_ttl(core, queue, properties)
        if ttl is not None:
            message.expires_at = meta.now_ms + ttl
        ok, dropped = _admit(core, queue)
        for old in dropped:
            effects += core.dead_letter(meta, queue, old, "maxlen")
        if not ok:
            accepted = False
            continue
        queue.enqueue(message)
        durability.remember(core, queue, message)
        effects += core.dispatch(meta, queue)
    return effects, accepted


def message_ttl(core: BrokerCore, queue: Queue, properties: BasicProperties) -> int | None:
    ttls = []
    queue_ttl = core.queue_setting(queue, "message-ttl")
    if isinstance(queue_ttl, int) and queue_ttl >= 0:
        ttls.append(queue_ttl)
    if properties.expiration is not None and properties.expiration.isdigit():
        ttls.append(int(properties.expiration))
    return min(ttls) if ttls else None


def _admit(core: BrokerCore, queue: Queue) -> tuple[bool, list[Message]]:
    """x-max-length: drop-head (default) makes room, reject-publish refuses (PC-08)."""
    limit = core.queue_setting(queue, "max-length")
    if not isinstance(limit, int) or queue.ready_count() < limit:
        return True, []
    if core.queue_setting(queue, "overflow") in ("reject-publish", "reject-publish-dlx"):
        return False, []
    dropped = []
    while queue.ready_count() >= max(limit, 0) and (old := queue.drop_head()) is not None:
        dropped.append(old)
        if limit <= 0:
            return False, dropped
    return True, dropped


@handles(BasicPublish)
def basic_publish(core: BrokerCore, meta: Meta, ch: Channel, m: BasicPublish,
                  props: BasicProperties | None, body: bytes) -> list[Effect]:
    vhost = core.connections[ch.conn].vhost
    if m.immediate:
        raise hard(ReplyCode.NOT_IMPLEMENTED, "immediate=true")  # PC-12
    exchange = core.vhosts[vhost].exchanges.get(m.exchange)
    if exchange is None:
        raise soft(ReplyCode.NOT_FOUND, texts.no_exchange(m.exchange, vhost))
    if exchange.internal:
        raise soft(ReplyCode.ACCESS_REFUSED, f"cannot publish to internal {texts.x(m.exchange, vhost)}")
    if core.config.permissions:
        from reference_broker.core import permissions

        permissions.check(core, ch, "write", "exchange", m.exchange)
    if len(body) > core.config.max_message_size:
        raise soft(ReplyCode.PRECONDITION_FAILED, f"message size {len(body)} is larger than configured "
                   f"max size {core.config.max_message_size}")
    props = props or EMPTY
    if ch.tx:
        ch.tx_publishes.append(PendingPublish(m.exchange, m.routing_key, m.mandatory, props, body))
        return []
    return publish_now(core, meta, ch, m.exchange, m.routing_key, m.mandatory, props, body)


REPLY_TO = "amq.rabbitmq.reply-to"


def _reply_to(core: BrokerCore, ch: Channel, exchange: str, routing_key: str, props: BasicProperties,
              body: bytes) -> tuple[BasicProperties, list[Effect] | None]:
    """Direct reply-to: name the sender's pseudo-queue in reply_to; deliver replies straight
    to the requester's no-ack consumer, stamped with its channel's current tag without
    incrementing it (ACK-01's quirk). Returns (properties, effects if it was a reply)."""
    if props.reply_to == REPLY_TO:
        if ch.reply_tag is None:
            raise soft(ReplyCode.PRECONDITION_FAILED, "fast reply consumer does not exist")
        props = props._replace(reply_to=f"{REPLY_TO}.g1h2AA.{ch.conn}.{ch.number}")
    if exchange or not routing_key.startswith(REPLY_TO + "."):
        return props, None
    parts = routing_key.split(".")
    target = None
    if len(parts) == 6 and parts[4].isdigit() and parts[5].isdigit():
        conn = core.connections.get(int(parts[4]))
        target = conn.channels.get(int(parts[5])) if conn else None
    if target is None or target.reply_tag is None or target.closing:
        return props, []  # the requester is gone: unroutable
    deliver = BasicDeliver(target.reply_tag, target.next_tag, False, exchange, routing_key)
    return props, [Send(target.conn, target.number, deliver, props, body)]


def publish_now(core: BrokerCore, meta: Meta, ch: Channel, exchange: str, routing_key: str,
                mandatory: bool, props: BasicProperties, body: bytes) -> list[Effect]:
    conn = core.connections[ch.conn]
    blocked: list[Effect] = []
    if not conn.publisher:
        conn.publisher = True
        if core.alarm:  # a new publisher during an alarm is blocked at once
            blocked = core.block_connection(conn, True)
    core.published = True
    props, direct = _reply_to(core, ch, exchange, routing_key, props, body)
    seqno = 0
    if ch.confirm:
        seqno, ch.publish_seqno = ch.publish_seqno, ch.publish_seqno + 1  # PC-02
        if core.fault("confirms_start_at_zero"):
            seqno -= 1
    vhost = core.connections[ch.conn].vhost
    puts_before = core.store_seq
    if direct is not None:
        effects, accepted = direct, (True if direct else None)
    else:
        effects, accepted = route_and_enqueue(core, meta, vhost, exchange, routing_key, props, body)
    returned = Send(ch.conn, ch.number, BasicReturn(ReplyCode.NO_ROUTE, "NO_ROUTE", exchange, routing_key),
                    props, body)
    if accepted is None and mandatory and seqno and core.fault("return_after_ack"):
        return [*effects, Send(ch.conn, ch.number, BasicAck(seqno, False)), returned, *blocked]
    if accepted is None and mandatory:  # PC-06: the return precedes the confirm
        effects.insert(0, returned)
    lost = (seqno == 3 and core.fault("confirm_lost")) or (
        accepted is None and core.fault("unroutable_never_confirmed"))
    if (seqno or ch.confirm) and not lost:
        if accepted is False:
            ch.nacks_ready.append(seqno)
        elif not durability.defer_confirm(core, ch, seqno, puts_before):  # PC-07: on disk first
            ch.confirms_ready.append(seqno)
    if accepted is False and ch.tx:
        ch.tx_rejected = True
    return effects + blocked


