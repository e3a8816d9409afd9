"""Transactions over the wire, the settlements: TX-03 (acks, nacks and rejects take effect at
tx.commit) and TX-04 (tx.rollback, a close and basic.recover leave them unapplied; no-ack
deliveries are outside the transaction).

Rules:
- Every message is fetched with basic.get (manual ack) on the transactional channel; what the
  queue holds is its ready count (queue.declare passive, a round trip on the same channel after
  the settlements, so the broker handled them) and a basic.get.
- After a channel or connection is closed, the queue is read from a new connection, waiting
  (bounded, `RETURN_S`) for the requeue: RabbitMQ's classic queue requeues a gone channel's
  deliveries when it sees the channel's process end (RQ-03, `assert_ready_elsewhere`).
- basic.nack is a RabbitMQ extension: its cases are not-claimed on a broker without it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import (
    BasicAck,
    BasicRecover,
    BasicRecoverOk,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    TxSelect,
    TxSelectOk,
)
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.queues import (
    CLASSIC,
    QUORUM,
    RETURN_S,
    Delivery,
    assert_ready_elsewhere,
    assert_redelivered,
    filled,
    get,
    ready,
    require_kind,
    require_nack,
    settle,
)

Connect = Callable[..., RawClient]
NACKS = ["nack", "reject"]
QUEUE_KINDS = [CLASSIC, QUORUM]


def fetched(connect: Connect, names: Names, count: int, target: Target, kind: str = "ack",
            queue_kind: str = CLASSIC) -> tuple[RawClient, int, str, list[Delivery]]:
    """A `queue_kind` queue of m1..m<count>, a transactional channel, and the `count` deliveries
    basic.get took."""
    if kind == "nack":
        require_nack(target.profile)
    require_kind(target.profile, queue_kind)
    client, ch, queue = filled(connect, names, count, queue_kind)
    client.rpc(ch, TxSelect(), TxSelectOk)
    out = []
    for i in range(count):
        got = get(client, ch, queue)
        assert got is not None, f"m{i + 1} is not in the queue: basic.get-empty"
        out.append(got)
    return client, ch, queue, out


def settled_again(client: RawClient, ch: int, reply: TxCommit | TxRollback, rule: str) -> None:
    """tx.commit or tx.rollback after settling deliveries whose earlier settlements a rollback
    forgot: a channel.close here (an unknown tag) means the rollback did not make them unacked again."""
    try:
        client.rpc(ch, reply, TxCommitOk if isinstance(reply, TxCommit) else TxRollbackOk)
    except ChannelClosed as closed:
        raise AssertionError(f"{rule}: after tx.rollback the deliveries whose settlements it rolled back are unacked "
                             f"again and may be settled again; the broker closed the channel: {closed}") from None


def requeued_after_close(connect: Connect, queue: str, want: int, target: Target, rule: str, what: str) -> None:
    """`assert_ready_elsewhere`, its failure naming `rule` and what the close had to bring back."""
    try:
        assert_ready_elsewhere(connect, {queue: want}, target.timeout(RETURN_S))
    except AssertionError as failed:
        raise AssertionError(f"{rule}: {what}, so {want} message(s) are ready after the close; {failed}") from None


def article(kind: str) -> str:
    return f"an {kind}" if kind == "ack" else f"a {kind}"


def close_unspecified(target: Target) -> bool:
    """TX-04's variant: AMQP 0-9-1 does not say what a close or basic.recover does in a transaction."""
    return target.profile.expect("TX-04").startswith("variant:")


def assert_ready(client: RawClient, ch: int, queue: str, want: int, rule: str, when: str) -> None:
    count = ready(client, ch, queue)
    assert count == want, f"{rule}: {when}, the queue holds {want} ready message(s); queue.declare-ok counted {count}"


def assert_empty(client: RawClient, ch: int, queue: str, rule: str, when: str) -> None:
    got = get(client, ch, queue)
    assert got is None, f"{rule}: {when}, nothing is ready; basic.get fetched {got.body!r} (redelivered={got.redelivered})"


