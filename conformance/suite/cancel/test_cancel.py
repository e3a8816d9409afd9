"""Consumer cancel notification over the wire (RULES.md §5, CCN-01..07, seed 002).

The client's `consumer_cancel_notify` capability is chosen per connection; a broker-sent
basic.cancel is looked for with a bounded wait, and its absence after a round trip.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from codec import (
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    encode_method,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import ChannelClosed, ConnectionClosed, NoReply, RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.queues import QUORUM, require_kind
from conformance.suite.steps.wire import assert_quiet, outcome, publish_burst, sync

Connect = Callable[..., RawClient]
QUIET = 0.3
SERVER_CAPABILITIES = ("consumer_cancel_notify", "publisher_confirms", "basic.nack", "per_consumer_qos",
                       "direct_reply_to", "connection.blocked", "authentication_failure_close",
                       "consumer_priorities", "exchange_exchange_bindings")  # CCN-01


def consumer(client: RawClient, queue: str, tag: str, **kwargs: Any) -> int:
    """A channel with one consumer `tag` on `queue` (declared here)."""
    ch = client.channel()
    client.rpc(ch, QueueDeclare(queue=queue), QueueDeclareOk)
    reply = client.rpc(ch, BasicConsume(queue=queue, consumer_tag=tag, **kwargs), BasicConsumeOk)
    assert reply.method == BasicConsumeOk(tag)
    return ch


def delete_queue(client: RawClient, queue: str) -> None:
    ch = client.channel()
    client.rpc(ch, QueueDelete(queue=queue), QueueDeleteOk)


def notifies(target: Target) -> bool:
    """CCN-02: whether this profile's broker sends basic.cancel at all."""
    return not target.profile.expect("CCN-02").startswith("variant:")


# -- CCN-01 ----------------------------------------------------------------------------------
@pytest.mark.rules("CCN-01")
@pytest.mark.clauses("CCN-01.b")
def test_server_advertises_consumer_cancel_notify(connect: Connect) -> None:
    caps = connect().server_properties.get("capabilities")
    assert isinstance(caps, dict) and caps.get("consumer_cancel_notify") is True, caps


@pytest.mark.rules("CCN-01")
@pytest.mark.clauses("CCN-01.b", "CCN-01.c")
def test_server_advertises_the_rabbitmq_capabilities(connect: Connect, target: Target) -> None:
    if not target.profile.rabbitmq:  # judged by what it claims (docs/design.md decision 11), not RabbitMQ's table
        not_applicable(f"RabbitMQ's whole capabilities table is not asked of {target.profile.display}")
    caps = connect().server_properties.get("capabilities")
    assert isinstance(caps, dict)
    missing = {name: caps.get(name) for name in SERVER_CAPABILITIES if caps.get(name) is not True}
    assert not missing, f"capabilities not advertised as true: {missing}"


# -- CCN-02 ----------------------------------------------------------------------------------
@pytest.mark.rules("CCN-01", "CCN-02")
@pytest.mark.clauses("CCN-01.a", "CCN-02.a", "CCN-02.b")
def test_deleting_the_queue_sends_basic_cancel(connect: Connect, names: Names, target: Target) -> None:
    client = connect(capabilities={"consumer_cancel_notify": True})
    queue = names.queue()
    ch = consumer(client, queue, "ccn-02")
    delete_queue(connect(), queue)  # from another connection
    if not notifies(target):
        assert_quiet(client, ch, QUIET, BasicCancel)
        return
    try:
        cancel = client.expect(ch, BasicCancel, timeout=target.timeout(5)).method
    except NoReply as exc:
        raise AssertionError(f"CCN-02: deleting a queue sends basic.cancel to each of its consumers on a "
                             f"connection with consumer_cancel_notify; none came: {exc}") from None
    assert cancel == BasicCancel(consumer_tag="ccn-02", nowait=True), f"CCN-02: the notification: {cancel}"
    sync(client, ch)  # the channel stays open
    assert_quiet(client, ch, QUIET, BasicCancel, rule="CCN-02")  # one notification only


