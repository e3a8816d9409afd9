"""Publishing: routing, publisher confirms and mandatory returns.

Responsibility: basic.publish into the model's queues, the confirm sequence of a channel,
and the checks of the broker's basic.ack/basic.nack/basic.return against it.
Rules:
- PC-01: confirm.select (again or not) puts the channel in confirm mode, select-ok replies.
- PC-02: seqnos start at 1 with the first publish after select; publishes before select are
  not counted; selecting again does not reset the counter.
- PC-03: tx.select on a confirm channel is channel.close 406 (90/10); confirm.select on a tx
  channel is 406 (85/10).
- PC-04/05/10: each seqno is settled exactly once, by a lone ack/nack or a coalesced
  multiple=true one whose named seqno is pending; order across seqnos is free, so the model
  keeps the set that must still be settled (`unsettled`).
- PC-06: an unroutable mandatory publish is returned (312, exchange, routing key) before it
  is confirmed; returns on one channel come in publish order.
- TX-02, TX-06, TX-05, PC-11: a publish on a transactional channel is routed when published and
  held; tx.commit enqueues the transaction's publishes in publish order and sends the basic.return
  of each unroutable mandatory one before tx.commit-ok; a queue refusing one of them (reject-publish
  overflow) fails the commit with channel.close 406 "partial tx completion" (90/20), the others
  enqueued; tx.rollback, and the channel's end, drop them; tx.commit or tx.rollback on a channel
  that is not transactional is channel.close 406 (90/20, 90/30).
- PC-07: a message routed to several queues is confirmed once. PC-08: a queue refusing it
  (reject-publish overflow) turns its confirm into a nack. PC-09: a queue deleted while a
  confirm is pending still means ack.
"""

from __future__ import annotations

from dataclasses import dataclass

from codec.constants import METHOD_IDS, ReplyCode
from conformance.model.channel import ChannelKey, ExpectedReturn, HeldPublish, PendingConfirm, confirm_tags
from conformance.model.outcomes import OK, ChannelClosed, Confirm, Outcome, Return
from conformance.model.settlement import close_channel
from conformance.model.state import BrokerState, Violation

CONFIRM_SELECT = METHOD_IDS["confirm.select"]
TX_SELECT = METHOD_IDS["tx.select"]
TX_COMMIT = METHOD_IDS["tx.commit"]
TX_ROLLBACK = METHOD_IDS["tx.rollback"]


@dataclass(frozen=True, slots=True)
class Published:
    """What the model expects of one basic.publish."""

    seqno: int | None  # PC-02: the confirm seqno, None outside confirm mode
    queues: tuple[str, ...]  # where it was routed
    refused: tuple[str, ...]  # queues that refused it (PC-08)
    returned: bool  # PC-06: a basic.return will come


def confirm_select(state: BrokerState, key: ChannelKey) -> Outcome:
    channel = state.channel(key)
    if channel.tx:
        close_channel(state, key)
        return ChannelClosed(ReplyCode.PRECONDITION_FAILED, *CONFIRM_SELECT)
    channel.confirm = True  # PC-01: idempotent, the counter is kept (PC-02)
    return OK


def tx_select(state: BrokerState, key: ChannelKey) -> Outcome:
    channel = state.channel(key)
    if channel.confirm:
        close_channel(state, key)
        return ChannelClosed(ReplyCode.PRECONDITION_FAILED, *TX_SELECT)
    channel.tx = True
    return OK


def publish(state: BrokerState, key: ChannelKey, exchange: str, routing_key: str, body: bytes,
            mandatory: bool = False) -> Published:
    channel = state.channel(key)
    targets = state.route(exchange, routing_key)
    if channel.tx:  # TX-02: held until tx.commit, routed now (TX-06)
        channel.held.append(HeldPublish(exchange, routing_key, body, mandatory, tuple(targets)))
        return Published(None, tuple(targets), (), False)
    refused = tuple(q for q in targets if not state.queues[q].enqueue(body))
    returned = mandatory and not targets
    seqno = None
    if channel.confirm:
        seqno = channel.publish_seqno
        channel.publish_seqno += 1
        channel.pending[seqno] = PendingConfirm(seqno, nack=bool(refused), needs_return=returned)
    if returned:
        channel.returns.append(ExpectedReturn(seqno, exchange, routing_key, body))
    return Published(seqno, tuple(targets), refused, returned)