# -- TX-03 ------------------------------------------------------------------------------------
@pytest.mark.rules("TX-03")
@pytest.mark.parametrize("queue_kind", QUEUE_KINDS)
@pytest.mark.parametrize("kind", NACKS)
def test_requeue_and_drop_take_effect_at_commit(connect: Connect, names: Names, target: Target, kind: str,
                                                queue_kind: str) -> None:
    """m1 settled requeue=true, m2 requeue=false: neither is back before tx.commit; after it,
    exactly m1 is (redelivered)."""
    client, ch, queue, (m1, m2) = fetched(connect, names, 2, target, kind, queue_kind)
    client.send(ch, settle(kind, m1.tag, requeue=True))
    client.send(ch, settle(kind, m2.tag, requeue=False))
    assert_ready(client, ch, queue, 0, "TX-03", f"before tx.commit of {article(kind)} with requeue=true")
    assert_empty(client, ch, queue, "TX-03", f"before tx.commit of {article(kind)} with requeue=true")
    client.rpc(ch, TxCommit(), TxCommitOk)
    assert_redelivered(get(client, ch, queue), b"m1")
    assert_empty(client, ch, queue, "TX-03", f"after the commit, m1 back and m2 dropped ({kind} requeue=false)")


@pytest.mark.rules("TX-03")
@pytest.mark.parametrize("kind", NACKS)
def test_commit_applies_only_the_settlements_since_a_rollback(connect: Connect, names: Names, target: Target,
                                                             kind: str) -> None:
    """ack m2, ack m1, drop m3; rollback; ack m3, requeue m1, drop m2; commit: only m1 is back."""
    client, ch, queue, (m1, m2, m3) = fetched(connect, names, 3, target, kind)
    for method in [BasicAck(delivery_tag=m2.tag), BasicAck(delivery_tag=m1.tag), settle(kind, m3.tag)]:
        client.send(ch, method)
    client.rpc(ch, TxRollback(), TxRollbackOk)
    for method in [BasicAck(delivery_tag=m3.tag), settle(kind, m1.tag, requeue=True), settle(kind, m2.tag)]:
        client.send(ch, method)
    settled_again(client, ch, TxCommit(), "TX-03")
    assert_redelivered(get(client, ch, queue), b"m1")
    assert_empty(client, ch, queue, "TX-03", f"after committing ack m3, {kind} m1 requeue=true, {kind} m2 "
                 "requeue=false (the settlements before the rollback forgotten)")


@pytest.mark.rules("TX-03")
@pytest.mark.parametrize("order", ["out-of-order", "after-rollback"])
def test_settlements_in_any_order_commit(connect: Connect, names: Names, target: Target, order: str) -> None:
    """Settled from the last tag down (nack m4, m3 requeue=false, ack m2, m1), or acked m3, m2,
    rolled back, then acked m1 with multiple=true, m2 and m3: tx.commit-ok, and nothing comes back
    when the channel closes."""
    client, ch, queue, got = fetched(connect, names, 4 if order == "out-of-order" else 3, target,
                                     "nack" if order == "out-of-order" else "ack")
    tags = [d.tag for d in got]
    if order == "out-of-order":
        steps = [settle("nack", tags[3]), settle("nack", tags[2]), BasicAck(delivery_tag=tags[1]),
                 BasicAck(delivery_tag=tags[0])]
    else:
        client.send(ch, BasicAck(delivery_tag=tags[2]))
        client.send(ch, BasicAck(delivery_tag=tags[1]))
        client.rpc(ch, TxRollback(), TxRollbackOk)
        steps = [BasicAck(delivery_tag=tags[0], multiple=True), BasicAck(delivery_tag=tags[1]),
                 BasicAck(delivery_tag=tags[2])]
    for method in steps:
        client.send(ch, method)
    settled_again(client, ch, TxCommit(), "TX-03")
    client.close_channel(ch)
    requeued_after_close(connect, queue, 0, target, "TX-03", "every delivery was settled and committed")


@pytest.mark.rules("TX-03")
@pytest.mark.parametrize("tag", ["tag-0", "last-tag"])
def test_multiple_ack_is_applied_at_commit(connect: Connect, names: Names, target: Target, tag: str) -> None:
    """Two deliveries acked with multiple=true (delivery-tag 0, or the last tag) and committed:
    none comes back when the channel closes."""
    client, ch, queue, (_m1, m2) = fetched(connect, names, 2, target)
    client.send(ch, BasicAck(delivery_tag=0 if tag == "tag-0" else m2.tag, multiple=True))
    client.rpc(ch, TxCommit(), TxCommitOk)
    client.close_channel(ch)
    requeued_after_close(connect, queue, 0, target, "TX-03", "a committed multiple=true ack settled both deliveries")


