"""Handlers of exchange.* and queue.* methods: declare, bind, unbind, purge, delete.

Rules: names starting "amq." are reserved (403); the default exchange cannot be declared,
bound or deleted (403, ROUTE-02); a headers binding's x-match is validated (406, ROUTE-08);
a redeclaration must be equivalent (406 "inequivalent arg");
passive declares of missing entities are 404; queue types are classic, quorum and stream,
quorum queues and streams being durable, non-exclusive and not auto-delete (streams.py checks
a stream's declaration); exclusive queues belong to their connection (405 from other
connections, ERR-04).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from codec import (
    BasicProperties,
    ExchangeBind,
    ExchangeBindOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    ExchangeUnbind,
    ExchangeUnbindOk,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
    QueueUnbind,
    QueueUnbindOk,
    ReplyCode,
)
from codec.fields import rabbitmq_equivalent
from reference_broker.core import cluster, durability, lease, limits, permissions, streams, texts, timeouts
from reference_broker.core.arguments import (
    MAX_SUPPORTED_PRIORITY,
    check_dead_letter_args,
    check_expires,
    check_message_ttl,
    check_non_negative_int,
)
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.delivery import delete_queue, maybe_auto_delete_exchange
from reference_broker.core.effects import Effect, Send
from reference_broker.core.errors import soft
from reference_broker.core.routing import EXCHANGE_TYPES, x_match_error
from reference_broker.core.state import CLASSIC, QUORUM, STREAM, Binding, Channel, Exchange, Queue, VHost

DEFAULT_EXCHANGE_REFUSED = "operation not permitted on the default exchange"
# QUEUE-02: the arguments compared on redeclaration, in RabbitMQ's order (rabbit_classic_queue
# capabilities queue_arguments, v3.10.8 to v4.3.5; x-delivery-limit is a quorum queue's)
MESSAGE_TTL = "x-message-ttl"
EQUIVALENCE_ARGS = ("x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
                    "x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
                    "x-queue-version", "x-single-active-consumer", "x-queue-type", "x-queue-master-locator",
                    "x-queue-leader-locator", "x-delivery-limit")


def resolve_queue(core: BrokerState, ch: Channel, name: str, shortcut: bool = True) -> Queue:
    """The named queue, or the channel's last declared one for "" (ERR-04 texts); a declare has
    no shortcut (QUEUE-03: a passive declare of "" is 404 "no queue ''")."""
    vhost = core.connections[ch.conn].vhost
    if not name and shortcut:
        if ch.last_queue is None or not core.rules.queue_shortcut():
            raise soft(ReplyCode.NOT_FOUND, "no previously declared queue")
        name = ch.last_queue
    queue = core.find_queue(vhost, name)
    if queue is None or not cluster.known(core, ch.conn, queue):  # metadata lag: unknown on this node yet
        raise soft(ReplyCode.NOT_FOUND, texts.no_queue(name, vhost))
    if queue.exclusive_owner is not None and queue.exclusive_owner != ch.conn and core.rules.exclusive_guarded():
        raise soft(ReplyCode.RESOURCE_LOCKED, texts.locked(name, vhost))
    return queue


def _vhost(core: BrokerState, ch: Channel) -> VHost:
    return core.vhosts[core.connections[ch.conn].vhost]


def _reply(ch: Channel, nowait: bool, method: Any, answers_nowait: bool = False) -> list[Effect]:
    return [] if nowait and not answers_nowait else [Send(ch.conn, ch.number, method)]


def _exchange(v: VHost, name: str) -> Exchange:
    exchange = v.exchanges.get(name)
    if exchange is None:
        raise soft(ReplyCode.NOT_FOUND, texts.no_exchange(name, v.name))
    return exchange


# -- exchanges -----------------------------------------------------------------------------
def exchange_declare(core: BrokerState, meta: Meta, ch: Channel, m: ExchangeDeclare,
                     props: BasicProperties | None, body: bytes) -> list[Effect]:
    m = m._replace(exchange=core.rules.stripped_name(m.exchange))
    v = _vhost(core, ch)
    if m.exchange == "":
        raise soft(ReplyCode.ACCESS_REFUSED, DEFAULT_EXCHANGE_REFUSED)
    existing = v.exchanges.get(m.exchange)
    if m.passive:
        permissions.check_any(core, ch, "exchange", m.exchange)  # ACC-02: 4.3.1+
        if existing is None:
            raise soft(ReplyCode.NOT_FOUND, texts.no_exchange(m.exchange, v.name))
        return _reply(ch, m.nowait, ExchangeDeclareOk(), core.rules.answers_nowait())
    if m.exchange.startswith("amq.") and existing is None:
        raise soft(ReplyCode.ACCESS_REFUSED, f"exchange name '{m.exchange}' contains reserved prefix 'amq.*'")
    permissions.check(core, ch, "configure", "exchange", m.exchange)
    if m.exchange_type not in EXCHANGE_TYPES:  # DCL-02, before the lookup of an existing one
        raise core.rules.unknown_exchange_type(m.exchange_type)
    if existing is not None:
        what = texts.x(m.exchange, v.name)
        for arg, received, current in (("type", m.exchange_type, existing.kind),
                                       ("durable", m.durable, existing.durable),
                                       ("auto_delete", m.auto_delete, existing.auto_delete),
                                       ("internal", m.internal, existing.internal)):
            if received != current and core.rules.compared_exchange_flags():
                raise soft(ReplyCode.PRECONDITION_FAILED, texts.inequivalent(arg, what, received, current))
        for arg in core.rules.compared_exchange_arguments():  # EXCH-03: alternate-exchange only
            got, have = m.arguments.get(arg), existing.arguments.get(arg)
            if not rabbitmq_equivalent(have, got):
                raise soft(ReplyCode.PRECONDITION_FAILED, texts.inequivalent_arg(arg, what, got, have))
        return _reply(ch, m.nowait, ExchangeDeclareOk(), core.rules.answers_nowait())
    if isinstance(alternate := m.arguments.get("alternate-exchange"), str):  # ACC-02: a new exchange's AE
        permissions.check(core, ch, "read", "exchange", m.exchange)
        permissions.check(core, ch, "write", "exchange", alternate)
    v.exchanges[m.exchange] = Exchange(m.exchange, m.exchange_type, m.durable, m.auto_delete,
                                       m.internal, dict(m.arguments))
    return _reply(ch, m.nowait, ExchangeDeclareOk(), core.rules.answers_nowait())


def exchange_delete(core: BrokerState, meta: Meta, ch: Channel, m: ExchangeDelete,
                    props: BasicProperties | None, body: bytes) -> list[Effect]:
    m = m._replace(exchange=core.rules.stripped_name(m.exchange))
    v = _vhost(core, ch)
    if m.exchange == "" or m.exchange.startswith("amq."):
        raise soft(ReplyCode.ACCESS_REFUSED, DEFAULT_EXCHANGE_REFUSED if m.exchange == ""
                   else f"deletion of system {texts.x(m.exchange, v.name)} not allowed")
    permissions.check(core, ch, "configure", "exchange", m.exchange)
    exchange = v.exchanges.get(m.exchange)
    if exchange is None:
        return _reply(ch, m.nowait, ExchangeDeleteOk())  # deleting a missing exchange is a no-op
    if m.if_unused and core.rules.exchange_in_use(len(exchange.bindings)):
        raise soft(ReplyCode.PRECONDITION_FAILED, f"{texts.x(m.exchange, v.name)} in use")
    del v.exchanges[m.exchange]
    for other in list(v.exchanges.values()):
        before = len(other.bindings)
        other.bindings = [b for b in other.bindings if not (b.is_exchange and b.destination == m.exchange)]
        if len(other.bindings) != before:
            maybe_auto_delete_exchange(core, v, other)
    return _reply(ch, m.nowait, ExchangeDeleteOk(), core.rules.answers_nowait())


def _bind(v: VHost, source: str, binding: Binding) -> None:
    exchange = v.exchanges[source]
    if exchange.kind == "headers" and (refused := x_match_error(binding.arguments)):
        raise soft(ReplyCode.PRECONDITION_FAILED, refused)  # ROUTE-08: validate_binding
    if all(b.key() != binding.key() for b in exchange.bindings):
        exchange.bindings.append(binding)


def _unbind(core: BrokerState, v: VHost, source: str, binding: Binding, conn: int) -> None:
    """EXCH-10: an unbind of a binding that does not exist (or whose exchange or queue does not)
    changes nothing and checks nothing; one that exists checks the queue's exclusivity (QUEUE-05)."""
    exchange = v.exchanges.get(source)
    if exchange is None or all(b.key() != binding.key() for b in exchange.bindings):
        return
    queue = None if binding.is_exchange else v.queues.get(binding.destination)
    if queue is not None and queue.exclusive_owner is not None and queue.exclusive_owner != conn:
        raise soft(ReplyCode.RESOURCE_LOCKED, texts.locked(queue.name, v.name))
    exchange.bindings = [b for b in exchange.bindings if b.key() != binding.key()]
    maybe_auto_delete_exchange(core, v, exchange)