@pytest.mark.rules("CCN-01", "CCN-02")
@pytest.mark.clauses("CCN-01.a", "CCN-02.b", "CCN-02.c")
def test_without_the_capability_the_consumer_goes_silently(connect: Connect, names: Names) -> None:
    client = connect(capabilities={"consumer_cancel_notify": False})
    queue = names.queue()
    ch = consumer(client, queue, "ccn-02-silent")
    delete_queue(connect(), queue)
    assert_quiet(client, ch, QUIET, BasicCancel)
    client.rpc(ch, QueueDeclare(queue=queue), QueueDeclareOk)  # the queue again, empty of consumers
    publish_burst(client, ch, [queue])
    assert_quiet(client, ch, QUIET, BasicDeliver)  # the old consumer really is gone


@pytest.mark.rules("CCN-02")
@pytest.mark.clauses("CCN-02.d")
def test_no_notification_after_the_client_cancelled(connect: Connect, names: Names) -> None:
    client = connect(capabilities={"consumer_cancel_notify": True})
    queue = names.queue()
    ch = consumer(client, queue, "ccn-02-own")
    client.rpc(ch, BasicCancel(consumer_tag="ccn-02-own"), BasicCancelOk)
    delete_queue(client, queue)
    assert_quiet(client, ch, QUIET, BasicCancel)


# -- CCN-03 ----------------------------------------------------------------------------------
@pytest.mark.rules("CCN-03")
@pytest.mark.clauses("CCN-03.a", "CCN-03.c")
def test_cancelling_an_unknown_tag_is_answered(connect: Connect) -> None:
    client = connect()
    ch = client.channel()
    reply = client.rpc(ch, BasicCancel(consumer_tag="never-consumed"), BasicCancelOk)
    assert reply.method == BasicCancelOk(consumer_tag="never-consumed")
    client.send(ch, BasicCancel(consumer_tag="never-consumed-either", nowait=True))
    assert_quiet(client, ch, QUIET, BasicCancelOk)


@pytest.mark.rules("CCN-03")
@pytest.mark.clauses("CCN-03.b")
def test_cancelling_after_a_broker_cancel_is_answered(connect: Connect, names: Names, target: Target) -> None:
    """The race of the consumer-cancel guide: the client cancels a consumer the broker dropped."""
    client = connect(capabilities={"consumer_cancel_notify": True})
    queue = names.queue()
    ch = consumer(client, queue, "ccn-03-race")
    delete_queue(client, queue)
    if notifies(target):
        client.expect(ch, BasicCancel, timeout=target.timeout(5))
    reply = client.rpc(ch, BasicCancel(consumer_tag="ccn-03-race"), BasicCancelOk)
    assert reply.method == BasicCancelOk(consumer_tag="ccn-03-race")


@pytest.mark.rules("CCN-03")
@pytest.mark.clauses("CCN-03.b")
def test_cancelling_twice_is_answered_twice(connect: Connect, names: Names) -> None:
    client = connect()
    ch = consumer(client, names.queue(), "ccn-03-twice")
    for _ in range(2):
        assert client.rpc(ch, BasicCancel(consumer_tag="ccn-03-twice"), BasicCancelOk).method == \
            BasicCancelOk(consumer_tag="ccn-03-twice")


# -- CCN-04 ----------------------------------------------------------------------------------
@pytest.mark.rules("CCN-04")
@pytest.mark.clauses("CCN-04.a")
def test_no_delivery_follows_cancel_ok(connect: Connect, names: Names, target: Target) -> None:
    """Auto-ack consumer on a full queue, cancelled while deliveries stream: every message the
    queue gave the consumer arrives before cancel-ok; after it, nothing for that tag."""
    client = connect()
    queue, count = names.queue(), 300
    ch = client.channel()
    client.rpc(ch, QueueDeclare(queue=queue), QueueDeclareOk)
    publish_burst(client, ch, [queue] * count)
    sync(client, ch)
    client.rpc(ch, BasicConsume(queue=queue, consumer_tag="ccn-04", no_ack=True), BasicConsumeOk)
    client.send(ch, BasicCancel(consumer_tag="ccn-04"))
    delivered, deadline = 0, time.monotonic() + target.timeout(10)
    while True:
        command = client.expect(ch, timeout=max(deadline - time.monotonic(), 0))  # arrival order
        if isinstance(command.method, BasicCancelOk):
            break
        assert isinstance(command.method, BasicDeliver), command
        delivered += 1
    assert_quiet(client, ch, QUIET, BasicDeliver)
    left = client.rpc(ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk).method
    assert isinstance(left, QueueDeclareOk)
    assert delivered + left.message_count == count, (delivered, left.message_count)


