"""Resource alarms and publisher blocking (ALM-01..05), as rabbit_alarm and rabbit_reader's throttle.

Rules:
- `core.alarms` is the set of resources in alarm ("memory", "disk"). The memory monitor raises
  "memory" when ready octets exceed `memory_high_watermark` and clears it under 80 % of it, on
  those transitions only (vm_memory_monitor); an operator raises and clears either resource
  through `set_alarm` (the management API's extension), as rabbit_alarm:set_alarm/clear_alarm.
- A connection is blocked when a content frame (a publish's header or body) arrives while an
  alarm is in force (rabbit_reader publish_received): the transport stops reading, the frames
  already read after it wait in the engine, and a client that advertised the
  `connection.blocked` capability gets connection.blocked "low on <resources>" once. An empty
  body completes at its header and is routed before the block; a body is held until unblocked.
- When no alarm remains, a blocked connection is unblocked: connection.unblocked (if blocked was
  sent), reads resume and its held frames are processed. A second alarm changes nothing for a
  connection already blocked; the first one cleared while another remains unblocks nothing.
- A blocked connection's heartbeat monitor is paused (rabbit_heartbeat:pause_monitor): silence
  while blocked does not close it; the monitor restarts when reading resumes.
- Connections that do not publish are never blocked: they consume, get and ack as usual.
"""

from __future__ import annotations

from codec import ConnectionBlocked, ConnectionUnblocked
from reference_broker.core.broker_state import BrokerState
from reference_broker.core.effects import Effect, PauseReading, Send
from reference_broker.core.state import Connection
from reference_broker.core.texts import MEMORY, RESOURCES


def set_alarm(core: BrokerState, resource: str, on: bool) -> list[Effect]:
    """Raise or clear one resource's alarm; unblock the blocked connections once none is left."""
    if resource not in RESOURCES:
        raise ValueError(f"no such resource: {resource!r} (memory or disk)")
    before = core.alarms
    core.alarms = before | {resource} if on else before - {resource}
    if core.alarms == before:
        return []
    effects: list[Effect] = []
    if on and core.rules.blocks_every_connection():
        for conn in core.connections.values():
            effects += block(core, conn)
    if not on and core.rules.unblocks(core.alarms):
        for conn in core.connections.values():
            effects += unblock(conn)
    return effects


def publish_received(core: BrokerState, conn_id: int) -> list[Effect]:
    """A content frame arrived on `conn_id`: block it if an alarm is in force."""
    conn = core.connections.get(conn_id)
    if conn is None or not core.rules.publish_blocked(core.alarms):
        return []
    return block(core, conn)


def is_blocked(core: BrokerState, conn_id: int) -> bool:
    conn = core.connections.get(conn_id)
    return conn is not None and conn.blocked


def block(core: BrokerState, conn: Connection) -> list[Effect]:
    if conn.blocked:
        return []
    conn.blocked = True
    effects: list[Effect] = [PauseReading(conn.id, True)]
    reason = core.rules.blocked_notice(core.alarms)
    caps = conn.client_properties.get("capabilities")
    if reason is not None and isinstance(caps, dict) and caps.get("connection.blocked") is True:
        conn.blocked_sent = True
        effects.insert(0, Send(conn.id, 0, ConnectionBlocked(reason)))
    return effects


def unblock(conn: Connection) -> list[Effect]:
    if not conn.blocked:
        return []
    conn.blocked = False
    effects: list[Effect] = [PauseReading(conn.id, False)]
    if conn.blocked_sent:
        conn.blocked_sent = False
        effects.insert(0, Send(conn.id, 0, ConnectionUnblocked()))
    return effects


def memory_check(core: BrokerState) -> list[Effect]:
    """The memory monitor: over `memory_high_watermark` ready octets the memory alarm is raised,
    under 80 % of it cleared (each on its transition only)."""
    used = sum(q.ready_bytes for v in core.vhosts.values() for q in v.queues.values())
    limit = core.config.memory_high_watermark
    if not core.memory_over and used > limit:
        core.memory_over = True
        return set_alarm(core, MEMORY, True)
    if core.memory_over and used <= limit * 0.8:
        core.memory_over = False
        return set_alarm(core, MEMORY, False)
    return []
