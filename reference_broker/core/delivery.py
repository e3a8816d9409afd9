"""Where messages go: routing and enqueueing, dispatch to consumers, requeue, dead-lettering,
queue deletion.

Rules:
- Routing follows exchange-to-exchange bindings once each; each reached queue gets its own
  copy, with the lower of queue and message TTL; the length limits drop the head (default) or
  refuse the publish (reject-publish, PC-08; limits.py); dropped and expired messages are
  dead-lettered.
- Dispatch delivers ready messages to consumers with capacity, round-robin by priority
  (the earliest consumer only under single-active-consumer), at most DISPATCH_BATCH per call:
  a timer effect continues, so one unlimited consumer cannot hold the event loop.
- The redelivered flag is RQ-04's (quorum: acquired before; classic: delivered before);
  quorum redeliveries carry x-delivery-count and x-acquired-count (RQ-05).
- A returned message goes back where the rules put it (RQ-01/02); a `failed` return counts
  toward the quorum delivery limit, past which it is dead-lettered (RQ-06).
- A deleted queue loses its bindings and cancels its consumers (CCN-02).
- Stream queues append to their log and deliver from each consumer's offset (streams.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codec import BasicCancel, BasicDeliver, BasicProperties, ReplyCode
from codec.fields import timestamp_from_wire
from reference_broker.core import cluster, deaths, durability, lease, limits, streams, timeouts
from reference_broker.core.arguments import field_type
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.effects import Effect, Send, StartTimer
from reference_broker.core.errors import soft
from reference_broker.core.routing import binding_matches
from reference_broker.core.settings import delivery_limit, exchange_setting, message_ttl, queue_setting
from reference_broker.core.state import (
    QUORUM,
    STREAM,
    Consumer,
    Exchange,
    Message,
    Queue,
    Unacked,
    VHost,
)

DISPATCH_BATCH = 512


# -- routing and enqueueing ------------------------------------------------------------------
def route(core: BrokerState, vhost: str, exchange_name: str, routing_key: str,
          headers: Mapping[str, Any] | None) -> list[Queue]:
    """Queues reached from an exchange (ROUTE-01..12): exchange-to-exchange bindings and
    alternate exchanges are followed, each exchange once (rabbit_exchange route1); an exchange
    that routes to no destination passes the message to its alternate-exchange (ROUTE-12); a
    queue reached more than once gets one copy (ROUTE-10, `rules.one_copy`)."""
    v = core.vhosts[vhost]
    if exchange_name == "":
        queue = v.queues.get(routing_key)
        return [queue] if queue is not None else []
    rules = core.rules
    seen_exchanges: set[str] = set()
    found: list[Queue] = []
    todo = [exchange_name]
    while todo:
        name = todo.pop(0)
        exchange = v.exchanges.get(name)
        if exchange is None or name in seen_exchanges:
            continue
        seen_exchanges.add(name)
        routed = False
        for b in exchange.bindings:
            if binding_matches(exchange.kind, b.routing_key, b.arguments, routing_key, headers,
                               topic=rules.topic_match, header=rules.headers_match):
                if b.is_exchange:
                    if not rules.routes_on():
                        continue
                    routed = True
                    todo.append(b.destination)
                elif b.destination in v.queues:
                    routed = True
                    found.append(v.queues[b.destination])
        alternate = exchange_setting(core, vhost, exchange, "alternate-exchange")  # ROUTE-12, POL-04
        if not routed and isinstance(alternate, str):
            todo.append(alternate)
    return rules.one_copy(found)


SENDER_SELECTED = ("CC", "BCC")  # the headers whose longstr arrays add routing keys (ROUTE-13)


def sender_routes(properties: BasicProperties, bcc_removed: bool = True) -> tuple[list[str], BasicProperties]:
    """ROUTE-13: the routing keys a message's CC and BCC headers add (longstr array elements), and
    its properties without BCC; a CC or BCC that is not an array is a 406 (rabbit_basic header_routes)."""
    headers = properties.headers
    if not headers or not (set(SENDER_SELECTED) & set(headers)):
        return [], properties
    keys: list[str] = []
    for name in SENDER_SELECTED:
        value = headers.get(name)
        if value is None:
            continue
        if not isinstance(value, list):
            raise soft(ReplyCode.PRECONDITION_FAILED,
                       f'invalid message: {{unacceptable_type_in_header,"{name}",{field_type(value)}}}')
        keys += [k for k in value if isinstance(k, str)]
    if "BCC" in headers and bcc_removed:
        properties = properties._replace(headers={k: v for k, v in headers.items() if k != "BCC"})
    return keys, properties


def route_all(core: BrokerState, vhost: str, exchange: str, routing_key: str, properties: BasicProperties,
              dead: deaths.DeadLetter | None = None) -> list[Queue]:
    """The queues a publish reaches: its routing key and each CC/BCC key (ROUTE-13), one copy per
    queue. A dead-lettered message (`dead`) is routed by the keys it says, not by its CC and BCC
    headers, and not into a queue that would close a dead-letter cycle (DLX-04, DLX-06)."""
    if dead is None:
        extra, properties = sender_routes(properties, core.rules.bcc_removed())
    else:
        extra = list(dead.extra_keys)
    queues = route(core, vhost, exchange, routing_key, properties.headers)
    for key in dict.fromkeys(extra):
        queues += [q for q in route(core, vhost, exchange, key, properties.headers) if all(q is not o for o in queues)]
    if dead is not None:
        queues = [q for q in queues if not core.rules.dead_letter_cycle(q.name, dead.deaths, dead.reason)]
    return queues


def _extra_keys(core: BrokerState, properties: BasicProperties, dead: deaths.DeadLetter | None) -> list[str]:
    return sender_routes(properties, core.rules.bcc_removed())[0] if dead is None else list(dead.extra_keys)


def route_and_enqueue(core: BrokerState, meta: Meta, vhost: str, exchange: str, routing_key: str,
                      properties: BasicProperties, body: bytes, routed: list[Queue] | None = None,
                      dead: deaths.DeadLetter | None = None) -> tuple[list[Effect], bool | None]:
    """Route (unless `routed`: the queues a transaction's publish was routed to, TX-06) and
    enqueue; returns (effects, accepted): None = unroutable, False = a queue refused."""
    queues = route_all(core, vhost, exchange, routing_key, properties, dead) if routed is None else routed
    extra = _extra_keys(core, properties, dead)
    if dead is None:
        properties = sender_routes(properties, core.rules.bcc_removed())[1]
    if not queues:
        return [], None
    effects: list[Effect] = []
    accepted = True
    routes = (routing_key, *extra)
    for queue in queues:
        message = Message(exchange, routing_key, properties, body, routes=routes,
                          deaths=dead.recorded if dead is not None else None)
        if (verdict := cluster.divert(core, queue, message)) is not None:  # CLU-03, CLU-07
            accepted = accepted and verdict
            continue
        if queue.kind == STREAM:  # an append-only log: no TTL, no length limit here
            streams.append(core, meta, queue, message)
            effects += dispatch(core, meta, queue)
            continue
        ttl = message_ttl(core, queue, properties)
        if ttl is not None:
            message.expires_at = meta.now_ms + ttl
        ok, dropped = limits.admit(core, queue, message)  # LEN-04, LEN-05
        for old in dropped:
            effects += dead_letter(core, meta, queue, old, "maxlen")
        if not ok:
            accepted = False
            continue
        queue.enqueue(message, core.rules.priority_level(queue, message, core.config.emulates))
        durability.remember(core, queue, message)
        if core.rules.publish_renews_lease():  # QUEUE-08: not RabbitMQ's (a fault's)
            effects += lease.touch(core, meta, queue)
        message.arriving = True  # TTL-05: attempt_delivery comes before any expiry
        effects += dispatch(core, meta, queue)
        for old in limits.trim(core, queue):  # LEN-02, LEN-03
            effects += dead_letter(core, meta, queue, old, "maxlen")
        message.arriving = False
        expired = message.expires_at is not None and message.expires_at <= meta.now_ms  # a TTL of 0
        if core.rules.expired_dropped_on_arrival() or not expired or message is not queue.head():
            effects += expire_head(core, meta, queue)
    return effects, accepted


def expire_head(core: BrokerState, meta: Meta, queue: Queue) -> list[Effect]:
    """TTL-03, TTL-05: the messages at the head whose TTL has passed go (dead-lettered, or dropped),
    and the queue's TTL timer is armed for the new head's expiry, as RabbitMQ drops expired
    messages only at the head: on publish, after a fetch, on its timer (rabbit_amqqueue_process
    drop_expired_msgs and ensure_ttl_timer; rabbit_fifo expire_msgs and its timer effect)."""
    if queue.kind == STREAM:
        return []
    effects: list[Effect] = []
    while ((head := queue.head()) is not None and head.expires_at is not None and head.expires_at <= meta.now_ms
           and not head.arriving):
        queue.pop()
        durability.forget(core, head)
        effects += dead_letter(core, meta, queue, head, "expired")
    due = head.expires_at if head is not None and not head.arriving else None  # an arriving one: after its delivery attempt
    if due is not None and due != queue.ttl_timer_at and core.rules.ttl_timer():
        queue.ttl_timer_at = due
        effects.append(StartTimer(("ttl", queue.vhost, queue.name), due))
    return effects


def dead_letter(core: BrokerState, meta: Meta, queue: Queue, message: Message, reason: str) -> list[Effect]:
    """Republish to the queue's dead-letter exchange, or drop when it has none or it does not exist
    (DLX-01, DLX-05): with the dead-letter routing key alone, else with every key it was routed by
    (DLX-06); x-death recorded as the profile's version does (DLX-02, DLX-07)."""
    durability.forget(core, message)
    dlx = queue_setting(core, queue, "dead-letter-exchange")
    if dlx is None:
        return []
    if str(dlx) and str(dlx) not in core.vhosts[queue.vhost].exchanges and core.rules.missing_dead_letter_kept():
        message.expires_at = None  # DLX-05 (a fault's): kept, as if it had nowhere to go
        core.rules.put_back(queue, message)
        return []
    dlrk = queue_setting(core, queue, "dead-letter-routing-key")
    dlrk = dlrk if isinstance(dlrk, str) else None
    rk = core.rules.dead_letter_key(dlrk, message.routing_key)  # DLX-01
    extra = core.rules.dead_letter_extra_keys(dlrk, message.routes[1:])  # DLX-06
    headers = dict(message.properties.headers or {})
    legacy = core.config.timeout_mode == "legacy"
    entry: dict[str, Any] = {"count": 1, "reason": reason, "queue": queue.name,
                             "time": timestamp_from_wire((meta.now_ms + core.clock_offset_ms) // 1000),
                             "exchange": message.exchange,
                             "routing-keys": deaths.death_routing_keys(message.routing_key, headers)}
    if message.properties.expiration is not None:
        entry["original-expiration"] = message.properties.expiration
    merged = core.rules.deaths_merged()
    recorded: list[dict[str, Any]] | None = None
    if legacy or core.rules.publisher_deaths_read():  # DLX-07: 3.x reads the header a publisher may have set
        headers["x-death"], first = deaths.legacy_recorded(headers.get("x-death"), entry, merged)
    else:
        recorded = deaths.recorded(message.deaths, entry, merged)
        headers["x-death"], first = recorded, True
    oldest = headers["x-death"][-1]
    if first and not legacy:  # 4.x: the first recorded death, whatever the publisher set
        headers.update({"x-first-death-reason": oldest["reason"], "x-first-death-queue": oldest["queue"],
                        "x-first-death-exchange": oldest["exchange"]})
    elif first:
        headers.update({"x-first-death-reason": reason, "x-first-death-queue": queue.name,
                        "x-first-death-exchange": message.exchange})
    if not legacy and core.rules.last_death_headers():  # DLX-02: from 3.13
        headers.update({"x-last-death-reason": reason, "x-last-death-queue": queue.name,
                        "x-last-death-exchange": message.exchange})
    if legacy and dlrk is not None:
        headers.pop("CC", None)  # DLX-06: 3.x drops CC with a dead-letter routing key
    expiration = None if core.rules.dead_letter_strips_expiration() else message.properties.expiration  # DLX-02
    props = message.properties._replace(headers=headers, expiration=expiration)
    dead = deaths.DeadLetter(reason, tuple(extra), headers["x-death"], recorded)
    effects, _ok = route_and_enqueue(core, meta, queue.vhost, str(dlx), rk, props, message.body, dead=dead)
    return effects


def return_to_queue(core: BrokerState, meta: Meta, queue: Queue, message: Message, failed: bool) -> list[Effect]:
    """A delivered message goes back (RQ-01/02); `failed` counts toward the quorum
    delivery limit in 4.3 (RQ-06: reject and channel loss do, nack and timeout don't).
    Past the limit (default 20, -1 disables) it is dead-lettered or dropped. A stream keeps
    every message in its log: nothing goes back."""
    if queue.kind == STREAM:
        return []
    if queue.kind == QUORUM and failed:
        message.delivery_count += 1
        limit = delivery_limit(core, queue)
        if limit is not None and message.delivery_count > limit:
            return dead_letter(core, meta, queue, message, "delivery_limit")
    if not core.rules.returned_keeps_expiry() and message.expires_at is not None:  # TTL-04 (a fault's)
        message.expires_at = meta.now_ms + (message_ttl(core, queue, message.properties) or 0)
    core.rules.put_back(queue, message)  # LEN-02, LEN-03: the return may take the queue over a limit
    return [e for old in limits.trim(core, queue, True) for e in dead_letter(core, meta, queue, old, "maxlen")]


# -- delivery --------------------------------------------------------------------------------
def dispatch(core: BrokerState, meta: Meta, queue: Queue) -> list[Effect]:
    """Deliver ready messages to consumers with capacity (see the module rules)."""
    if queue.kind == STREAM:
        return streams.dispatch(core, meta, queue, DISPATCH_BATCH)
    if not cluster.serving(core, queue):
        return []  # CLU-07: no majority
    effects: list[Effect] = []
    budget = DISPATCH_BATCH
    while queue.consumers and queue.ready_count():
        consumer = _next_consumer(core, queue)
        if consumer is None:
            break
        if budget == 0:
            effects.append(StartTimer(("dispatch", queue.vhost, queue.name), meta.now_ms))
            break
        budget -= 1
        message = queue.pop()
        if message is None:
            break
        if message.expires_at is not None and message.expires_at <= meta.now_ms and not message.arriving:
            effects += dead_letter(core, meta, queue, message, "expired")
            continue
        effects += deliver(core, meta, consumer, queue, message)
    effects += expire_head(core, meta, queue)  # TTL-03: after a fetch
    return effects + core.rules.timer_after_command(queue, meta.now_ms)  # TMO-4.3-2 (a fault's hook)


def _next_consumer(core: BrokerState, queue: Queue) -> Consumer | None:
    best: Consumer | None = None
    best_key = ""
    if queue.arguments.get("x-single-active-consumer") is True and queue.consumers:
        first = next(iter(queue.consumers))  # the earliest registered consumer is the active one
        candidates: Any = (first,)
    else:
        candidates = queue.rotation
    for key in candidates:
        consumer = queue.consumers[key]
        conn = core.connections.get(consumer.conn)
        ch = conn.channels.get(consumer.channel) if conn else None
        window = core.rules.prefetch_window(consumer.prefetch)
        if ch is None or ch.closing or not consumer.has_capacity(window) or conn is None or not conn.writable:
            continue
        if consumer.no_ack and core.rules.no_ack_limited(consumer):
            continue
        if not ch.global_capacity():
            continue  # QOS-08: a reached global limit pauses no-ack consumers too
        if best is None or core.rules.consumer_rank(consumer.priority) > core.rules.consumer_rank(best.priority):
            best, best_key = consumer, key
    if best is not None and core.rules.consumers_rotate():
        queue.rotation.remove(best_key)
        queue.rotation.append(best_key)
    return best


def deliver(core: BrokerState, meta: Meta, consumer: Consumer, queue: Queue, message: Message) -> list[Effect]:
    ch = core.connections[consumer.conn].channels[consumer.channel]
    tag = ch.next_tag
    ch.next_tag += 1
    redelivered, properties = checkout(core, queue, message)
    method = BasicDeliver(consumer.tag, tag, redelivered, message.exchange, message.routing_key)
    effects: list[Effect] = [Send(ch.conn, ch.number, method, properties, message.body)]
    if consumer.no_ack:
        durability.forget(core, message)  # delivered without ack: out of the broker's custody
        core.rules.no_ack_delivered(consumer)
        return effects
    unacked = Unacked(tag, queue.name, message, consumer.tag, meta.now_ms)
    ch.unacked[tag] = unacked
    consumer.unacked += 1
    queue.checked_out += 1
    # 4.3 quorum consumer timeout (TMO-4.3-2)
    return effects + timeouts.arm(core, meta, queue, ch, unacked, consumer.timeout_ms)


def checkout(core: BrokerState, queue: Queue, message: Message) -> tuple[bool, BasicProperties]:
    """The redelivered flag (RQ-04) and the properties as delivered (RQ-05 headers)."""
    properties = message.properties
    if queue.kind == QUORUM:
        redelivered = message.acquired_count > 0
        if redelivered:
            headers = dict(properties.headers or {})
            if message.delivery_count > 0:  # RQ-05: absent until a failed attempt counts (live 4.3.6)
                headers["x-delivery-count"] = message.delivery_count
            headers["x-acquired-count"] = message.acquired_count
            properties = properties._replace(headers=headers)
    else:
        redelivered = message.delivered
    message.delivered = True
    message.acquired_count += 1
    return core.rules.redelivered(redelivered), properties


# -- queue lifecycle -------------------------------------------------------------------------
def after_consumer_change(core: BrokerState, meta: Meta, queue: Queue) -> list[Effect]:
    if queue.auto_delete and queue.had_consumer and not queue.consumers:
        return delete_queue(core, meta, queue)
    return [*lease.touch(core, meta, queue), *dispatch(core, meta, queue)]


def delete_queue(core: BrokerState, meta: Meta, queue: Queue) -> list[Effect]:
    """Remove a queue: its bindings go, its consumers are cancelled (CCN-02)."""
    vhost = core.vhosts[queue.vhost]
    vhost.queues.pop(queue.name, None)
    durability.drop_queue(core, queue)
    for owner in core.connections.values():  # a requeue has nowhere to go, as with RabbitMQ's queue process
        if owner.vhost == queue.vhost:
            for channel in owner.channels.values():
                for u in channel.unacked.values():
                    u.orphaned = u.orphaned or u.queue == queue.name
    effects: list[Effect] = []
    for exchange in list(vhost.exchanges.values()) if core.rules.bindings_go_with_queue() else []:
        before = len(exchange.bindings)
        exchange.bindings = [b for b in exchange.bindings
                             if b.is_exchange or b.destination != queue.name]
        if before != len(exchange.bindings):
            maybe_auto_delete_exchange(core, vhost, exchange)
    for consumer in list(queue.consumers.values()):
        queue.remove_consumer(consumer)
        conn = core.connections.get(consumer.conn)
        ch = conn.channels.get(consumer.channel) if conn else None
        if ch is None or conn is None:
            continue
        ch.consumers.pop(consumer.tag, None)
        if core.rules.cancel_on_delete(conn.cancel_notify) and not ch.closing:
            effects.append(Send(conn.id, ch.number, BasicCancel(consumer.tag, nowait=True)))
    queue.purge()
    return effects


def maybe_auto_delete_exchange(core: BrokerState, vhost: VHost, exchange: Exchange) -> None:
    """EXCH-08: an auto-delete exchange goes when its last binding as a source went; its bindings
    as a destination go with it, and a source left without bindings by that goes too."""
    if not (exchange.auto_delete and not exchange.bindings and exchange.name in vhost.exchanges
            and core.rules.exchange_auto_deleted()):
        return
    del vhost.exchanges[exchange.name]
    for other in list(vhost.exchanges.values()):
        before = len(other.bindings)
        other.bindings = [b for b in other.bindings if not (b.is_exchange and b.destination == exchange.name)]
        if len(other.bindings) != before:
            maybe_auto_delete_exchange(core, vhost, other)
