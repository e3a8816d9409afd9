"""Publisher confirms over the wire when a publish is refused or its channel ends (RULES.md §4):
nacks of a full queue (PC-08), a deleted queue (PC-09), transactions (PC-11), immediate and
oversized publishes (PC-12), pending confirms dying with their channel (PC-13). PC-01..07:
test_confirms.py.

Each test names its rules with `@pytest.mark.rules`; expectations per profile come from the
catalogue.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import (
    BasicAck,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    BasicReturn,
    ChannelClose,
    ChannelCloseOk,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDelete,
    QueueDeleteOk,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    TxSelect,
    TxSelectOk,
    encode_method,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.catalogue.mentions import RuleViolation
from conformance.drivers.raw import ChannelClosed, ConnectionClosed, NoReply, RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.confirms import PERSISTENT, QUIET, confirm_channel, declare, message_count
from conformance.suite.steps.queues import prompt
from conformance.suite.steps.wire import (
    Confirms,
    assert_quiet,
    default_max_message_size,
    inbound,
    methods_after,
    outcome,
    publish_burst,
    publish_large,
    pump,
    reopen_channel,
    sync,
    wait_channel_closed,
)

Connect = Callable[..., RawClient]


# -- PC-08 / PC-09 ---------------------------------------------------------------------------
@pytest.mark.rules("PC-08")
@pytest.mark.clauses("PC-08.a", "PC-08.b", "PC-08.c")
@pytest.mark.parametrize("overflow", ["reject-publish", "reject-publish-dlx"])
def test_a_full_queue_with_reject_publish_nacks(connect: Connect, names: Names,
                                                overflow: str) -> None:
    client = connect()
    ch = confirm_channel(client)
    queue = names.queue()
    declare(client, ch, queue, arguments={"x-max-length": 1, "x-overflow": overflow})
    publish_burst(client, ch, [queue] * 3)
    confirms = Confirms.expecting(1, 3).collect(client, ch, prompt(client))
    assert (confirms.acked, confirms.nacked) == ({1}, {2, 3})
    assert message_count(client, ch, queue) == 1  # the nacked messages were refused, not kept


@pytest.mark.bound(10)  # queue.delete-ok behind a durable queue's disk writes (a deviating broker waits it out)
@pytest.mark.rules("PC-09")
@pytest.mark.clauses("PC-09.a")
@pytest.mark.parametrize("durable", [True, False], ids=["durable-persistent", "transient"])
def test_queue_deleted_with_confirms_pending_means_ack(connect: Connect, names: Names, target: Target,
                                                       durable: bool) -> None:
    """Publishes and the queue's deletion go in one write, so the deletion can overtake the
    confirms; whatever was pending must be acked, never nacked.

    The disk is waited for once: queue.delete-ok (the queue's files and its record go first) gets
    the 10-s bound. What is still unconfirmed then is owed at once (`prompt`): RabbitMQ's queue
    process replies to the delete from its `terminate` and then exits `normal` (v3.10.8
    `stop/2`, answered by gen_server2 after `terminate`; v4.0.5 and v4.3.5 `terminate_delete/4` with `reply_to`), and the channel settles
    every seqno still pending for that queue as an ack when it handles that exit, with no disk
    or timer in between (`rabbit_classic_queue:handle_event({down, ...})` returns `eol` for a
    normal exit, then `rabbit_confirms:remove_queue` and `record_confirms`: rabbit_channel
    v3.10.8 l. 823-830, v4.0.5 `handle_eol` l. 2776, v4.3.5 l. 2829). A transient queue confirms
    while enqueueing (`prompt`'s evidence), before the deletion is handled."""
    client = connect()
    ch = confirm_channel(client)
    queue = names.queue()
    declare(client, ch, queue, durable=durable)
    props = PERSISTENT if durable else BasicProperties()
    publish_burst(client, ch, [queue] * 50, properties=props, tail=encode_method(ch, QueueDelete(queue=queue)))
    client.expect(ch, QueueDeleteOk, timeout=target.timeout(10))  # the confirms that came before it stay queued
    confirms = Confirms.expecting(1, 50)
    try:
        confirms.collect(client, ch, prompt(client))
    except NoReply:
        missing = sorted(confirms.outstanding)
        raise RuleViolation(("PC-09",), f"seqnos {missing[:10]}{' ...' if len(missing) > 10 else ''} "
                            f"({len(missing)} of 50) were still unconfirmed {prompt(client):g} s after "
                            "queue.delete-ok: a deleted queue's pending confirms are owed as acks once it is "
                            f"gone, with nothing left to wait for; confirms seen: {confirms.seen}") from None
    assert not confirms.nacked, f"nacked {sorted(confirms.nacked)}: a deleted queue means ack (PC-09)"


# -- PC-11 -----------------------------------------------------------------------------------
@pytest.mark.rules("PC-11")
@pytest.mark.clauses("PC-11.a", "PC-11.b")
@pytest.mark.parametrize("method", [TxCommit(), TxRollback()], ids=["commit", "rollback"])
def test_commit_or_rollback_outside_tx_is_406(connect: Connect, method: TxCommit | TxRollback) -> None:
    client = connect()
    ch = client.channel()
    with pytest.raises(ChannelClosed) as closed:
        client.rpc(ch, method, TxCommitOk, TxRollbackOk)
    assert outcome(closed.value) == ("channel", ReplyCode.PRECONDITION_FAILED, method.CLASS_ID, method.METHOD_ID)


@pytest.mark.rules("PC-11")
@pytest.mark.clauses("PC-11.d")
def test_commit_with_a_rejected_publish_is_406(connect: Connect, names: Names, target: Target) -> None:
    if target.profile.expect("PC-11").startswith("variant:"):
        not_applicable("partial tx completion is RabbitMQ-specific")
    client = connect()
    ch = client.channel()
    queue = names.queue()
    declare(client, ch, queue, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    client.rpc(ch, TxSelect(), TxSelectOk)
    publish_burst(client, ch, [queue])
    with pytest.raises(ChannelClosed) as closed:
        client.rpc(ch, TxCommit(), TxCommitOk)
    assert outcome(closed.value) == ("channel", ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["tx.commit"])
    assert closed.value.text == "PRECONDITION_FAILED - partial tx completion", (
        f"PC-11: tx.commit of a transaction whose publish a queue refused fails with the text "
        f"'PRECONDITION_FAILED - partial tx completion'; the broker sent {closed.value.text!r}")


@pytest.mark.rules("PC-11")
@pytest.mark.clauses("PC-11.e")
def test_commit_ok_follows_the_enqueue_of_every_publish(connect: Connect, names: Names,
                                                        target: Target) -> None:
    client = connect()
    ch, observer = client.channel(), client.channel()
    queue = names.queue()
    declare(client, ch, queue, durable=True)
    client.rpc(ch, TxSelect(), TxSelectOk)
    publish_burst(client, ch, [queue] * 20, properties=PERSISTENT)
    assert message_count(client, observer, queue) == 0  # held until the commit
    client.rpc(ch, TxCommit(), TxCommitOk, timeout=target.timeout(10))
    assert message_count(client, observer, queue) == 20


@pytest.mark.rules("PC-11", "ERR-04")
@pytest.mark.clauses("PC-11.f", "ERR-04.n")
def test_method_pipelined_behind_commit(connect: Connect, names: Names, target: Target) -> None:
    """A method that arrives while tx.commit is still being processed is a 504 connection error.
    Whether the pipelined method finds the commit still running depends on the broker: RabbitMQ
    3.10.8 waits for the queue (here: persistent messages, durable queue) and answers 504 (live);
    a broker whose commit completes at once answers commit-ok and then the method normally."""
    if target.profile.expect("PC-11").startswith("variant:"):
        not_applicable("the in-commit 504 is RabbitMQ-specific")
    client = connect()
    ch = client.channel()
    queue = names.queue()
    declare(client, ch, queue, durable=True)
    client.rpc(ch, TxSelect(), TxSelectOk)
    tail = encode_method(ch, TxCommit()) + encode_method(ch, BasicQos(prefetch_count=5))
    publish_burst(client, ch, [queue] * 50, properties=PERSISTENT, body=b"m" * 1000, tail=tail)
    try:
        client.expect(ch, TxCommitOk, timeout=target.timeout(10))
    except ConnectionClosed as closed:
        assert outcome(closed) == ("connection", ReplyCode.CHANNEL_ERROR, *METHOD_IDS["basic.qos"])
        want = "CHANNEL_ERROR - unexpected command while processing 'tx.commit'"
        assert closed.text == want, f"PC-11: the 504's reply text must be {want!r}; the broker sent {closed.text!r}"
        return
    client.expect(ch, BasicQosOk, timeout=target.timeout(5))


# -- PC-12 -----------------------------------------------------------------------------------
@pytest.mark.rules("PC-12")
@pytest.mark.clauses("PC-12.a")
def test_immediate_publish_is_540(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch = client.channel()
    queue = names.queue()
    declare(client, ch, queue)
    client.send(ch, BasicPublish(routing_key=queue, immediate=True), BasicProperties(), b"m")
    if target.profile.expect("PC-12").startswith("variant:immediate=true is a spec flag"):
        returned = client.expect(ch, BasicReturn, timeout=target.timeout(5)).method
        assert isinstance(returned, BasicReturn) and returned.reply_code == ReplyCode.NO_CONSUMERS
        return
    with pytest.raises(ConnectionClosed) as closed:
        sync(client, ch)
    assert outcome(closed.value) == ("connection", ReplyCode.NOT_IMPLEMENTED, *METHOD_IDS["basic.publish"])


@pytest.mark.rules("PC-12")
@pytest.mark.clauses("PC-12.c", "PC-12.d", "PC-12.f")
def test_body_over_the_default_max_message_size_is_406(connect: Connect, names: Names,
                                                       target: Target) -> None:
    limit = default_max_message_size(target.profile)
    if limit is None:
        not_applicable("message size limits are broker-specific on this profile")
    client = connect(timeout=target.timeout(30))
    ch, other = client.channel(), client.channel()
    queue = names.queue()
    declare(client, ch, queue)
    publish_large(client, ch, queue, limit + 1)
    with pytest.raises(ChannelClosed) as closed:
        sync(client, ch)
    assert outcome(closed.value) == ("channel", ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["basic.publish"])
    want = f"PRECONDITION_FAILED - message size {limit + 1} is larger than configured max size {limit}"
    assert closed.value.text == want, f"PC-12: the reply text must be {want!r}; the broker sent {closed.value.text!r}"
    assert message_count(client, other, queue) == 0  # the connection and other channels go on


@pytest.mark.rules("PC-12")
@pytest.mark.clauses("PC-12.g")
def test_a_body_of_exactly_the_default_max_message_size_is_taken(connect: Connect, names: Names,
                                                                 target: Target) -> None:
    """The other side of PC-12's boundary: a body of exactly max_message_size octets is routed."""
    limit = default_max_message_size(target.profile)
    if limit is None:
        not_applicable("message size limits are broker-specific on this profile")
    client = connect(timeout=target.timeout(30))
    ch = client.channel()
    queue = names.queue()
    declare(client, ch, queue)
    publish_large(client, ch, queue, limit)
    try:
        sync(client, ch)
    except ChannelClosed as closed:
        raise AssertionError(f"PC-12: a body of exactly max_message_size ({limit} octets) must be taken; the broker "
                             f"closed the channel: {closed}") from None
    count = message_count(client, ch, queue)
    assert count == 1, f"PC-12: a body of exactly {limit} octets is routed to its queue; the queue holds {count}"


# -- PC-13 -----------------------------------------------------------------------------------
@pytest.mark.rules("PC-13")
@pytest.mark.clauses("PC-13.a")
def test_pending_confirms_die_with_a_channel_error(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch = confirm_channel(client)
    other = client.channel()
    queue = names.queue()
    declare(client, other, queue, durable=True)
    publish_burst(client, ch, [queue] * 50, properties=PERSISTENT, tail=encode_method(ch, BasicAck(999_999)))
    closed = wait_channel_closed(client, ch, target.timeout(5))
    assert outcome(closed) == ("channel", ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["basic.ack"])
    sync(client, other)
    pump(client, QUIET)
    late = methods_after(inbound(client, ch), ChannelClose)
    assert not late, f"sent on channel {ch} after its channel.close: {late}"
    _fresh_channel_counts_from_one(client, ch, queue)


@pytest.mark.rules("PC-13")
@pytest.mark.clauses("PC-13.a")
def test_pending_confirms_die_with_a_client_close(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch = confirm_channel(client)
    other = client.channel()
    queue = names.queue()
    declare(client, other, queue, durable=True)
    publish_burst(client, ch, [queue] * 50, properties=PERSISTENT)
    client.close_channel(ch)  # acks may precede close-ok; nothing may follow it
    sync(client, other)
    pump(client, QUIET)
    late = methods_after(inbound(client, ch), ChannelCloseOk)
    assert not late, f"sent on channel {ch} after its channel.close-ok: {late}"
    _fresh_channel_counts_from_one(client, ch, queue)


def _fresh_channel_counts_from_one(client: RawClient, ch: int, queue: str) -> None:
    """The same channel number, reopened: a new counter, and no stale confirm for old seqnos."""
    reopen_channel(client, ch)
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    publish_burst(client, ch, [queue])
    first = client.expect(ch, BasicAck, BasicNack, timeout=prompt(client)).method
    assert first == BasicAck(delivery_tag=1, multiple=False)
    assert_quiet(client, ch, QUIET, BasicAck, BasicNack)