def _check_exchange_binding(v: VHost, source: str, destination: str) -> None:
    for name in (source, destination):
        if name == "":
            raise soft(ReplyCode.ACCESS_REFUSED, DEFAULT_EXCHANGE_REFUSED)
        _exchange(v, name)


def exchange_bind(core: BrokerState, meta: Meta, ch: Channel, m: ExchangeBind,
                  props: BasicProperties | None, body: bytes) -> list[Effect]:
    m = m._replace(source=core.rules.stripped_name(m.source), destination=core.rules.stripped_name(m.destination))
    v = _vhost(core, ch)
    _check_exchange_binding(v, m.source, m.destination)
    permissions.check(core, ch, "write", "exchange", m.destination)
    permissions.check(core, ch, "read", "exchange", m.source)
    _bind(v, m.source, Binding(m.destination, True, m.routing_key, dict(m.arguments)))
    return _reply(ch, m.nowait, ExchangeBindOk(), core.rules.answers_nowait())


def exchange_unbind(core: BrokerState, meta: Meta, ch: Channel, m: ExchangeUnbind,
                    props: BasicProperties | None, body: bytes) -> list[Effect]:
    m = m._replace(source=core.rules.stripped_name(m.source), destination=core.rules.stripped_name(m.destination))
    v = _vhost(core, ch)
    if "" in (m.source, m.destination):
        raise soft(ReplyCode.ACCESS_REFUSED, DEFAULT_EXCHANGE_REFUSED)
    permissions.check(core, ch, "write", "exchange", m.destination)
    permissions.check(core, ch, "read", "exchange", m.source)
    _unbind(core, v, m.source, Binding(m.destination, True, m.routing_key, dict(m.arguments)), ch.conn)
    return _reply(ch, m.nowait, ExchangeUnbindOk(), core.rules.answers_nowait())


