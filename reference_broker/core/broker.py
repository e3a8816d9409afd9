"""BrokerCore: the pure broker (rabbit_fifo's shape: apply(meta, command) -> effects).

Rules:
- `apply(meta, conn, channel, method, properties, body)` handles one channel command and
  returns effects; time arrives in `meta`; no I/O, clock, randomness or logging here.
- Handlers raise `AmqpError`; soft errors close the channel, hard errors the connection
  (ERR-02), with the failing method's class/method ids unless the error carries its own.
- After `channel.close` was sent, only close/close-ok are processed (ERR-03).
- A channel or connection that goes requeues its unacked deliveries (RQ-03); pending
  confirms die with it silently (PC-13).
- Confirms collected while applying a batch of commands go out at `flush()`, coalesced by
  RabbitMQ's rule (PC-04).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from codec import (
    AmqpError,
    BasicCancel,
    BasicDeliver,
    BasicProperties,
    ChannelClose,
    ChannelCloseOk,
    ChannelOpen,
    ChannelOpenOk,
    Method,
    ReplyCode,
)
from reference_broker import faults
from reference_broker.config import BrokerConfig
from reference_broker.core import batch, durability
from reference_broker.core.effects import CloseConnection, Effect, Send, StartTimer
from reference_broker.core.state import (
    QUORUM,
    Channel,
    Connection,
    Consumer,
    Exchange,
    Message,
    Queue,
    Unacked,
    VHost,
)

Handler = Callable[["BrokerCore", "Meta", Channel, Any, BasicProperties | None, bytes], list[Effect]]
HANDLERS: dict[type, Handler] = {}
TIMER_HANDLERS: dict[str, Callable[[BrokerCore, Meta, tuple[object, ...]], list[Effect]]] = {}
DISPATCH_BATCH = 512
DEFAULT_EXCHANGES = (("", "direct"), ("amq.direct", "direct"), ("amq.fanout", "fanout"),
                     ("amq.topic", "topic"), ("amq.headers", "headers"), ("amq.match", "headers"))


@dataclass(frozen=True, slots=True)
class Meta:
    """What the core may know about the outside world: the time (monotonic ms)."""

    now_ms: int


def handles(*method_types: type) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for t in method_types:
            HANDLERS[t] = fn
        return fn

    return register


class _Final(Exception):
    """An AmqpError whose class/method ids are final (0/0 where RabbitMQ sends none)."""

    def __init__(self, error: AmqpError) -> None:
        super().__init__(str(error))
        self.error = error


def soft(code: ReplyCode, text: str) -> AmqpError:
    return AmqpError(code, text, scope="channel")


def hard(code: ReplyCode, text: str) -> AmqpError:
    return AmqpError(code, text, scope="connection")


class BrokerCore:
    """All broker state and the rules that change it."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.vhosts: dict[str, VHost] = {}
        self.connections: dict[int, Connection] = {}
        self.policies: dict[str, dict[str, dict[str, Any]]] = {}  # vhost -> name -> policy
        self.policy_version = 0
        self.faults = faults.check([*config.faults, *faults.from_environment()])
        self.alarm = False  # memory alarm raised
        self.published = False  # a publish since the last flush
        self.counter = 0  # server-named queues and consumer tags
        # durability.py: the journal for the store (None: nothing is stored, no data_dir)
        self.journal: list[durability.StoreOp] | None = [] if config.data_dir else None
        self.journal_pos = 0  # ops journalled since the start
        self.stored_pos = 0  # ops the store has made durable
        self.store_seq = 0  # the last store id given to a message
        self.defs_dirty = False  # durable definitions may have changed since the last flush
        self.awaiting_store: dict[tuple[int, int], Channel] = {}  # channels with confirms/commit-ok held
        for name in config.vhosts:
            self.add_vhost(name)

    def fault(self, name: str) -> bool:
        """Is this named fault switched on (reference_broker.faults; issue 6)?"""
        return name in self.faults

    def add_vhost(self, name: str) -> VHost:
        vhost = self.vhosts.setdefault(name, VHost(name))
        for ex_name, kind in DEFAULT_EXCHANGES:
            vhost.exchanges.setdefault(ex_name, Exchange(ex_name, kind))
        return vhost

    def next_id(self) -> int:
        self.counter += 1
        return self.counter

    # -- connections -------------------------------------------------------------------
    def connection_opened(self, conn_id: int, vhost: str, user: str, client_properties: dict[str, Any],
                          channel_max: int, name: str = "") -> None:
        caps = client_properties.get("capabilities")
        cancel_notify = isinstance(caps, dict) and caps.get("consumer_cancel_notify") is True
        self.connections[conn_id] = Connection(conn_id, vhost, user, cancel_notify, channel_max,
                                               client_properties, name=name)

    def connection_closed(self, meta: Meta, conn_id: int) -> list[Effect]:
        """The connection is gone: release its channels, delete its exclusive queues (RQ-03)."""
        conn = self.connections.get(conn_id)
        if conn is None:
            return []
        effects: list[Effect] = []
        for ch in list(conn.channels.values()):
            ch.closing = True  # nothing more is delivered to it while the rest is released
        for ch in list(conn.channels.values()):
            effects += self.release_channel(meta, ch)
        vhost = self.vhosts[conn.vhost]
        for queue in [q for q in vhost.queues.values() if q.exclusive_owner == conn_id]:
            effects += self.delete_queue(meta, queue)
        del self.connections[conn_id]
        return [e for e in effects if not (isinstance(e, Send) and e.conn == conn_id)]

    # -- commands ----------------------------------------------------------------------
    def apply(self, meta: Meta, conn_id: int, number: int, method: Method,
              properties: BasicProperties | None = None, body: bytes = b"") -> list[Effect]:
        conn = self.connections.get(conn_id)
        if conn is None:
            return []
        ch = conn.channels.get(number)
        try:
            if ch is not None and ch.closing:
                return self._closing_channel(conn, ch, method)
            if isinstance(method, ChannelOpen):
                return self._open_channel(meta, conn, number, ch)
            if ch is None:
                raise hard(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'")
            handler = HANDLERS.get(type(method))
            if handler is None:
                raise hard(ReplyCode.COMMAND_INVALID, "unimplemented method")
            if method.CLASS_ID in (40, 50) and self.journal is not None:
                self.defs_dirty = True  # exchange.* and queue.* may change durable definitions
            return handler(self, meta, ch, method, properties, body)
        except _Final as final:
            return self.fail(meta, conn, ch, final.error)
        except AmqpError as err:
            if not (err.class_id or err.method_id):
                err.class_id, err.method_id = method.CLASS_ID, method.METHOD_ID
            return self.fail(meta, conn, ch, err)

    def fail(self, meta: Meta, conn: Connection, ch: Channel | None, err: AmqpError) -> list[Effect]:
        if err.scope == "channel" and ch is not None and not self.fault("soft_errors_close_connection"):
            effects: list[Effect] = [Send(conn.id, ch.number, ChannelClose(
                err.code, err.reply_text, err.class_id, err.method_id))]
            effects += self.release_channel(meta, ch)
            ch.closing = True
            conn.channels[ch.number] = ch
            return effects
        effects = [CloseConnection(conn.id, err.code, err.reply_text, err.class_id, err.method_id)]
        return effects + self.connection_closed(meta, conn.id)

    def _open_channel(self, meta: Meta, conn: Connection, number: int, ch: Channel | None) -> list[Effect]:
        if ch is not None:
            raise hard(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen")
        if conn.channel_max and len(conn.channels) >= conn.channel_max:
            # RabbitMQ counts open channels (not numbers) and sends ids 0/0 (checked live on 3.10.8)
            err = hard(ReplyCode.NOT_ALLOWED, f"number of channels opened ({len(conn.channels)}) has "
                       f"reached the negotiated channel_max ({conn.channel_max})")
            err.class_id = err.method_id = 0
            raise _Final(err)
        ch = conn.channels[number] = Channel(conn.id, number)
        from reference_broker.core import timeouts

        return [Send(conn.id, number, ChannelOpenOk()), *timeouts.open_channel(self, meta, ch)]

    def _closing_channel(self, conn: Connection, ch: Channel, method: Method) -> list[Effect]:
        """ERR-03: after the broker sent channel.close only close and close-ok matter."""
        if isinstance(method, ChannelCloseOk):
            del conn.channels[ch.number]
        elif isinstance(method, ChannelClose):
            return [Send(conn.id, ch.number, ChannelCloseOk())]
        return []

    def close_channel(self, meta: Meta, ch: Channel) -> list[Effect]:
        """Client channel.close: release and answer close-ok."""
        effects = self.release_channel(meta, ch)
        self.connections[ch.conn].channels.pop(ch.number, None)
        return [*effects, Send(ch.conn, ch.number, ChannelCloseOk())]

    def release_channel(self, meta: Meta, ch: Channel) -> list[Effect]:
        """Cancel the channel's consumers and requeue its unacked deliveries (RQ-03)."""
        touched: dict[tuple[str, str], Queue] = {}
        for consumer in list(ch.consumers.values()):
            queue = self.find_queue(self.connections[ch.conn].vhost, consumer.queue)
            if queue is not None:
                queue.remove_consumer(consumer)
                touched[(queue.vhost, queue.name)] = queue
        ch.consumers.clear()
        vhost = self.connections[ch.conn].vhost
        returned: list[Effect] = []
        for unacked in [*ch.unacked.values(), *ch.tx_held.values()]:
            queue = self.find_queue(vhost, unacked.queue)
            if queue is not None and unacked.deadline is not None:
                queue.deadlines.pop((ch.conn, ch.number, unacked.tag), None)
            if queue is not None and not unacked.timed_out:
                if not self.fault("no_requeue_on_channel_close"):
                    returned += self.return_to_queue(meta, queue, unacked.message, failed=True)
                queue.checked_out -= 1
                touched[(queue.vhost, queue.name)] = queue
        ch.unacked.clear()
        ch.tx_held.clear()
        ch.confirms_ready.clear()
        ch.nacks_ready.clear()
        ch.confirms_waiting.clear()
        ch.commit_waiting = 0
        ch.tx_publishes.clear()
        ch.tx_settles.clear()
        effects: list[Effect] = returned
        for queue in touched.values():
            effects += self.after_consumer_change(meta, queue)
        return effects

    # -- queues ------------------------------------------------------------------------
    def find_queue(self, vhost: str, name: str) -> Queue | None:
        v = self.vhosts.get(vhost)
        return v.queues.get(name) if v else None

    def return_to_queue(self, meta: Meta, queue: Queue, message: Message, failed: bool) -> list[Effect]:
        """A delivered message goes back (RQ-01/02); `failed` counts toward the quorum
        delivery limit in 4.3 (RQ-06: reject and channel loss do, nack and timeout don't).
        Past the limit (default 20, -1 disables) it is dead-lettered or dropped."""
        if queue.kind == QUORUM and failed:
            message.delivery_count += 1
            limit = self.delivery_limit(queue)
            if limit is not None and message.delivery_count > limit:
                return self.dead_letter(meta, queue, message, "delivery_limit")
        if (self.fault("requeue_to_tail") and queue.kind != QUORUM) or (
                self.fault("quorum_returns_not_first") and queue.kind == QUORUM):
            queue.enqueue(message)  # a new position at the tail
            return []
        queue.return_message(message)
        return []

    def delivery_limit(self, queue: Queue) -> int | None:
        """RQ-06: x-delivery-limit or policy delivery-limit (the lower), else 20 in 4.x;
        none in legacy (3.x) mode; a negative value disables it."""
        values = [v for v in (queue.arguments.get("x-delivery-limit"),
                              self.policy_definition(queue).get("delivery-limit"))
                  if isinstance(v, int) and not isinstance(v, bool)]
        if values:
            limit = min(values)
        elif self.config.timeout_mode == "legacy":
            return None
        else:
            limit = 20
        return None if limit < 0 else limit

    def after_consumer_change(self, meta: Meta, queue: Queue) -> list[Effect]:
        if queue.auto_delete and queue.had_consumer and not queue.consumers:
            return self.delete_queue(meta, queue)
        return self.dispatch(meta, queue)

    def delete_queue(self, meta: Meta, queue: Queue) -> list[Effect]:
        """Remove a queue: its bindings go, its consumers are cancelled (CCN-02)."""
        vhost = self.vhosts[queue.vhost]
        vhost.queues.pop(queue.name, None)
        durability.drop_queue(self, queue)
        effects: list[Effect] = []
        for exchange in list(vhost.exchanges.values()):
            before = len(exchange.bindings)
            exchange.bindings = [b for b in exchange.bindings
                                 if b.is_exchange or b.destination != queue.name]
            if before != len(exchange.bindings):
                effects += self.maybe_auto_delete_exchange(vhost, exchange)
        for consumer in list(queue.consumers.values()):
            queue.remove_consumer(consumer)
            conn = self.connections.get(consumer.conn)
            ch = conn.channels.get(consumer.channel) if conn else None
            if ch is None or conn is None:
                continue
            ch.consumers.pop(consumer.tag, None)
            notify = (conn.cancel_notify or self.fault("cancel_without_capability")) and not self.fault(
                "no_cancel_on_queue_delete")
            if notify and not ch.closing:
                effects.append(Send(conn.id, ch.number, BasicCancel(consumer.tag, nowait=True)))
        queue.purge()
        return effects

    def maybe_auto_delete_exchange(self, vhost: VHost, exchange: Exchange) -> list[Effect]:
        if exchange.auto_delete and not exchange.bindings and exchange.name in vhost.exchanges:
            del vhost.exchanges[exchange.name]
            for other in vhost.exchanges.values():
                other.bindings = [b for b in other.bindings
                                  if not (b.is_exchange and b.destination == exchange.name)]
        return []

    # -- delivery ----------------------------------------------------------------------
    def dispatch(self, meta: Meta, queue: Queue) -> list[Effect]:
        """Deliver ready messages to consumers with capacity, round-robin by priority.
        At most DISPATCH_BATCH per call: a timer effect continues, so one unlimited
        consumer cannot hold the event loop (or memory) with a whole queue."""
        effects: list[Effect] = []
        budget = DISPATCH_BATCH
        while queue.consumers and queue.ready_count():
            consumer = self._next_consumer(queue)
            if consumer is None:
                break
            if budget == 0:
                effects.append(StartTimer(("dispatch", queue.vhost, queue.name), meta.now_ms))
                break
            budget -= 1
            message = queue.pop()
            if message is None:
                break
            if message.expires_at is not None and message.expires_at <= meta.now_ms:
                effects += self.dead_letter(meta, queue, message, "expired")
                continue
            effects += self.deliver(meta, consumer, queue, message)
        return effects

    def _next_consumer(self, queue: Queue) -> Consumer | None:
        best: Consumer | None = None
        best_key = ""
        if queue.arguments.get("x-single-active-consumer") is True and queue.consumers:
            first = next(iter(queue.consumers))  # the earliest registered consumer is the active one
            candidates: Any = (first,)
        else:
            candidates = queue.rotation
        for key in candidates:
            consumer = queue.consumers[key]
            conn = self.connections.get(consumer.conn)
            ch = conn.channels.get(consumer.channel) if conn else None
            slack = 1 if self.fault("prefetch_off_by_one") else 0
            if ch is None or ch.closing or not consumer.has_capacity(slack) or conn is None or not conn.writable:
                continue
            if consumer.no_ack and consumer.prefetch and self.fault("no_ack_obeys_prefetch") and (
                    consumer.unacked >= consumer.prefetch):
                continue
            if not ch.global_capacity():
                continue  # QOS-08: a reached global limit pauses no-ack consumers too
            if best is None or consumer.priority > best.priority:
                best, best_key = consumer, key
        if best is not None:
            queue.rotation.remove(best_key)
            queue.rotation.append(best_key)
        return best

    def deliver(self, meta: Meta, consumer: Consumer, queue: Queue, message: Message) -> list[Effect]:
        ch = self.connections[consumer.conn].channels[consumer.channel]
        tag = ch.next_tag
        ch.next_tag += 1
        redelivered, properties = self.checkout(queue, message)
        method = BasicDeliver(consumer.tag, tag, redelivered, message.exchange, message.routing_key)
        effects: list[Effect] = [Send(ch.conn, ch.number, method, properties, message.body)]
        if consumer.no_ack:
            durability.forget(self, message)  # delivered without ack: out of the broker's custody
        if consumer.no_ack and self.fault("no_ack_obeys_prefetch"):
            consumer.unacked += 1  # counted and never released
        if not consumer.no_ack:
            unacked = Unacked(tag, queue.name, message, consumer.tag, meta.now_ms)
            ch.unacked[tag] = unacked
            consumer.unacked += 1
            queue.checked_out += 1
            if consumer.timeout_ms is not None:  # 4.3 quorum consumer timeout (TMO-4.3-2)
                from reference_broker.core import timeouts

                effects += timeouts.arm(self, meta, queue, ch, unacked, consumer.timeout_ms)
        return effects

    def checkout(self, queue: Queue, message: Message) -> tuple[bool, BasicProperties]:
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
        if self.fault("redelivered_not_set"):
            redelivered = False
        return redelivered, properties

    def dead_letter(self, meta: Meta, queue: Queue, message: Message, reason: str) -> list[Effect]:
        """Republish to the queue's dead-letter exchange, or drop when it has none."""
        durability.forget(self, message)
        dlx = self.queue_setting(queue, "dead-letter-exchange")
        if dlx is None:
            return []
        from reference_broker.core.publish import route_and_enqueue

        rk = self.queue_setting(queue, "dead-letter-routing-key") or message.routing_key
        headers = dict(message.properties.headers or {})
        death = {"count": 1, "reason": reason, "queue": queue.name, "time": meta.now_ms // 1000,
                 "exchange": message.exchange, "routing-keys": [message.routing_key]}
        headers["x-death"] = [death, *list(headers.get("x-death") or [])]
        headers.setdefault("x-first-death-reason", reason)
        headers.setdefault("x-first-death-queue", queue.name)
        headers.setdefault("x-first-death-exchange", message.exchange)
        props = message.properties._replace(headers=headers, expiration=None)
        effects, _ok = route_and_enqueue(self, meta, queue.vhost, str(dlx), str(rk), props, message.body)
        return effects

    def queue_setting(self, queue: Queue, key: str) -> Any:
        """x-<key> queue argument, else the matching policy's <key> (issue 5 adds policies)."""
        value = queue.arguments.get(f"x-{key}")
        if value is None:
            value = self.policy_definition(queue).get(key)
        return value

    def set_policies(self, vhost: str, policies: dict[str, dict[str, Any]]) -> None:
        self.policies[vhost] = policies
        self.policy_version += 1
        self.defs_dirty = self.journal is not None

    def policy_definition(self, queue: Queue) -> dict[str, Any]:
        """The definition of the highest-priority policy matching the queue, cached per
        queue until the policies change (it is read on every publish)."""
        if queue.policy_cache is not None and queue.policy_cache[0] == self.policy_version:
            return queue.policy_cache[1]
        best: dict[str, Any] | None = None
        for policy in self.policies.get(queue.vhost, {}).values():
            if policy.get("apply-to", "all") not in ("all", "queues", f"{queue.kind}_queues"):
                continue
            try:
                if not re.search(policy.get("pattern", ""), queue.name):
                    continue
            except re.error:
                continue  # refused at PUT; a bad pattern in a config never matches
            if best is None or policy.get("priority", 0) > best.get("priority", 0):
                best = policy
        definition = dict(best.get("definition", {})) if best else {}
        queue.policy_cache = (self.policy_version, definition)
        return definition

    # -- confirms ----------------------------------------------------------------------
    def memory_check(self) -> list[Effect]:
        return batch.memory_check(self)

    def block_connection(self, conn: Connection, on: bool) -> list[Effect]:
        return batch.block_connection(self, conn, on)

    def flush(self) -> list[Effect]:
        """What goes out after a batch of commands: coalesced confirms, the memory alarm."""
        return batch.flush(self)

    def stored(self, position: int) -> list[Effect]:
        """The store made the journal durable up to `position`: release waiting confirms
        (sent at the next flush) and tx.commit-oks."""
        return durability.stored(self, position)

    def set_writable(self, meta: Meta, conn_id: int, writable: bool) -> list[Effect]:
        """The transport's write buffer crossed a water mark: pause or resume deliveries
        to this connection (backpressure), then dispatch what became possible."""
        conn = self.connections.get(conn_id)
        if conn is None or conn.writable == writable:
            return []
        conn.writable = writable
        if not writable:
            return []
        effects: list[Effect] = []
        for ch in conn.channels.values():
            for name in {c.queue for c in ch.consumers.values()}:
                queue = self.find_queue(conn.vhost, name)
                if queue is not None:
                    effects += self.dispatch(meta, queue)
        return effects

    def timer_fired(self, meta: Meta, key: tuple[object, ...]) -> list[Effect]:
        """A timer of a `StartTimer` effect fired; the key's first element names its kind."""
        if key and key[0] == "dispatch":
            queue = self.find_queue(str(key[1]), str(key[2]))
            return self.dispatch(meta, queue) if queue is not None else []
        handler = TIMER_HANDLERS.get(str(key[0])) if key else None
        return handler(self, meta, key) if handler is not None else []
