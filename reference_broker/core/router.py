"""The router: the broker core's entry points, over the state, with an explicit handler table.

Rules:
- `BrokerCore` is the `BrokerState` (broker_state.py) plus the entry points the transport
  calls: `apply(meta, conn, channel, method, properties, body)` handles one channel command
  and returns effects (rabbit_fifo's shape); time arrives in `meta`; no I/O, clock,
  environment, randomness or logging here.
- `HANDLERS` maps each method type to the concern module's handler, built here and nowhere
  else; `TIMERS` does the same for the kinds of `StartTimer` keys. Handlers raise
  `AmqpError`: a soft error closes the channel, a hard one the connection (ERR-02), with the
  failing method's class/method ids unless the error carries its own.
- The rules are chosen once here, from the configured faults (reference_broker/faults.py):
  an unknown fault name is a `ValueError`.
- Confirms collected while applying a batch of commands go out at `flush()`, after the
  journal for the store, coalesced by RabbitMQ's rule (PC-04).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from codec import (
    AmqpError,
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicGet,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicRecover,
    BasicRecoverAsync,
    BasicReject,
    ChannelClose,
    ChannelCloseOk,
    ChannelFlow,
    ChannelOpen,
    ConfirmSelect,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    Method,
    QueueBind,
    QueueDeclare,
    QueueDelete,
    QueuePurge,
    QueueUnbind,
    ReplyCode,
    TxCommit,
    TxRollback,
    TxSelect,
)
from reference_broker import faults
from reference_broker.config import BrokerConfig
from reference_broker.core import (
    alarms,
    channels,
    cluster,
    confirms,
    consumers,
    delivery,
    disconnected,
    durability,
    expiry,
    flow,
    nodes,
    publish,
    resources,
    settings,
    settlement,
    transactions,
)
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.effects import Effect, Persist
from reference_broker.core.errors import Final, hard
from reference_broker.core.state import Queue

Handler = Callable[[BrokerState, Meta, Any, Any, BasicProperties | None, bytes], list[Effect]]
TimerHandler = Callable[[BrokerState, Meta, tuple[object, ...]], list[Effect]]

HANDLERS: dict[type[Method], Handler] = {
    # exchanges and queues (resources.py)
    ExchangeDeclare: resources.exchange_declare,
    ExchangeDelete: resources.exchange_delete,
    ExchangeBind: resources.exchange_bind,
    ExchangeUnbind: resources.exchange_unbind,
    QueueDeclare: resources.queue_declare,
    QueueBind: resources.queue_bind,
    QueueUnbind: resources.queue_unbind,
    QueuePurge: resources.queue_purge,
    QueueDelete: resources.queue_delete,
    # channels (channels.py)
    ChannelClose: channels.channel_close,
    ChannelFlow: channels.channel_flow,
    # consumers and prefetch (consumers.py)
    BasicConsume: consumers.basic_consume,
    BasicCancel: consumers.basic_cancel,
    BasicCancelOk: consumers.basic_cancel_ok,
    BasicGet: consumers.basic_get,
    BasicQos: consumers.basic_qos,
    # settlement (settlement.py)
    BasicAck: settlement.basic_ack,
    BasicNack: settlement.basic_nack,
    BasicReject: settlement.basic_reject,
    BasicRecover: settlement.basic_recover,
    BasicRecoverAsync: settlement.basic_recover,
    # publishing, confirms and transactions (publish.py, transactions.py)
    BasicPublish: publish.basic_publish,
    ConfirmSelect: transactions.confirm_select,
    TxSelect: transactions.tx_select,
    TxCommit: transactions.tx_commit,
    TxRollback: transactions.tx_rollback,
}


def _continue_dispatch(core: BrokerState, meta: Meta, key: tuple[object, ...]) -> list[Effect]:
    queue = core.find_queue(str(key[1]), str(key[2]))
    return delivery.dispatch(core, meta, queue) if queue is not None else []


TIMERS: dict[str, TimerHandler] = {
    "dispatch": _continue_dispatch,  # delivery.DISPATCH_BATCH reached
    "qtimeout": expiry.on_queue_timer,  # 4.3 quorum consumer timeouts
    "tick": expiry.on_tick,  # legacy channel tick
    "lease": expiry.on_lease_timer,  # x-expires (QUEUE-08)
    "ttl": expiry.on_ttl_timer,  # a head's message TTL (TTL-03)
    disconnected.TIMER: disconnected.on_timer,  # a crashed node's deliveries (TMO-4.3-6.c)
}


class BrokerCore(BrokerState):
    """The broker state with the entry points of the transport (server.py, management.py)."""

    def __init__(self, config: BrokerConfig) -> None:
        names = faults.check(list(config.faults))
        super().__init__(config, faults.rules_with(names), names)

    # -- commands ----------------------------------------------------------------------
    def apply(self, meta: Meta, conn_id: int, number: int, method: Method,
              properties: BasicProperties | None = None, body: bytes = b"") -> list[Effect]:
        conn = self.connections.get(conn_id)
        if conn is None:
            return []
        if self.cluster is not None:
            self.cluster.now_ms = meta.now_ms  # core/cluster.py's metadata lag
        ch = conn.channels.get(number)
        try:
            if ch is not None and ch.closing and (isinstance(method, ChannelClose | ChannelCloseOk)
                                                  or self.rules.closing_drops(method)):
                return channels.closing_channel(conn, ch, method)
            if isinstance(method, ChannelOpen):
                return channels.open_channel(self, meta, conn, number, ch)
            if ch is None:
                raise hard(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'")
            handler = HANDLERS.get(type(method))
            if handler is None:
                raise hard(ReplyCode.COMMAND_INVALID, "unimplemented method")
            if not self.rules.answered(method):
                return []
            if method.CLASS_ID in (ExchangeDeclare.CLASS_ID, QueueDeclare.CLASS_ID) and self.journal is not None:
                self.defs_dirty = True  # exchange.* and queue.* may change durable definitions
            return handler(self, meta, ch, method, properties, body)
        except Final as final:
            return channels.fail(self, meta, conn, ch, final.error)
        except AmqpError as err:
            if not (err.class_id or err.method_id):
                err.class_id, err.method_id = method.CLASS_ID, method.METHOD_ID
            return channels.fail(self, meta, conn, ch, err)

    def timer_fired(self, meta: Meta, key: tuple[object, ...]) -> list[Effect]:
        """A timer of a `StartTimer` effect fired; the key's first element names its kind."""
        handler = TIMERS.get(str(key[0])) if key else None
        return handler(self, meta, key) if handler is not None else []

    def flush(self) -> list[Effect]:
        """What goes out after a batch of commands: the journal for the store (one `Persist`),
        the memory alarm after publishes, then the coalesced confirms (PC-04)."""
        effects: list[Effect] = []
        ops, position = durability.take(self)
        if ops:
            effects.append(Persist(tuple(ops), position))
        if self.published:
            self.published = False
            effects += alarms.memory_check(self)
        return effects + confirms.ready_confirms(self)

    # -- the transport's other events --------------------------------------------------
    def connection_opened(self, conn_id: int, vhost: str, user: str, client_properties: dict[str, Any],
                          channel_max: int, name: str = "") -> None:
        channels.connection_opened(self, conn_id, vhost, user, client_properties, channel_max, name)

    def connection_closed(self, meta: Meta, conn_id: int) -> list[Effect]:
        suspended = disconnected.suspend(self, meta, conn_id)  # a crashed node's: before its channels go
        cluster.connection_detached(self, conn_id)
        return suspended + channels.connection_closed(self, meta, conn_id)

    # -- a cluster's nodes (core/cluster.py, core/nodes.py) ------------------------------------
    def connection_attached(self, conn_id: int, node: int) -> None:
        """The transport accepted `conn_id` on `node`'s listener."""
        cluster.connection_attached(self, conn_id, node)

    def node_crashing(self, node: int) -> None:
        """The node is killed: the transport will lose its connections without a close."""
        disconnected.node_crashing(self, node)

    def node_down(self, meta: Meta, node: int) -> list[Effect]:
        """The node stopped; the transport has ended the connections it had."""
        return nodes.node_down(self, meta, node)

    def node_up(self, meta: Meta, node: int) -> list[Effect]:
        return disconnected.node_back(self, meta, node) + nodes.node_up(self, meta, node)

    def stored(self, position: int) -> list[Effect]:
        """The store made the journal durable up to `position`: release waiting confirms
        (sent at the next flush) and tx.commit-oks."""
        return durability.stored(self, position)

    def set_writable(self, meta: Meta, conn_id: int, writable: bool) -> list[Effect]:
        return flow.set_writable(self, meta, conn_id, writable)

    def memory_check(self) -> list[Effect]:
        return alarms.memory_check(self)

    # -- resource alarms (core/alarms.py) --------------------------------------------------------
    def set_alarm(self, resource: str, on: bool) -> list[Effect]:
        return alarms.set_alarm(self, resource, on)

    def publish_received(self, conn_id: int) -> list[Effect]:
        """A content frame arrived on `conn_id` (the engine asks, then stops reading if blocked)."""
        return alarms.publish_received(self, conn_id)

    def is_blocked(self, conn_id: int) -> bool:
        return alarms.is_blocked(self, conn_id)

    # -- management (policies, queues) ---------------------------------------------------------
    def set_policies(self, vhost: str, policies: dict[str, dict[str, Any]], operator: bool = False) -> None:
        settings.set_policies(self, vhost, policies, operator)

    def policy_definition(self, queue: Queue) -> dict[str, Any]:
        return settings.policy_definition(self, queue)

    def dispatch(self, meta: Meta, queue: Queue) -> list[Effect]:
        return delivery.dispatch(self, meta, queue)

    def delete_queue(self, meta: Meta, queue: Queue) -> list[Effect]:
        return delivery.delete_queue(self, meta, queue)
