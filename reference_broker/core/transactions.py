"""confirm.select and the tx class: PC-01/PC-03 mode switches, PC-11 commit and rollback,
ACK-08 acknowledgements deferred inside a transaction."""

from __future__ import annotations

from codec import (
    AmqpError,
    BasicProperties,
    ConfirmSelect,
    ConfirmSelectOk,
    ReplyCode,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    TxSelect,
    TxSelectOk,
)
from reference_broker.core import durability
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.channels import fail
from reference_broker.core.effects import Effect, Send
from reference_broker.core.errors import soft
from reference_broker.core.publish import publish_now
from reference_broker.core.settlement import settle
from reference_broker.core.state import Channel


def confirm_select(core: BrokerState, meta: Meta, ch: Channel, m: ConfirmSelect,
                   props: BasicProperties | None, body: bytes) -> list[Effect]:
    if ch.tx:
        raise soft(ReplyCode.PRECONDITION_FAILED, "cannot switch from tx to confirm mode")  # PC-03
    ch.confirm = True  # PC-01: selecting again keeps the counter
    return [] if m.nowait else [Send(ch.conn, ch.number, ConfirmSelectOk())]


def tx_select(core: BrokerState, meta: Meta, ch: Channel, m: TxSelect,
              props: BasicProperties | None, body: bytes) -> list[Effect]:
    if core.rules.tx_select_refused(ch):
        raise soft(ReplyCode.PRECONDITION_FAILED, "cannot switch from confirm to tx mode")  # PC-03
    ch.tx = True
    return [Send(ch.conn, ch.number, TxSelectOk())]


def tx_commit(core: BrokerState, meta: Meta, ch: Channel, m: TxCommit,
              props: BasicProperties | None, body: bytes) -> list[Effect]:
    if not ch.tx:
        raise soft(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")  # PC-11
    effects: list[Effect] = []
    puts_before = core.store_seq
    publishes, ch.tx_publishes = ch.tx_publishes, []
    for p in publishes:
        effects += publish_now(core, meta, ch, p.exchange, p.routing_key, p.mandatory, p.properties, p.body)
    settles, ch.tx_settles = ch.tx_settles, []
    held, ch.tx_held = ch.tx_held, {}
    for kind, tag, _multiple, requeue in settles:
        u = held[tag]
        effects += settle(core, meta, ch, [u], None if kind == "ack" else requeue, kind == "reject")
    if ch.tx_rejected:  # PC-11: what the queues accepted stays; the commit fails
        ch.tx_rejected = False
        err = AmqpError(ReplyCode.PRECONDITION_FAILED, "partial tx completion", 90, 20, scope="channel")
        return effects + fail(core, meta, core.connections[ch.conn], ch, err)
    if durability.defer_commit(core, ch, puts_before):  # commit-ok once the messages are on disk
        return effects
    return [*effects, Send(ch.conn, ch.number, TxCommitOk())]


def tx_rollback(core: BrokerState, meta: Meta, ch: Channel, m: TxRollback,
                props: BasicProperties | None, body: bytes) -> list[Effect]:
    if not ch.tx:
        raise soft(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")  # PC-11
    ch.tx_publishes.clear()
    ch.tx_settles.clear()
    for tag, u in sorted(ch.tx_held.items()):  # ACK-08: deferred acks become unacked again
        ch.unacked[tag] = u
    ch.unacked = dict(sorted(ch.unacked.items()))
    ch.tx_held = {}
    return [Send(ch.conn, ch.number, TxRollbackOk())]
