"""Transactions over the wire, the channel and its publishes: TX-01 (the replies) and TX-02
(publishes held until tx.commit, discarded by tx.rollback and by a close).

Rules:
- "Reached no queue" is judged after a round trip on the publishing channel (the broker handled
  the publish before it answers a later method on the same channel): the queue's count
  (queue.declare passive) and a basic.get, on the publishing channel and on another one.
- After a close, the queue is looked at from a new connection once channel.close-ok (or
  connection.close-ok) came: an uncommitted publish lives only in the channel, so there is
  nothing to wait for.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import (
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    TxSelect,
    TxSelectOk,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.queues import (
    CLASSIC,
    QUORUM,
    bodies,
    declare,
    get,
    get_all,
    messages,
    ready,
    require_kind,
)
from conformance.suite.steps.tx import publish, tx_channel

Connect = Callable[..., RawClient]
KINDS = [CLASSIC, QUORUM]


def assert_not_enqueued(client: RawClient, chs: tuple[int, ...], queue: str, required: str) -> None:
    """Neither counted nor fetched on any of `chs` (a fetch would take it: the test is over then);
    `required`: what the rule says, the failure's first half."""
    for ch in chs:
        count = ready(client, ch, queue)
        assert count == 0, f"{required}; queue.declare-ok counted {count} ready message(s) on channel {ch}"
        got = get(client, ch, queue, no_ack=True)
        assert got is None, f"{required}; basic.get on channel {ch} fetched {got.body!r}"


# -- TX-01 ------------------------------------------------------------------------------------
@pytest.mark.rules("TX-01")
def test_select_commit_and_rollback_are_answered(connect: Connect) -> None:
    """tx.select twice, then commit and rollback of empty transactions, each twice in a row: every
    one answered by its -ok (the channel stays transactional after each)."""
    client = connect()
    ch = tx_channel(client)
    steps: list[tuple[TxSelect | TxCommit | TxRollback, type]] = [
        (TxSelect(), TxSelectOk), (TxCommit(), TxCommitOk), (TxCommit(), TxCommitOk),
        (TxRollback(), TxRollbackOk), (TxRollback(), TxRollbackOk), (TxCommit(), TxCommitOk)]
    for method, reply in steps:
        client.rpc(ch, method, reply)


@pytest.mark.rules("TX-01", "TX-02")
def test_each_commit_starts_the_next_transaction(connect: Connect, names: Names) -> None:
    """One tx.select, then publish, commit, publish, rollback, publish, commit: the channel stays
    transactional (the second publish is held too), so exactly m1 and m3 are enqueued."""
    client = connect()
    ch, other = tx_channel(client), client.channel()
    queue = declare(client, other, names.queue())
    publish(client, ch, queue, [b"m1"])
    client.rpc(ch, TxCommit(), TxCommitOk)
    publish(client, ch, queue, [b"m2"])
    assert ready(client, ch, queue) == 1, ("TX-01: after tx.commit the channel is still transactional, "
                                            "so a new publish is held until the next commit")
    client.rpc(ch, TxRollback(), TxRollbackOk)
    publish(client, ch, queue, [b"m3"])
    client.rpc(ch, TxCommit(), TxCommitOk)
    got = bodies(get_all(client, other, queue))
    assert got == [b"m1", b"m3"], (f"TX-01/TX-02: commit m1, roll back m2, commit m3 (one tx.select) leaves "
                                   f"m1 and m3 in the queue; it holds {got}")


# -- TX-02 ------------------------------------------------------------------------------------
@pytest.mark.rules("TX-02")
@pytest.mark.parametrize("kind", KINDS)
def test_publishes_are_held_until_commit(connect: Connect, names: Names, target: Target, kind: str) -> None:
    require_kind(target.profile, kind)
    client = connect()
    ch, other = tx_channel(client), client.channel()
    queue = declare(client, other, names.queue(kind), kind)
    publish(client, ch, queue, messages(3))
    assert_not_enqueued(client, (ch, other), queue, "TX-02: a publish on a transactional channel reaches no queue "
                        "before tx.commit")
    client.rpc(ch, TxCommit(), TxCommitOk)
    count = ready(client, other, queue)
    assert count == 3, f"TX-02: tx.commit enqueues the transaction's 3 publishes before tx.commit-ok; {count} ready"
    got = bodies(get_all(client, other, queue))
    assert got == messages(3), f"TX-02: committed in publish order {messages(3)}; fetched {got}"
    client.rpc(ch, TxCommit(), TxCommitOk)  # an empty transaction now


@pytest.mark.rules("TX-02")
def test_rollback_discards_publishes(connect: Connect, names: Names) -> None:
    client = connect()
    ch, other = tx_channel(client), client.channel()
    queue = declare(client, other, names.queue())
    publish(client, ch, queue, messages(2))
    client.rpc(ch, TxRollback(), TxRollbackOk)
    client.rpc(ch, TxCommit(), TxCommitOk)  # nothing left to commit
    assert_not_enqueued(client, (ch, other), queue, "TX-02: tx.rollback discards the transaction's publishes (the "
                        "next tx.commit has nothing to enqueue)")


@pytest.mark.rules("TX-02")
@pytest.mark.parametrize("closing", ["channel", "connection"])
def test_close_discards_uncommitted_publishes(connect: Connect, names: Names, target: Target, closing: str) -> None:
    if target.profile.expect("TX-02").startswith("variant:"):
        not_applicable("what a close does to an open transaction's publishes is not specified by AMQP 0-9-1")
    client = connect()
    ch = tx_channel(client)
    queue = declare(client, ch, names.queue())
    publish(client, ch, queue, messages(2))
    ready(client, ch, queue)  # the broker has the publishes (a round trip on their channel)
    if closing == "channel":
        client.close_channel(ch)
    else:
        client.close()
    looker = connect()
    lch = looker.channel()
    count = ready(looker, lch, queue)
    assert count == 0, (f"TX-02: closing the {closing} discards the open transaction's publishes; the queue "
                        f"holds {count} message(s) after close-ok")