MAX_PRIORITY = "x-max-priority"
QUEUE_VERSION = "x-queue-version"


# -- queues --------------------------------------------------------------------------------
def _queue_kind(v: VHost, m: QueueDeclare) -> str:
    kind = m.arguments.get("x-queue-type", CLASSIC)
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if kind not in (CLASSIC, QUORUM, STREAM):
        raise soft(ReplyCode.PRECONDITION_FAILED,
                   f"invalid arg 'x-queue-type' for {texts.q(m.queue, v.name)}: unsupported queue type '{kind}'")
    if kind == STREAM:
        streams.check_declare(m, v.name)
    if kind == QUORUM:
        for flag, label in ((not m.durable, "non-durable"), (m.exclusive, "exclusive"),
                            (m.auto_delete, "auto-delete")):
            if flag:
                raise soft(ReplyCode.PRECONDITION_FAILED,
                           f"invalid property '{label}' for {texts.q(m.queue, v.name)}")
    return str(kind)


def _check_equivalent(core: BrokerState, v: VHost, queue: Queue, m: QueueDeclare, conn: int) -> None:
    what = texts.q(queue.name, v.name)
    # DCL-01: the exclusive owner first, then the other fields and the arguments (406)
    if core.rules.exclusive_locked(queue.exclusive_owner, conn, m.exclusive):
        raise soft(ReplyCode.RESOURCE_LOCKED, texts.locked(queue.name, v.name))
    for arg, received, current in (("durable", m.durable and not m.exclusive, queue.durable),
                                   ("exclusive", m.exclusive, queue.exclusive_owner is not None),
                                   ("auto_delete", m.auto_delete, queue.auto_delete)):
        if received != current:
            raise soft(ReplyCode.PRECONDITION_FAILED, texts.inequivalent(arg, what, received, current))
    for arg in EQUIVALENCE_ARGS:  # QUEUE-02
        got: Any = m.arguments.get(arg)
        have: Any = queue.arguments.get(arg)
        if arg == "x-queue-type":
            if {got, have} <= {None, CLASSIC}:  # classic equals absent (assert_field_equivalence)
                continue
            if core.config.timeout_mode != "legacy":  # 3.13+ keep the queue's type: both sides are named
                got, have = got or CLASSIC, queue.kind
        if not rabbitmq_equivalent(have, got):
            raise soft(ReplyCode.PRECONDITION_FAILED, texts.inequivalent_arg(arg, what, got, have))


