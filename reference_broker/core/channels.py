"""Connections and channels: open, close, errors, and what goes when a channel goes.

Rules:
- Soft errors close the channel, hard errors the connection (ERR-02); after the broker sent
  channel.close only close/close-ok are processed (ERR-03).
- A channel or connection that goes cancels its consumers and requeues its unacked
  deliveries (RQ-03); pending confirms die with it silently (PC-13); a connection that goes
  deletes its exclusive queues.
- channel.open beyond the negotiated channel_max is a 530 with ids 0/0, counting open
  channels (checked live on RabbitMQ 3.10.8).
"""

from __future__ import annotations

from typing import Any

from codec import (
    AmqpError,
    BasicProperties,
    ChannelClose,
    ChannelCloseOk,
    ChannelFlow,
    ChannelFlowOk,
    ChannelOpenOk,
    Method,
    ReplyCode,
)
from reference_broker.core import timeouts
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.delivery import after_consumer_change, delete_queue, return_to_queue
from reference_broker.core.effects import CloseConnection, Effect, Send
from reference_broker.core.errors import Final, hard
from reference_broker.core.state import Channel, Connection, Queue


def connection_opened(core: BrokerState, conn_id: int, vhost: str, user: str, client_properties: dict[str, Any],
                      channel_max: int, name: str = "") -> None:
    caps = client_properties.get("capabilities")
    cancel_notify = isinstance(caps, dict) and caps.get("consumer_cancel_notify") is True
    core.connections[conn_id] = Connection(conn_id, vhost, user, cancel_notify, channel_max,
                                           client_properties, name=name)


def connection_closed(core: BrokerState, meta: Meta, conn_id: int) -> list[Effect]:
    """The connection is gone: release its channels, delete its exclusive queues (RQ-03)."""
    conn = core.connections.get(conn_id)
    if conn is None:
        return []
    effects: list[Effect] = []
    for ch in list(conn.channels.values()):
        ch.closing = True  # nothing more is delivered to it while the rest is released
    for ch in list(conn.channels.values()):
        effects += release_channel(core, meta, ch)
    vhost = core.vhosts[conn.vhost]
    for queue in [q for q in vhost.queues.values() if q.exclusive_owner == conn_id]:
        effects += delete_queue(core, meta, queue)
    del core.connections[conn_id]
    return [e for e in effects if not (isinstance(e, Send) and e.conn == conn_id)]


def fail(core: BrokerState, meta: Meta, conn: Connection, ch: Channel | None, err: AmqpError) -> list[Effect]:
    """Answer an error: channel.close for a soft one, connection.close for a hard one (ERR-02)."""
    if core.rules.error_scope(err.scope) == "channel" and ch is not None:
        effects: list[Effect] = [Send(conn.id, ch.number, ChannelClose(
            err.code, err.reply_text, err.class_id, err.method_id))]
        effects += release_channel(core, meta, ch)
        ch.closing = True
        conn.channels[ch.number] = ch
        return effects
    effects = [CloseConnection(conn.id, err.code, err.reply_text, err.class_id, err.method_id)]
    return effects + connection_closed(core, meta, conn.id)


def open_channel(core: BrokerState, meta: Meta, conn: Connection, number: int, ch: Channel | None) -> list[Effect]:
    if ch is not None:
        raise hard(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen")
    if core.rules.channel_number_refused(number):
        raise hard(ReplyCode.CHANNEL_ERROR, f"channel number {number} out of range")
    if conn.channel_max and len(conn.channels) >= conn.channel_max:
        # RabbitMQ counts open channels (not numbers) and sends ids 0/0 (checked live on 3.10.8)
        err = hard(ReplyCode.NOT_ALLOWED, f"number of channels opened ({len(conn.channels)}) has "
                   f"reached the negotiated channel_max ({conn.channel_max})")
        err.class_id = err.method_id = 0
        raise Final(err)
    ch = conn.channels[number] = Channel(conn.id, number)
    return [Send(conn.id, number, ChannelOpenOk()), *timeouts.open_channel(core, meta, ch)]


def closing_channel(conn: Connection, ch: Channel, method: Method) -> list[Effect]:
    """ERR-03: after the broker sent channel.close only close and close-ok matter."""
    if isinstance(method, ChannelCloseOk):
        del conn.channels[ch.number]
    elif isinstance(method, ChannelClose):
        return [Send(conn.id, ch.number, ChannelCloseOk())]
    return []


def release_channel(core: BrokerState, meta: Meta, ch: Channel) -> list[Effect]:
    """Cancel the channel's consumers and requeue its unacked deliveries (RQ-03)."""
    touched: dict[tuple[str, str], Queue] = {}
    for consumer in list(ch.consumers.values()):
        queue = core.find_queue(core.connections[ch.conn].vhost, consumer.queue)
        if queue is not None:
            queue.remove_consumer(consumer)
            touched[(queue.vhost, queue.name)] = queue
    ch.consumers.clear()
    vhost = core.connections[ch.conn].vhost
    held = [*ch.unacked.values(), *ch.tx_held.values()]
    for unacked in held:
        queue = core.queue_of(vhost, unacked)
        if queue is not None and unacked.deadline is not None:
            queue.deadlines.pop((ch.conn, ch.number, unacked.tag), None)
        if queue is not None and not unacked.timed_out:
            queue.checked_out -= 1
            touched[(queue.vhost, queue.name)] = queue
    returned: list[Effect] = []
    for unacked in core.rules.requeued_on_release(held):
        queue = core.queue_of(vhost, unacked)
        if queue is not None and not unacked.timed_out:
            returned += return_to_queue(core, meta, queue, unacked.message, failed=True)
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
        effects += after_consumer_change(core, meta, queue)
    return effects


def close_channel(core: BrokerState, meta: Meta, ch: Channel) -> list[Effect]:
    """Client channel.close: release and answer close-ok."""
    effects = release_channel(core, meta, ch)
    core.connections[ch.conn].channels.pop(ch.number, None)
    return [*effects, Send(ch.conn, ch.number, ChannelCloseOk())]


def channel_close(core: BrokerState, meta: Meta, ch: Channel, m: ChannelClose,
                  props: BasicProperties | None, body: bytes) -> list[Effect]:
    return close_channel(core, meta, ch)


def channel_flow(core: BrokerState, meta: Meta, ch: Channel, m: ChannelFlow,
                 props: BasicProperties | None, body: bytes) -> list[Effect]:
    if not m.active:
        raise hard(ReplyCode.NOT_IMPLEMENTED, "active=false")  # QOS-11
    return [Send(ch.conn, ch.number, ChannelFlowOk(True))]