# -- CCN-05 ----------------------------------------------------------------------------------
@pytest.mark.rules("CCN-05")
@pytest.mark.clauses("CCN-05.a", "CCN-05.b")
def test_client_cancel_ok(connect: Connect, names: Names, target: Target) -> None:
    if target.profile.expect("CCN-05") == "required":
        _client_cancel_ok_completes_a_broker_cancel(connect, names, target)
        return
    client = connect()  # ≤4.2 and plain 0-9-1: a method only the server sends
    ch = consumer(client, names.queue(), "ccn-05")
    client.send(ch, BasicCancelOk(consumer_tag="ccn-05"))
    with pytest.raises(ConnectionClosed) as closed:
        sync(client, ch)
    assert outcome(closed.value) == ("connection", ReplyCode.COMMAND_INVALID, *METHOD_IDS["basic.cancel-ok"])
    if target.profile.rabbitmq:
        assert closed.value.text == "COMMAND_INVALID - unimplemented method", (
            f"CCN-05: up to 4.2 a client basic.cancel-ok is an unimplemented method: connection.close 503 "
            f"'COMMAND_INVALID - unimplemented method'; the broker sent {closed.value.text!r}")


def _client_cancel_ok_completes_a_broker_cancel(connect: Connect, names: Names, target: Target) -> None:
    """4.3: a consumer timeout makes the broker send basic.cancel; the consumer stays
    registered (TMO-4.3-4) until the client's basic.cancel-ok removes it. The harness never
    sends cancel-ok for a tag the broker does not know (CCN-05 [INF])."""
    require_kind(target.profile, QUORUM)
    client = connect(capabilities={"consumer_cancel_notify": True})
    queue = names.queue()
    ch = client.channel()
    client.rpc(ch, QueueDeclare(queue=queue, durable=True, arguments={"x-queue-type": "quorum"}),
               QueueDeclareOk)
    client.rpc(ch, BasicConsume(queue=queue, consumer_tag="ccn-05", arguments={"x-consumer-timeout": 100}),
               BasicConsumeOk)
    client.send(ch, BasicPublish(routing_key=queue), BasicProperties(), b"m")
    client.expect(ch, BasicDeliver, timeout=target.timeout(5))
    assert client.expect(ch, BasicCancel, timeout=target.timeout(5)).method == BasicCancel("ccn-05", True)
    assert consumers(client, ch, queue) == 1
    client.send(ch, BasicCancelOk(consumer_tag="ccn-05"))
    assert consumers(client, ch, queue) == 0


def consumers(client: RawClient, ch: int, queue: str) -> int:
    reply = client.rpc(ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk).method
    assert isinstance(reply, QueueDeclareOk)
    return reply.consumer_count


# -- CCN-06 ----------------------------------------------------------------------------------
@pytest.mark.rules("CCN-06")
@pytest.mark.clauses("CCN-06.c")
def test_x_cancel_on_ha_failover_is_accepted(connect: Connect, names: Names, target: Target) -> None:
    """The argument is accepted (3.x) or accepted and ignored (4.x); the consumer works.
    The failover half (a mirrored leader moving) needs a cluster: not exercised here."""
    client = connect()
    queue = names.queue()
    ch = consumer(client, queue, "ccn-06", arguments={"x-cancel-on-ha-failover": True})
    publish_burst(client, ch, [queue], body=b"failover")
    delivery = client.expect(ch, BasicDeliver, timeout=target.timeout(5))
    assert isinstance(delivery.method, BasicDeliver)
    assert delivery.method.consumer_tag == "ccn-06" and delivery.body == b"failover"


