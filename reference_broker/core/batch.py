"""What goes out after a batch of commands: coalesced confirms and the memory alarm.

Rules: confirms collected while applying a batch are sent at the flush, coalesced as
rabbit_channel:coalesce_and_send does (PC-04): a lone confirm is multiple=false; otherwise
everything below the cutoff (the lowest nacked seqno in the flush, or the lowest confirm
still waiting for the store) goes as one multiple=true, the rest singly. The journal for
the store goes out first, as one `Persist` effect (durability.py). Nacks likewise, and
never on a closing channel. Over `memory_high_watermark` ready octets, publishing
connections are blocked (connection.blocked to capable clients, reads paused) until usage
falls under 80 % of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from codec import BasicAck, BasicNack, ConnectionBlocked, ConnectionUnblocked, Method
from reference_broker.core import durability
from reference_broker.core.effects import Effect, PauseReading, Persist, Send
from reference_broker.core.state import Channel, Connection

if TYPE_CHECKING:
    from reference_broker.core.broker import BrokerCore


def memory_check(core: BrokerCore) -> list[Effect]:
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


def block_connection(core: BrokerCore, conn: Connection, on: bool) -> list[Effect]:
    caps = conn.client_properties.get("capabilities")
    effects: list[Effect] = [PauseReading(conn.id, on)]
    if isinstance(caps, dict) and caps.get("connection.blocked"):
        method = ConnectionBlocked("low on memory") if on else ConnectionUnblocked()
        effects.insert(0, Send(conn.id, 0, method))
    return effects


def flush(core: BrokerCore) -> list[Effect]:
    """Send the confirms collected since the last flush, coalesced (PC-04), and raise or
    clear the memory alarm after publishes."""
    effects: list[Effect] = []
    ops, position = durability.take(core)
    if ops:
        effects.append(Persist(tuple(ops), position))
    if core.published:
        core.published = False
        effects += memory_check(core)
    for conn in core.connections.values():
        for ch in conn.channels.values():
            if ch.confirms_ready or ch.nacks_ready:
                effects += _send_confirms(ch, core.fault("confirm_duplicated"), core.fault("multiple_ack_covers_nacked"))
    return effects


def _send_confirms(ch: Channel, duplicate: bool = False, cover_nacked: bool = False) -> list[Effect]:
    acks, nacks = sorted(ch.confirms_ready), sorted(ch.nacks_ready)
    ch.confirms_ready, ch.nacks_ready = [], []
    out: list[Effect] = []
    if len(acks) == 1:
        out.append(Send(ch.conn, ch.number, BasicAck(acks[0], False)))
    elif acks:
        held = [] if cover_nacked else nacks
        if ch.confirms_waiting:  # never cover a seqno still waiting for the store
            held = [*held, ch.confirms_waiting[0][1]]
        out += _coalesce(ch, acks, held, lambda tag, multi: BasicAck(tag, multi))
    if duplicate:  # fault confirm_duplicated
        out += list(out)
    if nacks and not ch.closing:
        out += _coalesce(ch, nacks, acks, lambda tag, multi: BasicNack(tag, multi, True))
    return out


def _coalesce(
    ch: Channel, seqnos: list[int], negative: list[int], make: Callable[[int, bool], Method]
) -> list[Effect]:
    """rabbit_channel:coalesce_and_send: one multiple=true below the cutoff, then singles."""
    cutoff = min([seqnos[-1] + 1, *negative])
    below = [s for s in seqnos if s < cutoff]
    rest = [s for s in seqnos if s >= cutoff]
    out: list[Effect] = []
    if below:
        out.append(Send(ch.conn, ch.number, make(below[-1], True)))
    out += [Send(ch.conn, ch.number, make(s, False)) for s in rest]
    return out
