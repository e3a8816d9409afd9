"""Publisher confirms over the wire (RULES.md §4, PC-01..07, PC-10): select and its exclusion of
transactions, sequence numbers, how acks and nacks settle each publish, unroutable, persistent
and multiply routed messages. Refused publishes, deleted queues, transactions and channels ending
with confirms pending (PC-08, PC-09, PC-11..13): test_confirms_refusals.py.

Each test names its rules with `@pytest.mark.rules`; expectations per profile come from the
catalogue. Acks and nacks are checked by coverage (every seqno settled exactly once, PC-05),
not by their batching, except where RabbitMQ's coalescing is deterministic (a lone confirm).

A confirm the broker owes at once (a transient message, any message to a transient queue, an
unroutable publish, a refusal by a full queue: no disk write, no consensus in between) is
awaited for `prompt` (2 s, scaled); a persistent message in a durable queue for 5 s, a quorum
queue's for 10 s.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import (
    BasicAck,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicReturn,
    ConfirmSelect,
    ConfirmSelectOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueBind,
    QueueBindOk,
    TxSelect,
    TxSelectOk,
    encode_content,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.catalogue.mentions import RuleViolation
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.plugin.explain import protocol_terms
from conformance.plugin.session import Names, Target
from conformance.suite.steps.confirms import (
    PERSISTENT,
    QUIET,
    applied_barrier,
    collect_applied,
    confirm_channel,
    declare,
    message_count,
)
from conformance.suite.steps.queues import QUORUM, prompt, require_kind
from conformance.suite.steps.wire import (
    Confirms,
    assert_quiet,
    outcome,
    publish_burst,
    sync,
)

Connect = Callable[..., RawClient]


# -- PC-01 / PC-02 ---------------------------------------------------------------------------
@pytest.mark.rules("PC-01")
@pytest.mark.clauses("PC-01.a", "PC-01.c")
def test_confirm_select_is_answered_and_repeatable(connect: Connect, names: Names) -> None:
    client = connect()
    ch = client.channel()
    queue = names.queue()
    declare(client, ch, queue)
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    publish_burst(client, ch, [queue])
    Confirms.expecting(1, 1).collect(client, ch, prompt(client))
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)  # selecting again is harmless ...
    publish_burst(client, ch, [queue])
    again = Confirms.expecting(2, 1).collect(client, ch, prompt(client))  # ... and keeps counting
    assert again.acked == {2}


@pytest.mark.rules("PC-01")
@pytest.mark.clauses("PC-01.b")
def test_confirm_select_nowait_gets_no_reply(connect: Connect) -> None:
    client = connect()
    ch = client.channel()
    client.send(ch, ConfirmSelect(nowait=True))
    assert_quiet(client, ch, QUIET, ConfirmSelectOk)


@pytest.mark.rules("PC-02")
@pytest.mark.clauses("PC-02.a", "PC-02.b", "PC-02.c", "PC-02.d")
def test_sequence_numbers_start_at_one_after_select(connect: Connect, names: Names) -> None:
    client = connect()
    ch = client.channel()
    queue = names.queue()
    declare(client, ch, queue)
    publish_burst(client, ch, [queue] * 2)  # before confirm.select: not counted
    sync(client, ch)
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    publish_burst(client, ch, [queue] * 3)
    confirms = Confirms.expecting(1, 3).collect(client, ch, prompt(client))
    assert confirms.acked == {1, 2, 3}
    assert_quiet(client, ch, QUIET, BasicAck, BasicNack)


# -- PC-03 -----------------------------------------------------------------------------------
@pytest.mark.rules("PC-03")
@pytest.mark.clauses("PC-03.a")
def test_tx_select_on_a_confirm_channel_is_406(connect: Connect) -> None:
    client = connect()
    ch = confirm_channel(client)
    with pytest.raises(ChannelClosed) as closed:
        client.rpc(ch, TxSelect(), TxSelectOk)
    assert outcome(closed.value) == ("channel", ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["tx.select"])


@pytest.mark.rules("PC-03")
@pytest.mark.clauses("PC-03.c")
def test_confirm_select_on_a_tx_channel_is_406(connect: Connect) -> None:
    client = connect()
    ch = client.channel()
    client.rpc(ch, TxSelect(), TxSelectOk)
    with pytest.raises(ChannelClosed) as closed:
        client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    assert outcome(closed.value) == ("channel", ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["confirm.select"])


# -- PC-04 / PC-05 / PC-10 ---------------------------------------------------------------------
@pytest.mark.rules("PC-04")
@pytest.mark.clauses("PC-04.c")
def test_a_lone_confirm_is_not_multiple(connect: Connect, names: Names) -> None:
    client = connect()
    ch = confirm_channel(client)
    queue = names.queue()
    declare(client, ch, queue)
    for seqno in (1, 2):  # each publish is alone in its flush: nothing else is unconfirmed
        publish_burst(client, ch, [queue])
        ack = client.expect(ch, BasicAck, BasicNack, timeout=prompt(client)).method
        assert ack == BasicAck(delivery_tag=seqno, multiple=False)


@pytest.mark.rules("PC-04", "PC-05")
@pytest.mark.clauses("PC-04.b", "PC-05.a")
def test_a_burst_is_confirmed_once_per_seqno(connect: Connect, names: Names) -> None:
    client = connect()
    ch = confirm_channel(client)
    queue = names.queue()
    declare(client, ch, queue)
    publish_burst(client, ch, [queue] * 25)  # the broker may or may not coalesce these
    confirms = Confirms.expecting(1, 25).collect(client, ch, prompt(client))
    assert confirms.acked == set(range(1, 26)) and not confirms.nacked, \
        f"PC-05: every publish to a queue that takes it is acked once; nacked {sorted(confirms.nacked)}"
    assert_quiet(client, ch, QUIET, BasicAck, BasicNack, rule="PC-05")


@pytest.mark.rules("PC-04", "PC-08")
@pytest.mark.clauses("PC-04.d", "PC-04.e", "PC-08.a")
def test_nacks_are_coalesced_like_acks(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch = confirm_channel(client)
    full = names.queue("full")
    declare(client, ch, full, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    publish_burst(client, ch, [full])
    lone = client.expect(ch, BasicAck, BasicNack, timeout=prompt(client)).method
    # A lone nack covers seqno 1 only, whatever its multiple bit. RabbitMQ 3.10.8 sends
    # multiple=true here (live): unlike acks, nacks have no single-confirm special case.
    assert isinstance(lone, BasicNack) and lone.delivery_tag == 1, (
        f"got {protocol_terms(lone)} for a publish to a full reject-publish queue, expected basic.nack delivery-tag=1")
    if target.profile.rabbitmq:  # rabbit_channel send_nacks -> coalesce_and_send (v3.10.8, v4.3.5)
        assert (lone.multiple, lone.requeue) == (True, True), (
            f"PC-04: RabbitMQ sends a lone nack with no older seqno unconfirmed as multiple=true (nacks have no "
            f"single-confirm clause), and its broker nacks carry requeue=true; got {protocol_terms(lone)}")
    publish_burst(client, ch, [full] * 5)
    confirms = Confirms.expecting(2, 5).collect(client, ch, prompt(client))
    assert confirms.nacked == set(range(2, 7)) and not confirms.acked
    assert_quiet(client, ch, QUIET, BasicAck, BasicNack)


@pytest.mark.rules("PC-05", "PC-04")
@pytest.mark.clauses("PC-04.a", "PC-04.b", "PC-05.a", "PC-05.b")
def test_mixed_outcomes_are_settled_exactly_once(connect: Connect, names: Names) -> None:
    client = connect()
    ch = confirm_channel(client)
    ok, full = names.queue("ok"), names.queue("full")
    declare(client, ch, ok)
    declare(client, ch, full, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    keys = [ok, full, f"{ok}.unroutable", ok, full, full, ok, f"{full}.unroutable"]
    publish_burst(client, ch, keys)
    confirms = Confirms.expecting(1, len(keys)).collect(client, ch, prompt(client))
    refused = {i for i, k in enumerate(keys, 1) if k == full}
    if batched := refused & confirms.acked & confirms.by_multiple:
        raise RuleViolation(("PC-04", "PC-05"), f"seqnos {sorted(batched)} were refused by the full queue and must be "
                            "nacked; a multiple=true basic.ack covered them (the cutoff of a batched ack stops below "
                            f"a seqno nacked in the same flush); confirms seen: {confirms.seen}")
    assert confirms.nacked == refused, f"PC-05: the refused seqnos {sorted(refused)} are nacked, once: {confirms.seen}"
    assert confirms.acked == {i for i, k in enumerate(keys, 1) if k != full}, \
        f"PC-05: every other seqno is acked, once: {confirms.seen}"
    assert_quiet(client, ch, QUIET, BasicAck, BasicNack, rule="PC-05")


@pytest.mark.bound(5)  # persistent messages' confirms: the disk writes (a deviating broker waits it out)
@pytest.mark.rules("PC-10")
@pytest.mark.clauses("PC-10.a", "PC-10.b")
def test_confirms_of_mixed_durability_cover_every_message(connect: Connect, names: Names,
                                                         target: Target) -> None:
    """Order is not guaranteed, so only coverage is checked: persistent messages to a durable
    queue and transient ones to a transient queue, interleaved in one write."""
    client = connect()
    ch = confirm_channel(client)
    durable, transient = names.queue("durable"), names.queue("transient")
    declare(client, ch, durable, durable=True)
    declare(client, ch, transient)
    one, two = (encode_content(ch, BasicPublish(routing_key=q), p, b"m")
                for q, p in ((durable, PERSISTENT), (transient, BasicProperties())))
    for start in (1, 21):
        client.send_raw((one + two) * 10, channel=ch)
        confirms = Confirms.expecting(start, 20).collect(client, ch, target.timeout(5))
        assert confirms.acked == set(range(start, start + 20))
    assert message_count(client, ch, durable) == 20 and message_count(client, ch, transient) == 20


# -- PC-06 -----------------------------------------------------------------------------------
@pytest.mark.rules("PC-06")
@pytest.mark.clauses("PC-06.a", "PC-06.b", "PC-06.c")
def test_unroutable_mandatory_is_returned_then_confirmed(connect: Connect, names: Names) -> None:
    client = connect()
    ch = confirm_channel(client)
    exchange = names.exchange()
    client.rpc(ch, ExchangeDeclare(exchange=exchange, exchange_type="direct"), ExchangeDeclareOk)
    publish_burst(client, ch, ["nowhere"], exchange=exchange, body=b"returned", mandatory=True)
    first = client.expect(ch, timeout=prompt(client))  # in arrival order: the return first
    assert first.method == BasicReturn(ReplyCode.NO_ROUTE.value, "NO_ROUTE", exchange, "nowhere")
    assert first.body == b"returned"
    second = client.expect(ch, timeout=prompt(client))
    assert second.method == BasicAck(delivery_tag=1, multiple=False)
    assert_quiet(client, ch, QUIET)


@pytest.mark.rules("PC-06")
@pytest.mark.clauses("PC-06.a")
def test_unroutable_without_mandatory_is_only_confirmed(connect: Connect, names: Names) -> None:
    client = connect()
    ch = confirm_channel(client)
    publish_burst(client, ch, [f"{names.prefix}.no-such-queue"])
    assert client.expect(ch, timeout=prompt(client)).method == BasicAck(delivery_tag=1, multiple=False)
    assert_quiet(client, ch, QUIET)


# -- PC-07 -----------------------------------------------------------------------------------
@pytest.mark.bound(5)  # a persistent message's confirm: the disk write (a deviating broker waits it out)
@pytest.mark.rules("PC-07")
@pytest.mark.clauses("PC-07.a")
def test_persistent_message_in_durable_queue_is_confirmed_once_stored(connect: Connect, names: Names,
                                                                      target: Target) -> None:
    client = connect()
    ch = confirm_channel(client)
    queue = names.queue()
    declare(client, ch, queue, durable=True)
    publish_burst(client, ch, [queue] * 5, properties=PERSISTENT)
    assert Confirms.expecting(1, 5).collect(client, ch, target.timeout(5)).acked == {1, 2, 3, 4, 5}
    assert message_count(client, ch, queue) == 5


@pytest.mark.rules("PC-07")
@pytest.mark.clauses("PC-07.a")
def test_persistent_message_in_a_transient_queue_is_confirmed(connect: Connect, names: Names) -> None:
    """A transient queue stores nothing: it accepts a persistent message as it accepts any other, so the
    message is confirmed once enqueued (RabbitMQ 3.10.8, live; GarageMQ 0.1 never confirms it)."""
    client = connect()
    ch = confirm_channel(client)
    queue = names.queue()
    declare(client, ch, queue)
    publish_burst(client, ch, [queue] * 3, properties=PERSISTENT)
    assert Confirms.expecting(1, 3).collect(client, ch, prompt(client)).acked == {1, 2, 3}
    assert message_count(client, ch, queue) == 3


@pytest.mark.bound(10)  # a quorum queue's confirm: consensus on a slow disk (a deviating broker waits it out)
@pytest.mark.rules("PC-07")
@pytest.mark.clauses("PC-07.a", "PC-07.c")
def test_quorum_queue_confirms(connect: Connect, names: Names, target: Target, broker_nodes: int | None) -> None:
    """The three confirms within the consensus's 10 s; on a single-node RabbitMQ, once the queue
    counts the three, within two more round trips (steps.confirms rules: the applied-count barrier)."""
    require_kind(target.profile, QUORUM)
    client = connect()
    ch = confirm_channel(client)
    queue = names.queue()
    declare(client, ch, queue, durable=True, arguments={"x-queue-type": "quorum"})
    publish_burst(client, ch, [queue] * 3, properties=PERSISTENT)
    confirms = collect_applied(Confirms.expecting(1, 3), client, ch, queue, 3, target.timeout(10),
                               barrier=applied_barrier(target.profile, broker_nodes))
    assert confirms.acked == {1, 2, 3}
    assert message_count(client, ch, queue) == 3


@pytest.mark.bound(10)  # a quorum queue's confirm: consensus on a slow disk (a deviating broker waits it out)
@pytest.mark.rules("PC-07")
@pytest.mark.clauses("PC-07.d")
def test_message_routed_to_several_queues_gets_one_confirm(connect: Connect, names: Names,
                                                           target: Target) -> None:
    require_kind(target.profile, QUORUM)
    client = connect()
    ch = confirm_channel(client)
    exchange, queues = names.exchange(), [names.queue("a"), names.queue("b"), names.queue("c")]
    client.rpc(ch, ExchangeDeclare(exchange=exchange, exchange_type="fanout"), ExchangeDeclareOk)
    declare(client, ch, queues[0], durable=True)
    declare(client, ch, queues[1])
    declare(client, ch, queues[2], durable=True, arguments={"x-queue-type": "quorum"})
    for queue in queues:
        client.rpc(ch, QueueBind(queue=queue, exchange=exchange), QueueBindOk)
    publish_burst(client, ch, [""], exchange=exchange, properties=PERSISTENT)
    assert client.expect(ch, BasicAck, BasicNack, timeout=target.timeout(10)).method == BasicAck(1, False)
    assert_quiet(client, ch, QUIET, BasicAck, BasicNack)
    assert [message_count(client, ch, q) for q in queues] == [1, 1, 1]