def tx_commit(state: BrokerState, key: ChannelKey) -> Outcome:
    """tx.commit: the outcome it must have; the returns it owes are expected from now (TX-05). A
    failed commit's channel.close comes after those returns: the caller closes the model's channel
    once it has seen them (`closed_by_broker`)."""
    channel = state.channel(key)
    if not channel.tx:
        return ChannelClosed(ReplyCode.PRECONDITION_FAILED, *TX_COMMIT)  # PC-11: not transactional
    failed = False
    for held in channel.held:  # TX-02: in publish order, to the queues routed to when published
        failed |= not all([state.queues[q].enqueue(held.body) for q in held.targets])  # PC-11: partial
        if held.mandatory and not held.targets:
            channel.returns.append(ExpectedReturn(None, held.exchange, held.routing_key, held.body))
    channel.held.clear()
    return ChannelClosed(ReplyCode.PRECONDITION_FAILED, *TX_COMMIT) if failed else OK


def tx_rollback(state: BrokerState, key: ChannelKey) -> Outcome:
    """tx.rollback: the transaction's publishes are dropped, with no return (TX-02, TX-05)."""
    channel = state.channel(key)
    if not channel.tx:
        return ChannelClosed(ReplyCode.PRECONDITION_FAILED, *TX_ROLLBACK)  # PC-11
    channel.held.clear()
    return OK


def holds_publishes_for(state: BrokerState, queue: str) -> bool:
    """Whether an open transaction holds a publish routed to `queue`."""
    return any(queue in held.targets for channel in state.channels.values() for held in channel.held)


def on_return(state: BrokerState, key: ChannelKey, observed: Return) -> None:
    """Check a broker basic.return against the oldest expected one (PC-06)."""
    channel = state.channel(key)
    if not channel.returns and any(h.mandatory and not h.targets for h in channel.held):
        raise Violation(f"{observed} on channel {key!r} before tx.commit: an unroutable mandatory publish in a "
                        "transaction is returned at the commit, before tx.commit-ok (TX-05)")
    if not channel.returns:
        raise Violation(f"unexpected {observed} on channel {key!r}: no mandatory unroutable publish is "
                        "waiting for a return (PC-06)")
    expected = channel.returns.popleft()
    want = Return(ReplyCode.NO_ROUTE, expected.exchange, expected.routing_key, expected.body)
    if observed != want:
        raise Violation(f"{observed} on channel {key!r}; expected {want} (PC-06)")
    if expected.seqno is not None and expected.seqno in channel.pending:
        channel.pending[expected.seqno].returned = True


def on_confirm(state: BrokerState, key: ChannelKey, observed: Confirm) -> list[int]:
    """Check and apply a broker basic.ack/nack; returns the seqnos it settled."""
    channel = state.channel(key)
    kind = "basic.nack" if observed.nack else "basic.ack"
    seqnos = confirm_tags(channel.pending, observed.delivery_tag, observed.multiple)
    if seqnos is None:
        again = observed.delivery_tag in channel.settled
        why = "settles it a second time" if again else "names no published seqno"
        raise Violation(f"{kind} delivery_tag={observed.delivery_tag} multiple={observed.multiple} on channel "
                        f"{key!r} {why} (PC-02/PC-04/PC-05); pending: {sorted(channel.pending)}")
    for seqno in seqnos:
        pending = channel.pending[seqno]
        if pending.needs_return and not pending.returned:
            raise Violation(f"{kind} for seqno {seqno} came before its basic.return (PC-06)")
        if pending.nack != observed.nack:
            want = "basic.nack (a queue refused it, PC-08)" if pending.nack else "basic.ack (PC-08: nack only when a queue refused it)"
            raise Violation(f"seqno {seqno} settled by {kind} (multiple={observed.multiple}); expected {want}")
    for seqno in seqnos:
        del channel.pending[seqno]
        channel.settled.add(seqno)
    return seqnos


def unsettled(state: BrokerState, key: ChannelKey) -> frozenset[int]:
    """The seqnos the broker must still settle exactly once on this channel (PC-05)."""
    channel = state.channels.get(key)
    return frozenset(channel.pending) if channel is not None else frozenset()