@pytest.mark.rules("TX-03")
def test_commit_does_not_requeue_unsettled_deliveries(connect: Connect, names: Names, target: Target) -> None:
    """m1 acked, m2 not, commit: m2 stays unacked (not ready) until the channel closes, then only m2
    comes back."""
    client, ch, queue, (m1, _m2) = fetched(connect, names, 2, target)
    client.send(ch, BasicAck(delivery_tag=m1.tag))
    client.rpc(ch, TxCommit(), TxCommitOk)
    assert_empty(client, ch, queue, "TX-03", "after a commit that acked m1 only (m2 is still unacked)")
    client.close_channel(ch)
    requeued_after_close(connect, queue, 1, target, "TX-03", "m1's ack was committed and m2 stayed unacked")


# -- TX-04 ------------------------------------------------------------------------------------
@pytest.mark.rules("TX-04")
@pytest.mark.parametrize("kind", ["ack", *NACKS])
def test_rollback_requeues_nothing(connect: Connect, names: Names, target: Target, kind: str) -> None:
    """m1 settled (requeue=true for nack and reject), m2 not; tx.rollback: neither is ready; both are
    unacked again (a new ack, rolled back too, then the close brings both back)."""
    client, ch, queue, (m1, _m2) = fetched(connect, names, 2, target, kind)
    client.send(ch, settle(kind, m1.tag, requeue=True))
    client.rpc(ch, TxRollback(), TxRollbackOk)
    assert_ready(client, ch, queue, 0, "TX-04", f"after tx.rollback of {article(kind)} (requeue=true) and an unsettled delivery")
    assert_empty(client, ch, queue, "TX-04", f"after tx.rollback of {article(kind)} (requeue=true) and an unsettled delivery")
    client.send(ch, BasicAck(delivery_tag=m1.tag))  # unacked again: may be settled again
    settled_again(client, ch, TxRollback(), "TX-04")
    if close_unspecified(target):
        return
    client.close_channel(ch)
    requeued_after_close(connect, queue, 2, target, "TX-04", "both deliveries were unacked when the channel closed")


@pytest.mark.rules("TX-04")
@pytest.mark.parametrize("queue_kind", QUEUE_KINDS)
@pytest.mark.parametrize("closing", ["channel", "connection"])
def test_close_requeues_uncommitted_acks_and_unacked(connect: Connect, names: Names, target: Target,
                                                     closing: str, queue_kind: str) -> None:
    if close_unspecified(target):
        not_applicable("what a close does to an open transaction's acks is not specified by AMQP 0-9-1")
    client, ch, queue, (m1, _m2) = fetched(connect, names, 2, target, queue_kind=queue_kind)
    client.send(ch, BasicAck(delivery_tag=m1.tag))
    assert_ready(client, ch, queue, 0, "TX-04", "with m1's ack uncommitted and m2 unacked")
    if closing == "channel":
        client.close_channel(ch)
    else:
        client.close()
    requeued_after_close(connect, queue, 2, target, "TX-04", f"closing the {closing} requeues the acked-uncommitted "
                         "delivery with the unacked one")


@pytest.mark.rules("TX-04")
def test_recover_does_not_redeliver_acked_uncommitted(connect: Connect, names: Names, target: Target) -> None:
    if close_unspecified(target):
        not_applicable("what basic.recover does to an open transaction's acks is not specified by AMQP 0-9-1")
    client, ch, queue, (m1,) = fetched(connect, names, 1, target)
    client.send(ch, BasicAck(delivery_tag=m1.tag))
    client.rpc(ch, BasicRecover(requeue=True), BasicRecoverOk)
    assert_ready(client, ch, queue, 0, "TX-04", "after basic.recover with m1's ack uncommitted")
    got = get(client, ch, queue, no_ack=True)
    assert got is None, ("TX-04: basic.recover does not redeliver a message whose ack is uncommitted; basic.get "
                         f"fetched {got.body!r} (redelivered={got.redelivered})")


@pytest.mark.rules("TX-04")
@pytest.mark.parametrize("then", ["close", "rollback"])
def test_no_ack_deliveries_are_outside_the_transaction(connect: Connect, names: Names, target: Target,
                                                       then: str) -> None:
    client, ch, queue = filled(connect, names, 1)
    client.rpc(ch, TxSelect(), TxSelectOk)
    assert get(client, ch, queue, no_ack=True) is not None, "m1 is not in the queue: basic.get-empty"
    if then == "rollback":
        client.rpc(ch, TxRollback(), TxRollbackOk)
        assert_ready(client, ch, queue, 0, "TX-04", "after tx.rollback of a transaction holding a no-ack basic.get")
    if close_unspecified(target):
        return
    client.close_channel(ch)
    looker = connect()
    count = ready(looker, looker.channel(), queue)
    assert count == 0, (f"TX-04: a no-ack delivery is not part of the transaction, closing the channel without a "
                        f"commit does not bring it back; the queue holds {count} message(s)")
