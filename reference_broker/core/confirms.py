"""Publisher confirms as they go out: coalesced at the flush (PC-04).

Rules: confirms collected while applying a batch of commands are sent at the flush,
coalesced as rabbit_channel:coalesce_and_send does: a lone confirm is multiple=false;
otherwise everything below the cutoff (the lowest nacked seqno in the flush, or the lowest
confirm still waiting for the store) goes as one multiple=true, the rest singly. Nacks
likewise, and never on a closing channel.
"""

from __future__ import annotations

from collections.abc import Callable

from codec import BasicAck, BasicNack, Method
from reference_broker.core import cluster
from reference_broker.core.broker_state import BrokerState
from reference_broker.core.effects import Effect, Send
from reference_broker.core.state import Channel


def ready_confirms(core: BrokerState) -> list[Effect]:
    """The confirms and nacks collected since the last flush, on every channel."""
    effects: list[Effect] = []
    for conn in core.connections.values():
        for ch in conn.channels.values():
            if ch.confirms_ready or ch.nacks_ready:
                effects += send_confirms(core, ch)
    return effects


def send_confirms(core: BrokerState, ch: Channel) -> list[Effect]:
    acks, nacks = sorted(ch.confirms_ready), sorted(ch.nacks_ready)
    ch.confirms_ready, ch.nacks_ready = [], []
    out: list[Effect] = []
    if len(acks) == 1:
        out.append(Send(ch.conn, ch.number, BasicAck(acks[0], False)))
    elif acks:
        held = core.rules.ack_cutoff(nacks)
        if ch.confirms_waiting:  # never cover a seqno still waiting for the store
            held = [*held, ch.confirms_waiting[0][1]]
        held = [*held, *cluster.unconfirmed(core, ch)]  # nor one held for a majority (CLU-07)
        out += _coalesce(ch, acks, held, lambda tag, multi: BasicAck(tag, multi))
    out = core.rules.confirm_effects(out)
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
