"""Flow control: the memory alarm and the transport's backpressure.

Rules: over `memory_high_watermark` ready octets, publishing connections are blocked
(connection.blocked to capable clients, reads paused) until usage falls under 80 % of it;
a new publisher during an alarm is blocked at once (publish.py). A connection whose
transport write buffer is over its high mark gets no deliveries until it drains.
"""

from __future__ import annotations

from codec import ConnectionBlocked, ConnectionUnblocked
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.delivery import dispatch
from reference_broker.core.effects import Effect, PauseReading, Send
from reference_broker.core.state import Connection


def memory_check(core: BrokerState) -> list[Effect]:
    """Memory alarm: over `memory_high_watermark` ready octets, publishing connections
    are blocked (connection.blocked to capable clients, reads paused); under 80 % of it
    they are unblocked."""
    used = sum(q.ready_bytes for v in core.vhosts.values() for q in v.queues.values())
    limit = core.config.memory_high_watermark
    if not core.alarm and used > limit:
        core.alarm = True
        return [
            e
            for conn in core.connections.values()
            if conn.publisher
            for e in block_connection(core, conn, True)
        ]
    if core.alarm and used <= limit * 0.8:
        core.alarm = False
        return [
            e
            for conn in core.connections.values()
            if conn.publisher
            for e in block_connection(core, conn, False)
        ]
    return []


def block_connection(core: BrokerState, conn: Connection, on: bool) -> list[Effect]:
    caps = conn.client_properties.get("capabilities")
    effects: list[Effect] = [PauseReading(conn.id, on)]
    if isinstance(caps, dict) and caps.get("connection.blocked"):
        method = ConnectionBlocked("low on memory") if on else ConnectionUnblocked()
        effects.insert(0, Send(conn.id, 0, method))
    return effects


def set_writable(core: BrokerState, meta: Meta, conn_id: int, writable: bool) -> list[Effect]:
    """The transport's write buffer crossed a water mark: pause or resume deliveries
    to this connection (backpressure), then dispatch what became possible."""
    conn = core.connections.get(conn_id)
    if conn is None or conn.writable == writable:
        return []
    conn.writable = writable
    if not writable:
        return []
    effects: list[Effect] = []
    for ch in conn.channels.values():
        for name in {c.queue for c in ch.consumers.values()}:
            queue = core.find_queue(conn.vhost, name)
            if queue is not None:
                effects += dispatch(core, meta, queue)
    return effects
