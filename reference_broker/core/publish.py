"""basic.publish: checks, mandatory returns, confirms, transactions and direct reply-to
(routing and enqueueing: delivery.py).

Rules: PC-02 sequence numbers, PC-06 a return precedes its confirm, PC-08 nacks for refused
publishes, PC-12 immediate/size errors; a direct reply-to delivery takes the requester's next
delivery tag like any delivery (4.2+, where replies go through a volatile queue; RabbitMQ up to
4.1 stamps the current tag without incrementing it: ACK-01.e).
"""

from __future__ import annotations

from codec import BasicAck, BasicDeliver, BasicProperties, BasicPublish, BasicReturn, ReplyCode
from reference_broker.core import cluster, durability, permissions, texts
from reference_broker.core.arguments import parse_expiration
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.delivery import route_all, route_and_enqueue, sender_routes
from reference_broker.core.effects import Effect, Send
from reference_broker.core.errors import hard, soft
from reference_broker.core.state import Channel, PendingPublish, Queue

EMPTY = BasicProperties()


def basic_publish(core: BrokerState, meta: Meta, ch: Channel, m: BasicPublish,
                  props: BasicProperties | None, body: bytes) -> list[Effect]:
    vhost = core.connections[ch.conn].vhost
    if m.immediate:
        raise hard(ReplyCode.NOT_IMPLEMENTED, "immediate=true")  # PC-12
    exchange = core.vhosts[vhost].exchanges.get(m.exchange)
    if exchange is None:
        raise soft(ReplyCode.NOT_FOUND, texts.no_exchange(m.exchange, vhost))
    if exchange.internal and core.rules.internal_refuses_publish():  # EXCH-09
        raise soft(ReplyCode.ACCESS_REFUSED, f"cannot publish to internal {texts.x(m.exchange, vhost)}")
    if core.config.permissions:
        permissions.check(core, ch, "write", "exchange", m.exchange, "basic.publish")
    permissions.check_topic(core, ch, "write", m.exchange, exchange.kind, m.routing_key)  # ACC-05
    if core.rules.body_too_large(len(body), core.config.max_message_size):  # PC-12
        raise soft(ReplyCode.PRECONDITION_FAILED, f"message size {len(body)} is larger than configured "
                   f"max size {core.config.max_message_size}")
    props = props or EMPTY
    user = core.connections[ch.conn].user
    if (props.user_id is not None and props.user_id != user and core.rules.user_id_checked()  # MSG-02: check_user_id_header
            and not core.rules.impersonation_allowed(permissions.tags(core, user))):  # ACC-07
        raise soft(ReplyCode.PRECONDITION_FAILED,
                   f"user_id property set to '{props.user_id}' but authenticated user was '{user}'")
    if props.expiration is not None and core.rules.expiration_checked():  # TTL-01: check_expiration_header
        ttl = parse_expiration(props.expiration)
        if core.config.timeout_mode != "legacy":  # TTL-01: 4.x delivers the number read (mc_amqpl)
            props = props._replace(expiration=str(ttl))
    mode = props.delivery_mode  # MSG-03: rabbit_basic:message, after check_expiration_header (3.x)
    if mode is not None and core.rules.delivery_mode_refused(mode, core.config.emulates):
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid message: {{delivery_mode_unknown,{mode}}}")
    extra_keys, _ = sender_routes(props)  # ROUTE-13: a CC or BCC that is not an array refuses the publish now
    if core.config.emulates == "4.3" and core.rules.topic_checks_sender_keys():  # ACC-05: 4.0+ check every routing key (mc:routing_keys), 3.x the key only
        for key in extra_keys:
            permissions.check_topic(core, ch, "write", m.exchange, exchange.kind, key)
    if ch.tx and core.rules.tx_holds_publishes():  # TX-02
        return hold(core, ch, m, props, body)
    return publish_now(core, meta, ch, m.exchange, m.routing_key, m.mandatory, props, body)


def hold(core: BrokerState, ch: Channel, m: BasicPublish, props: BasicProperties, body: bytes) -> list[Effect]:
    """Keep a transaction's publish until the commit, routed now (TX-06); an unroutable mandatory
    one is returned at the commit (TX-05), or now under a fault."""
    vhost = core.connections[ch.conn].vhost
    queues = route_all(core, vhost, m.exchange, m.routing_key, props) if core.rules.tx_routes_at_publish() else None
    if m.mandatory and not core.rules.tx_return_at_commit() and not (
            queues if queues is not None else route_all(core, vhost, m.exchange, m.routing_key, props)):
        returned = BasicReturn(ReplyCode.NO_ROUTE, "NO_ROUTE", m.exchange, m.routing_key)
        return [Send(ch.conn, ch.number, returned, props, body)]
    ch.tx_publishes.append(PendingPublish(m.exchange, m.routing_key, m.mandatory, props, body, queues))
    return []


REPLY_TO = "amq.rabbitmq.reply-to"


def _reply_to(core: BrokerState, ch: Channel, exchange: str, routing_key: str, props: BasicProperties,
              body: bytes) -> tuple[BasicProperties, list[Effect] | None]:
    """Direct reply-to: name the sender's pseudo-queue in reply_to; deliver replies straight
    to the requester's no-ack consumer with its channel's next tag (ACK-01.e, 4.2+). Returns
    (properties, effects if it was a reply)."""
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
    target.next_tag += 1
    return props, [Send(target.conn, target.number, deliver, props, body)]


def publish_now(core: BrokerState, meta: Meta, ch: Channel, exchange: str, routing_key: str,
                mandatory: bool, props: BasicProperties, body: bytes, routed: list[Queue] | None = None) -> list[Effect]:
    core.published = True
    props, direct = _reply_to(core, ch, exchange, routing_key, props, body)
    seqno = 0
    if ch.confirm:
        seqno, ch.publish_seqno = core.rules.confirm_seqno(ch.publish_seqno), ch.publish_seqno + 1  # PC-02
    vhost = core.connections[ch.conn].vhost
    puts_before = core.store_seq
    if direct is None and routed is None and cluster.lagging(core):  # a queue this node does not know is not reached
        routed = [q for q in route_all(core, vhost, exchange, routing_key, props) if cluster.known(core, ch.conn, q)]
    if direct is not None:
        effects, accepted = direct, (True if direct else None)
    else:
        effects, accepted = route_and_enqueue(core, meta, vhost, exchange, routing_key, props, body, routed)
    collect = True
    if accepted is None and mandatory:  # PC-06: the return precedes the confirm
        returned = Send(ch.conn, ch.number, BasicReturn(ReplyCode.NO_ROUTE, "NO_ROUTE", exchange, routing_key),
                        props, body)
        ack = Send(ch.conn, ch.number, BasicAck(seqno, False)) if seqno else None
        effects, collect = core.rules.unroutable_return(effects, returned, ack)
    waits = cluster.hold_confirm(core, ch, seqno, accepted)  # CLU-07: no majority, no confirm
    if (seqno or ch.confirm) and collect and not waits and not core.rules.confirm_lost(seqno, accepted):
        if accepted is False:
            ch.nacks_ready.append(seqno)
        elif not durability.defer_confirm(core, ch, seqno, puts_before):  # PC-07: on disk first
            ch.confirms_ready.append(seqno)
    if accepted is False and ch.tx:
        ch.tx_rejected = True
    return effects