# -- CCN-07 ----------------------------------------------------------------------------------
@pytest.mark.rules("CCN-07")
@pytest.mark.clauses("CCN-07.a")
def test_reusing_a_consumer_tag_is_530(connect: Connect, names: Names) -> None:
    client = connect()
    queue = names.queue()
    ch = consumer(client, queue, "ccn-07")
    client.send(ch, BasicConsume(queue=queue, consumer_tag="ccn-07"))
    with pytest.raises(ConnectionClosed) as closed:
        sync(client, ch)
    assert outcome(closed.value) == ("connection", ReplyCode.NOT_ALLOWED, *METHOD_IDS["basic.consume"])


@pytest.mark.rules("CCN-07")
@pytest.mark.clauses("CCN-07.c")
@pytest.mark.parametrize("first_exclusive", [False, True], ids=["then-exclusive", "after-exclusive"])
def test_exclusive_consume_conflict_is_403(connect: Connect, names: Names, first_exclusive: bool) -> None:
    client = connect()
    queue = names.queue()
    consumer(client, queue, "first", exclusive=first_exclusive)
    ch = client.channel()
    with pytest.raises(ChannelClosed) as closed:
        client.rpc(ch, BasicConsume(queue=queue, consumer_tag="second", exclusive=not first_exclusive),
                   BasicConsumeOk)
    assert outcome(closed.value) == ("channel", ReplyCode.ACCESS_REFUSED, *METHOD_IDS["basic.consume"])


@pytest.mark.rules("CCN-07")
@pytest.mark.clauses("CCN-07.e")
def test_consuming_from_a_missing_queue_is_404(connect: Connect, names: Names) -> None:
    client = connect()
    ch = client.channel()
    with pytest.raises(ChannelClosed) as closed:
        client.rpc(ch, BasicConsume(queue=f"{names.prefix}.missing"), BasicConsumeOk)
    assert outcome(closed.value) == ("channel", ReplyCode.NOT_FOUND, *METHOD_IDS["basic.consume"])


# -- S002-01 ---------------------------------------------------------------------------------
@pytest.mark.rules("S002-01")
@pytest.mark.clauses("S002-01.a")
def test_client_cancel_is_answered_and_stops_deliveries(connect: Connect, names: Names,
                                                        target: Target) -> None:
    client = connect()
    queue = names.queue()
    ch = consumer(client, queue, "s002")
    assert client.rpc(ch, BasicCancel(consumer_tag="s002"), BasicCancelOk).method == BasicCancelOk("s002")
    publish_burst(client, ch, [queue], body=b"after-cancel")
    assert_quiet(client, ch, QUIET, BasicDeliver)
    got = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk, BasicGetEmpty)
    assert isinstance(got.method, BasicGetOk) and got.body == b"after-cancel"


@pytest.mark.bound(5)  # consume-ok, which RabbitMQ 4.1+ may drop (S002-01)
@pytest.mark.rules("S002-01")
@pytest.mark.clauses("S002-01.a")
def test_cancel_pipelined_behind_consume_is_answered(connect: Connect, names: Names, target: Target) -> None:
    """basic.consume and basic.cancel in one write, before consume-ok arrives. RabbitMQ 3.10.8
    crashes the channel here (badkey in rabbit_channel:consumer_monitor/2, then connection.close
    541 INTERNAL_ERROR; live, every time): a bug, so the test fails there, and
    baselines/rabbitmq-3.10.8.toml lists it as a known deviation."""
    client = connect()
    queue = names.queue()
    ch = client.channel()
    client.rpc(ch, QueueDeclare(queue=queue), QueueDeclareOk)
    client.send_raw(encode_method(ch, BasicConsume(queue=queue, consumer_tag="s002-pipe"))
                    + encode_method(ch, BasicCancel(consumer_tag="s002-pipe")), channel=ch)
    assert client.expect(ch, BasicConsumeOk, timeout=target.timeout(5)).method == BasicConsumeOk("s002-pipe")
    assert client.expect(ch, BasicCancelOk, timeout=target.timeout(5)).method == BasicCancelOk("s002-pipe")