def queue_declare(core: BrokerState, meta: Meta, ch: Channel, m: QueueDeclare,
                  props: BasicProperties | None, body: bytes) -> list[Effect]:
    m = m._replace(queue=core.rules.stripped_name(m.queue))
    v = _vhost(core, ch)
    name = m.queue
    if m.passive:
        if name:
            permissions.check_any(core, ch, "queue", name)  # ACC-02: 4.3.1+
        queue = resolve_queue(core, ch, name, shortcut=False)
    else:
        if not name:  # QUEUE-04: "amq.gen-" and 16 octets in URL-safe base64 (rabbit_guid)
            seed = f"{meta.now_ms}.{ch.conn}.{core.next_id()}".encode()
            name = "amq.gen-" + base64.urlsafe_b64encode(hashlib.md5(seed).digest()).decode().rstrip("=")
        elif name.startswith("amq."):
            raise soft(ReplyCode.ACCESS_REFUSED,
                       f"queue name '{name}' contains reserved prefix 'amq.*'")
        permissions.check(core, ch, "configure", "queue", name)
        queue = v.queues.get(name)  # type: ignore[assignment]
        if queue is not None:
            _check_equivalent(core, v, queue, m, ch.conn)
        else:
            kind = _queue_kind(v, m._replace(queue=name))
            if (expires := m.arguments.get("x-expires")) is not None and core.rules.expires_checked():  # QUEUE-07
                check_expires("x-expires", texts.q(name, v.name), expires, core.rules.expires_maximum())
            if (ttl := m.arguments.get(MESSAGE_TTL)) is not None and kind != STREAM and core.rules.message_ttl_checked():
                check_message_ttl(MESSAGE_TTL, texts.q(name, v.name), ttl)  # TTL-02 (streams refuse it whole)
            if kind != STREAM and core.rules.dead_letter_args_checked():
                check_dead_letter_args(m.arguments, texts.q(name, v.name))  # DLX-03
            if kind != STREAM and core.rules.length_args_checked():
                limits.check_arguments(m.arguments, texts.q(name, v.name), core.rules.length_maximum())  # LEN-01
            if isinstance(dlx := m.arguments.get("x-dead-letter-exchange"), str):  # ACC-02: a new queue's DLX
                permissions.check(core, ch, "read", "queue", name)
                permissions.check(core, ch, "write", "exchange", dlx)
            timeouts.validate_argument(core, name, v.name, kind, m.arguments.get(timeouts.ARG))
            version = m.arguments.get(QUEUE_VERSION)  # DCL-03 (live 4.3.6); legacy mode: 3.x accepts 1
            if kind == CLASSIC and version not in (None, 2) and core.config.timeout_mode != "legacy":
                raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{QUEUE_VERSION}' for "
                           f"{texts.q(name, v.name)}: \"unsupported queue version '{version}'\"")
            if (top := m.arguments.get(MAX_PRIORITY)) is not None:  # PRI-01, PRI-02 (live 3.10.8, 4.3.6)
                if kind == QUORUM:
                    raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{MAX_PRIORITY}' for "
                               f"{texts.q(name, v.name)} of queue type rabbit_{kind}_queue")
                check_non_negative_int(MAX_PRIORITY, texts.q(name, v.name), top, MAX_SUPPORTED_PRIORITY)
            queue = Queue(name, v.name, kind, m.durable and not m.exclusive, ch.conn if m.exclusive else None,
                          m.auto_delete, dict(m.arguments))
            v.queues[name] = queue
            cluster.place(core, ch.conn, queue)
    cluster.ensure_available(core, queue)  # CLU-04
    ch.last_queue = queue.name
    ready = streams.message_count(queue) if queue.kind == STREAM else queue.ready_count()
    reply = _reply(ch, m.nowait, QueueDeclareOk(queue.name, ready, declared_consumer_count(core, queue)), core.rules.answers_nowait())
    return [*lease.touch(core, meta, queue), *reply]  # QUEUE-08: a declaration renews the lease


def queue_bind(core: BrokerState, meta: Meta, ch: Channel, m: QueueBind,
               props: BasicProperties | None, body: bytes) -> list[Effect]:
    m = m._replace(queue=core.rules.stripped_name(m.queue), exchange=core.rules.stripped_name(m.exchange))
    v = _vhost(core, ch)
    queue = resolve_queue(core, ch, m.queue)
    if m.exchange == "":
        raise soft(ReplyCode.ACCESS_REFUSED, DEFAULT_EXCHANGE_REFUSED)
    exchange = _exchange(v, m.exchange)
    permissions.check(core, ch, "write", "queue", queue.name)
    permissions.check(core, ch, "read", "exchange", m.exchange)
    permissions.check_topic(core, ch, "read", m.exchange, exchange.kind, m.routing_key)  # ACC-05
    routing_key = m.routing_key if (m.routing_key or m.queue) else queue.name
    _bind(v, m.exchange, Binding(queue.name, False, routing_key, dict(m.arguments)))
    return _reply(ch, m.nowait, QueueBindOk(), core.rules.answers_nowait())


