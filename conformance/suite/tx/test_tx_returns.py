"""Transactions over the wire, mandatory returns: TX-05 (basic.return at tx.commit, before
tx.commit-ok; none after tx.rollback) and TX-06 (tx.commit after the queue was deleted).

Rules:
- "No basic.return before the commit" is judged after a round trip on the publishing channel:
  the broker sends a channel's frames in order, so a return sent for the publish would have
  arrived before the round trip's reply.
- The order of basic.return and tx.commit-ok is the order the two arrived in on the channel.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import (
    BasicProperties,
    BasicPublish,
    BasicReturn,
    Command,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueBind,
    QueueBindOk,
    QueueDelete,
    QueueDeleteOk,
    QueueUnbind,
    QueueUnbindOk,
    ReplyCode,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
)
from conformance.drivers.raw import ChannelClosed, ConnectionClosed, RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.queues import bodies, declare, get_all, ready
from conformance.suite.steps.tx import publish, tx_channel

Connect = Callable[..., RawClient]
NOWHERE = "amqpc.tx.no.such.queue"  # a key no queue is bound with on the default exchange


def returns_before_commit(client: RawClient, ch: int, rule: str, what: str) -> None:
    early = [c.method for c in client.pending(ch) if isinstance(c.method, BasicReturn)]
    assert not early, f"{rule}: {what} gets no basic.return before tx.commit; got {early}"


def until_commit_ok(client: RawClient, ch: int, timeout: float | None = None) -> list[Command]:
    """What came on `ch` up to and including tx.commit-ok: basic.returns, then the commit-ok."""
    out: list[Command] = []
    while not out or not isinstance(out[-1].method, TxCommitOk):
        out.append(client.expect(ch, BasicReturn, TxCommitOk, timeout=timeout))
    return out


def described(commands: list[Command]) -> str:
    return ", ".join(f"{c.method.NAME} {c.body!r}" if isinstance(c.method, BasicReturn) else c.method.NAME
                     for c in commands)


@pytest.mark.rules("TX-05")
def test_return_comes_at_commit_before_commit_ok(connect: Connect, names: Names, target: Target) -> None:
    if target.profile.expect("TX-05") == "not-applicable":
        not_applicable("the order of basic.return and tx.commit-ok is RabbitMQ's")
    client = connect()
    ch = tx_channel(client)
    queue = declare(client, ch, names.queue())
    publish(client, ch, NOWHERE, [b"lost"], mandatory=True)
    publish(client, ch, queue, [b"kept"], mandatory=True)
    assert ready(client, ch, queue) == 0, "TX-02: the routable publish is held until tx.commit"
    returns_before_commit(client, ch, "TX-05", "an unroutable mandatory publish in a transaction")
    client.send(ch, TxCommit())
    seen = until_commit_ok(client, ch)
    want = "basic.return b'lost', tx.commit-ok"
    assert described(seen) == want, f"TX-05: at tx.commit, {want}; got {described(seen)}"
    m = seen[0].method
    assert isinstance(m, BasicReturn)
    assert (m.reply_code, m.reply_text, m.exchange, m.routing_key) == (ReplyCode.NO_ROUTE, "NO_ROUTE", "", NOWHERE), (
        f"TX-05: the return is 312 NO_ROUTE with the publish's exchange '' and key {NOWHERE!r}; got {m}")
    got = bodies(get_all(client, ch, queue))
    assert got == [b"kept"], f"TX-05: the routable mandatory publish is enqueued at the commit; the queue holds {got}"


@pytest.mark.rules("TX-05")
def test_rollback_discards_the_return(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch = tx_channel(client)
    publish(client, ch, NOWHERE, [b"lost"], mandatory=True)
    client.rpc(ch, TxRollback(), TxRollbackOk)
    returns_before_commit(client, ch, "TX-05", "a rolled back mandatory publish")
    client.send(ch, TxCommit())
    seen = until_commit_ok(client, ch)
    assert described(seen) == "tx.commit-ok", (f"TX-05: a rolled back unroutable mandatory publish is never "
                                               f"returned; the next (empty) commit brought {described(seen)}")


RETURNED = "basic.return b'm', tx.commit-ok"  # 3.10: the commit looks the queue up by name
PARTIAL = "channel.close 406 (90/20) PRECONDITION_FAILED - partial tx completion"  # 4.0
NOT_FOUND = "connection.close 506 (90/20) RESOURCE_ERROR - failed to deliver message: {not_found,"  # 4.3


def deleted_queue_outcomes(target: Target) -> list[str]:
    """What tx.commit of a mandatory publish whose queue was deleted since may bring (TX-06)."""
    profile = target.profile
    if profile.at_least("4.3"):
        return [NOT_FOUND]
    if profile.at_least("4.0"):
        return [PARTIAL]
    if profile.at_least("3.12"):
        return [RETURNED, PARTIAL]  # 3.12 as 3.10, 3.13 as 4.0 (inferred)
    return [RETURNED]


@pytest.mark.rules("TX-06", "ERR-02")
@pytest.mark.clauses("ERR-02.g")
def test_commit_after_the_queue_was_deleted(connect: Connect, names: Names, target: Target) -> None:
    if target.profile.expect("TX-06") == "not-applicable":
        not_applicable("a queue deleted inside a transaction is RabbitMQ's case")
    client = connect()
    ch, other = tx_channel(client), client.channel()
    queue = declare(client, other, names.queue())
    publish(client, ch, queue, [b"m"], mandatory=True)
    ready(client, ch, queue)  # the broker routed the publish (a round trip on its channel)
    client.rpc(other, QueueDelete(queue=queue), QueueDeleteOk)
    client.send(ch, TxCommit())
    try:
        seen = described(until_commit_ok(client, ch))
    except (ChannelClosed, ConnectionClosed) as closed:
        seen = f"{closed.scope}.close {closed.code} ({closed.class_id}/{closed.method_id}) {closed.text}"
    want = deleted_queue_outcomes(target)
    matched = [w for w in want if seen == w or (w.endswith(",") and seen.startswith(w) and queue in seen)]
    assert matched, (f"TX-06: tx.commit of a mandatory publish whose queue was deleted since brings "
                     f"{' or '.join(want)} on {target.profile.name}; got {seen}")


@pytest.mark.rules("TX-06")
def test_publishes_are_routed_when_published(connect: Connect, names: Names) -> None:
    """q1 bound to a direct exchange with key k, a publish to k in a transaction, then q2 bound with k
    and q1 unbound, then the commit: the message goes to q1 (its route at the publish), not to q2."""
    client = connect()
    ch, other = tx_channel(client), client.channel()
    exchange = names.exchange("direct")
    client.rpc(other, ExchangeDeclare(exchange=exchange, exchange_type="direct"), ExchangeDeclareOk)
    q1, q2 = declare(client, other, names.queue("q1")), declare(client, other, names.queue("q2"))
    client.rpc(other, QueueBind(queue=q1, exchange=exchange, routing_key="k"), QueueBindOk)
    client.send(ch, BasicPublish(exchange=exchange, routing_key="k"), BasicProperties(), b"m")
    ready(client, ch, q1)  # the broker routed the publish (a round trip on its channel)
    client.rpc(other, QueueBind(queue=q2, exchange=exchange, routing_key="k"), QueueBindOk)
    client.rpc(other, QueueUnbind(queue=q1, exchange=exchange, routing_key="k"), QueueUnbindOk)
    client.rpc(ch, TxCommit(), TxCommitOk)
    counts = {q1: ready(client, other, q1), q2: ready(client, other, q2)}
    assert counts == {q1: 1, q2: 0}, (f"TX-06: a transaction's publish goes where it was routed when published "
                                      f"({q1}, bound then), not where the commit would route it ({q2}); ready "
                                      f"counts after the commit: {counts}")
