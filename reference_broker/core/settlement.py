"""Settling deliveries: basic.ack, basic.nack, basic.reject, basic.recover.

Rules (RULES.md): ACK-03..09 acknowledgements, RQ-01..06 requeue. `collect` checks
everything before anything changes, so an error leaves nothing half-settled (ACK-05);
inside a transaction settlements are deferred to the commit (ACK-08). A late ack of a
delivery a 4.3 timeout already returned is accepted and removes nothing (TMO-4.3-5). On a
stream every settlement, requeue or not, only gives credit back (streams.py).
"""

from __future__ import annotations

from codec import (
    BasicAck,
    BasicNack,
    BasicProperties,
    BasicRecover,
    BasicRecoverAsync,
    BasicRecoverOk,
    BasicReject,
    ReplyCode,
)
from reference_broker.core import durability, timeouts
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.delivery import dead_letter, dispatch, return_to_queue
from reference_broker.core.effects import Effect, Send
from reference_broker.core.errors import hard
from reference_broker.core.state import STREAM, Channel, Queue, Unacked


def collect(core: BrokerState, ch: Channel, tag: int, multiple: bool) -> list[Unacked]:
    """rabbit_channel:collect_acks (ACK-03..06): check everything before changing anything."""
    if multiple and tag == 0:
        return core.rules.ack_all(ch.unacked)
    if tag not in ch.unacked:
        error = core.rules.unknown_tag(tag, multiple)
        if error is not None:
            raise error
        return []
    if multiple:
        return core.rules.multi_ack_scope(ch.unacked, tag)
    return [ch.unacked[tag]]


def settle(core: BrokerState, meta: Meta, ch: Channel, items: list[Unacked], requeue: bool | None,
           failed: bool) -> list[Effect]:
    """Ack (requeue None), requeue, or discard/dead-letter deliveries, then dispatch."""
    vhost = core.connections[ch.conn].vhost
    touched: dict[str, Queue] = {}
    effects: list[Effect] = []
    for u in items:
        ch.unacked.pop(u.tag, None)
        consumer = ch.consumers.get(u.consumer_tag) if u.consumer_tag is not None else None
        if consumer is not None:
            consumer.timed_out.discard(u.tag)  # TMO-4.3-5: settling clears the timeout state
            if not u.timed_out:
                consumer.unacked -= 1
        queue = core.queue_of(vhost, u)
        if queue is None:
            continue  # the queue was deleted (a new one of its name is another queue): settling forgets it
        if u.deadline is not None:
            timeouts.forget(queue, ch.conn, ch.number, u.tag)
        touched[queue.name] = queue
        if u.timed_out:  # already returned by a timeout (TMO-4.3-5)
            if requeue is None:
                core.rules.late_ack(queue, u.message)
            continue
        queue.checked_out -= 1
        if queue.kind == STREAM:
            continue  # the log keeps it: settling only gives the consumer credit back (streams.py)
        if requeue is None:
            durability.forget(core, u.message)
        elif requeue:
            effects += return_to_queue(core, meta, queue, u.message, failed)
        else:
            effects += dead_letter(core, meta, queue, u.message, "rejected")
    for queue in touched.values():
        effects += dispatch(core, meta, queue)
    return effects


def basic_ack(core: BrokerState, meta: Meta, ch: Channel, m: BasicAck,
              props: BasicProperties | None, body: bytes) -> list[Effect]:
    items = collect(core, ch, m.delivery_tag, m.multiple)
    if ch.tx and core.rules.tx_defers_settlements():  # TX-03
        return _defer(ch, items, "ack", False)  # ACK-08
    return settle(core, meta, ch, items, None, False)


def basic_nack(core: BrokerState, meta: Meta, ch: Channel, m: BasicNack,
               props: BasicProperties | None, body: bytes) -> list[Effect]:
    items = collect(core, ch, m.delivery_tag, m.multiple)
    requeue = core.rules.nack_requeue(m.requeue)
    if ch.tx and core.rules.tx_defers_settlements():  # TX-03
        return _defer(ch, items, "nack", requeue)
    return settle(core, meta, ch, items, requeue, False)  # RQ-06 4.3: nack does not count


def basic_reject(core: BrokerState, meta: Meta, ch: Channel, m: BasicReject,
                 props: BasicProperties | None, body: bytes) -> list[Effect]:
    items = collect(core, ch, m.delivery_tag, False)
    if ch.tx and core.rules.tx_defers_settlements():  # TX-03
        return _defer(ch, items, "reject", m.requeue)
    return settle(core, meta, ch, items, m.requeue, True)  # RQ-06 4.3: reject counts


def _defer(ch: Channel, items: list[Unacked], kind: str, requeue: bool) -> list[Effect]:
    for u in items:
        ch.tx_settles.append((kind, u.tag, False, requeue))
        ch.unacked.pop(u.tag, None)
        ch.tx_held[u.tag] = u
    return []


def basic_recover(core: BrokerState, meta: Meta, ch: Channel, m: BasicRecover | BasicRecoverAsync,
                  props: BasicProperties | None, body: bytes) -> list[Effect]:
    if not m.requeue:
        raise hard(ReplyCode.NOT_IMPLEMENTED, "requeue=false")  # ACK-09
    recovered = core.rules.recover_scope(ch)  # TX-04: not the deliveries settled in the open tx
    for u in recovered:
        core.rules.recovered(u.message)
    effects = settle(core, meta, ch, recovered, True, False)
    if isinstance(m, BasicRecover):
        effects.insert(0, Send(ch.conn, ch.number, BasicRecoverOk()))
    return effects