def queue_unbind(core: BrokerState, meta: Meta, ch: Channel, m: QueueUnbind,
                 props: BasicProperties | None, body: bytes) -> list[Effect]:
    m = m._replace(queue=core.rules.stripped_name(m.queue), exchange=core.rules.stripped_name(m.exchange))
    v = _vhost(core, ch)
    name = m.queue or resolve_queue(core, ch, "").name  # "": the channel's last queue, as bind
    if m.exchange == "":
        raise soft(ReplyCode.ACCESS_REFUSED, DEFAULT_EXCHANGE_REFUSED)
    permissions.check(core, ch, "write", "queue", name)
    permissions.check(core, ch, "read", "exchange", m.exchange)
    if (source := v.exchanges.get(m.exchange)) is not None:
        permissions.check_topic(core, ch, "read", m.exchange, source.kind, m.routing_key)  # ACC-05
    _unbind(core, v, m.exchange, Binding(name, False, m.routing_key, dict(m.arguments)), ch.conn)
    return [Send(ch.conn, ch.number, QueueUnbindOk())]


def queue_purge(core: BrokerState, meta: Meta, ch: Channel, m: QueuePurge,
                props: BasicProperties | None, body: bytes) -> list[Effect]:
    queue = resolve_queue(core, ch, m.queue)
    permissions.check(core, ch, "read", "queue", queue.name)
    cluster.ensure_available(core, queue)  # CLU-04
    if queue.kind == STREAM:
        raise streams.refused(queue, "queue.purge")
    durability.forget_all(core, queue.ready_messages())
    return _reply(ch, m.nowait, QueuePurgeOk(core.rules.purged_count(queue.purge(), queue.checked_out)), core.rules.answers_nowait())


def queue_delete(core: BrokerState, meta: Meta, ch: Channel, m: QueueDelete,
                 props: BasicProperties | None, body: bytes) -> list[Effect]:
    m = m._replace(queue=core.rules.stripped_name(m.queue))
    v = _vhost(core, ch)
    name = m.queue or ch.last_queue or ""
    if name:
        permissions.check(core, ch, "configure", "queue", name)  # before the lookup, as rabbit_channel
    queue = v.queues.get(name)
    if queue is None:
        return _reply(ch, m.nowait, QueueDeleteOk(0))  # deleting a missing queue is a no-op
    if queue.exclusive_owner is not None and queue.exclusive_owner != ch.conn and core.rules.exclusive_guarded():
        raise soft(ReplyCode.RESOURCE_LOCKED, texts.locked(name, v.name))
    if m.if_unused and queue.consumers:
        raise soft(ReplyCode.PRECONDITION_FAILED, f"{texts.q(name, v.name)} in use")
    if m.if_empty and queue.ready_count():
        raise soft(ReplyCode.PRECONDITION_FAILED, f"{texts.q(name, v.name)} not empty")
    count = queue.ready_count()
    effects = delete_queue(core, meta, queue)
    return [*_reply(ch, m.nowait, QueueDeleteOk(count)), *effects]


def declared_consumer_count(core: BrokerState, queue: Queue) -> int:
    """queue.declare-ok's consumer_count. A quorum queue counts its consumer records, as
    rabbit_fifo:query_stat/1 (live 4.0.5 and 4.3.6): the registered consumers (with single
    active consumer only the active one), a cancelled consumer until its deliveries are settled,
    and one record per unsettled basic.get delivery. A classic queue: registered consumers.
    A stream: none (rabbit_stream_queue:stat/1, live 4.3.6)."""
    if queue.kind == STREAM:
        return 0
    if queue.kind != QUORUM or queue.arguments.get("x-single-active-consumer") is True:
        return queue.declared_consumer_count()
    cancelled: set[tuple[int, int, str]] = set()
    gets = 0
    for conn in core.connections.values():
        if conn.vhost != queue.vhost:
            continue
        for ch in conn.channels.values():
            for u in ch.unacked.values():
                if u.queue != queue.name or u.timed_out or u.orphaned:
                    continue
                if u.consumer_tag is None:
                    gets += 1
                elif u.consumer_tag not in ch.consumers:
                    cancelled.add((conn.id, ch.number, u.consumer_tag))
    return len(queue.consumers) + len(cancelled) + gets
