"""confirm.select and the tx class: PC-01/PC-03 mode switches, PC-11 commit and rollback,
ACK-08 acknowledgements deferred inside a transaction, TX-01..06 (docs/RULES.md): publishes held
until the commit and routed when published, settlements applied at the commit, returns sent by
the commit before its commit-ok."""

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
    if ch.tx and not core.rules.tx_reselect_allowed():  # TX-01: a fault's
        raise soft(ReplyCode.PRECONDITION_FAILED, "channel is already transactional")
    ch.tx = True
    return [Send(ch.conn, ch.number, TxSelectOk())]


def tx_commit(core: BrokerState, meta: Meta, ch: Channel, m: TxCommit,
              props: BasicProperties | None, body: bytes) -> list[Effect]:
    if not ch.tx and core.rules.tx_required():
        raise soft(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")  # PC-11
    effects: list[Effect] = []
    puts_before = core.store_seq
    publishes, ch.tx_publishes = ch.tx_publishes, []
    vhost = core.connections[ch.conn].vhost
    for p in publishes:
        gone = [q for q in p.queues or [] if core.find_queue(vhost, q.name) is not q]
        if gone and core.config.timeout_mode != "legacy":  # TX-06 4.3: the queue record is gone
            # the connection's end requeues the channel's deliveries, settled in the tx or not (TX-04)
            err = AmqpError(ReplyCode.RESOURCE_ERROR, f"failed to deliver message: {{not_found,{{resource,"
                            f'<<"{vhost}">>,queue,<<"{gone[0].name}">>}}}}', 90, 20, scope="connection")
            return effects + fail(core, meta, core.connections[ch.conn], ch, err)
        routed = None if p.queues is None else [q for q in p.queues if all(q is not g for g in gone)]  # 3.x: looked up by name
        effects += publish_now(core, meta, ch, p.exchange, p.routing_key, p.mandatory, p.properties, p.body, routed)
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
    if not ch.tx and core.rules.tx_required():
        raise soft(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")  # PC-11
    effects: list[Effect] = []
    publishes, ch.tx_publishes = ch.tx_publishes, []
    if not core.rules.rollback_discards_publishes():  # TX-02: a fault's
        for p in publishes:
            effects += publish_now(core, meta, ch, p.exchange, p.routing_key, p.mandatory, p.properties, p.body)
    ch.tx_settles.clear()
    held, ch.tx_held = ch.tx_held, {}
    requeued = core.rules.requeued_on_rollback(list(held.values()))  # TX-04: none
    for tag, u in sorted(held.items()):  # ACK-08: deferred acks become unacked again
        if all(u is not r for r in requeued):
            ch.unacked[tag] = u
    ch.unacked = dict(sorted(ch.unacked.items()))
    effects += settle(core, meta, ch, requeued, True, False) if requeued else []
    return [*effects, Send(ch.conn, ch.number, TxRollbackOk())]
