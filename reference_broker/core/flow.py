"""Flow control: the transport's backpressure (resource alarms are core/alarms.py).

Rules: a connection whose transport write buffer is over its high mark gets no deliveries
until it drains.
"""

from __future__ import annotations

from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.delivery import dispatch
from reference_broker.core.effects import Effect


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
