"""A classic queue whose node fails (CLU-01..04, docs/findings-cluster.md (a), (d), (e)).

Each test declares a durable classic queue on node 3, works from node 2, stops node 3 through the
`cluster` fixture's node control and starts it again (the fixture also does at teardown). Node 3
stops cleanly: CLU-04's crash variant (404 after ~65 s of retries) is not run.
"""

from __future__ import annotations

import time

import pytest

from codec import (
    BasicAck,
    BasicCancel,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicQos,
    BasicQosOk,
    BasicReturn,
    Command,
    ConfirmSelect,
    ConfirmSelectOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    Method,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
)
from codec.constants import ReplyCode
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.plugin.cluster import Cluster
from conformance.plugin.session import Names, Target
from conformance.suite.steps.cluster import CAP, NO_CAP, QUIET, arrives, classic, counts, measured, publish
from conformance.suite.steps.queues import Delivery
from conformance.suite.steps.replies import texts_checked

STOPPED_TEXTS = ("process is stopped by supervisor", "due to timeout")  # CLU-04: clean stop, crash


def consume(client: RawClient, ch: int, queue: str, tag: str) -> None:
    client.rpc(ch, BasicConsume(queue=queue, consumer_tag=tag), BasicConsumeOk)


@pytest.mark.rules("CLU-01", "CLU-02", "CCN-02")
@pytest.mark.clauses("CCN-02.e")
def test_consumers_of_a_stopped_nodes_classic_queue_are_cancelled(cluster: Cluster, names: Names,
                                                                  target: Target) -> None:
    measured(target, "CLU-01", "CLU-02")
    cluster.require(3)
    remote, local = names.queue("remote"), names.queue("local")
    home = cluster.connect(3)
    classic(home, home.channel(), remote)
    home.close()
    cap, nocap = cluster.connect(2, capabilities=CAP), cluster.connect(2, capabilities=NO_CAP)
    ch, nch = cap.channel(), nocap.channel()
    classic(cap, ch, local)
    consume(cap, ch, remote, "cap-remote")
    consume(cap, ch, local, "cap-local")
    consume(nocap, nch, remote, "nocap-remote")
    cluster.stop(3)
    cancel = arrives(cap, ch, target.timeout(10), BasicCancel)
    assert cancel is not None, "CLU-01: no basic.cancel for the consumer of the stopped node's classic queue"
    assert cancel.method == BasicCancel(consumer_tag="cap-remote", nowait=True), "CLU-01: the cancel"
    late = arrives(nocap, nch, target.timeout(QUIET), BasicCancel)
    assert late is None, f"CLU-01: basic.cancel sent to a connection without consumer_cancel_notify: {late}"
    nocap.rpc(nch, BasicQos(prefetch_count=5), BasicQosOk)  # CLU-01: its channel stays open
    publish(cap, ch, local, b"after-stop")
    other = arrives(cap, ch, target.timeout(5), BasicDeliver)
    assert other is not None and Delivery.of(other).consumer_tag == "cap-local", \
        f"CLU-01: the channel's other consumer no longer receives: {other}"
    cluster.start(3)
    publish(cap, ch, remote, b"after-restart-1")
    publish(cap, ch, remote, b"after-restart-2")
    for client, channel in ((cap, ch), (nocap, nch)):
        got = arrives(client, channel, target.timeout(QUIET), BasicDeliver)
        assert got is None, f"CLU-02: a consumer cancelled by the node failure receives again: {got}"
    assert counts(cap, remote) == (2, 0), "CLU-02: (message_count, consumer_count) after the node returned"


def refused_on(queue: str) -> list[tuple[str, Method, tuple[int, int]]]:
    """CLU-04: what is refused on a durable classic queue whose node is down, with (class, method)."""
    return [("queue.declare passive", QueueDeclare(queue=queue, passive=True), (50, 10)),
            ("queue.declare", QueueDeclare(queue=queue, durable=True, arguments={"x-queue-type": "classic"}), (50, 10)),
            ("basic.consume", BasicConsume(queue=queue), (60, 20)), ("basic.get", BasicGet(queue=queue), (60, 70))]


def refusal(client: RawClient, method: Method, seconds: float) -> ChannelClosed | Command:
    """The channel's close for `method` on a fresh channel, or the reply it got instead."""
    probe = client.channel()
    try:
        return client.rpc(probe, method, QueueDeclareOk, BasicConsumeOk, BasicGetOk, BasicGetEmpty, timeout=seconds)
    except ChannelClosed as closed:
        return closed


def fanout_to(client: RawClient, ch: int, exchange: str, *queues: str) -> None:
    client.rpc(ch, ExchangeDeclare(exchange=exchange, exchange_type="fanout", auto_delete=True), ExchangeDeclareOk)
    for queue in queues:
        client.rpc(ch, QueueBind(queue=queue, exchange=exchange), QueueBindOk)


@pytest.mark.rules("CLU-03", "CLU-04")
def test_a_stopped_nodes_classic_queue_nacks_publishes_and_answers_404(cluster: Cluster, names: Names,
                                                                      target: Target) -> None:
    measured(target, "CLU-03", "CLU-04")
    cluster.require(3)
    remote, local, fan = names.queue("remote"), names.queue("local"), names.exchange("fan")
    home = cluster.connect(3)
    hch = home.channel()
    classic(home, hch, remote)
    home.rpc(hch, ConfirmSelect(), ConfirmSelectOk)
    publish(home, hch, remote, b"before-stop")
    home.expect(hch, BasicAck, timeout=target.timeout(5))
    home.close()
    client = cluster.connect(2)
    ch = client.channel()
    classic(client, ch, local)
    fanout_to(client, ch, fan, remote, local)
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    cluster.stop(3)
    for seqno, (exchange, key, mandatory) in enumerate([("", remote, True), (fan, "", False)], start=1):
        publish(client, ch, key, f"d{seqno}".encode(), exchange=exchange, mandatory=mandatory)
        confirm = arrives(client, ch, target.timeout(5), BasicAck, BasicNack, BasicReturn)
        assert confirm is not None and isinstance(confirm.method, BasicNack), \
            f"CLU-03: publish #{seqno} to {exchange or 'the default exchange'} routed to the stopped node's queue: " \
            f"got {confirm and confirm.method}, expected basic.nack"
        assert confirm.method.delivery_tag == seqno, f"CLU-03: the nack's delivery tag: {confirm.method}"
    assert counts(client, local)[0] == 1, "CLU-03: the live queue keeps its copy of the fanout publish"
    for what, method, ids in refused_on(remote):
        closed = refusal(client, method, target.timeout(10))
        assert isinstance(closed, ChannelClosed), \
            f"CLU-04: {what} on the stopped node's queue: got {closed}, expected 404 NOT_FOUND"
        assert (closed.code, (closed.class_id, closed.method_id)) == (ReplyCode.NOT_FOUND, ids), \
            f"CLU-04: {what}: (code, (class, method))"
        if texts_checked(target):
            assert any(t in closed.text for t in STOPPED_TEXTS), f"CLU-04: {what}: the text {closed.text!r}"
    cluster.start(3)
    deadline, found = time.monotonic() + target.timeout(10), (0, 0)
    while time.monotonic() < deadline and (found := counts(client, remote)) != (1, 0):
        time.sleep(0.2)
    assert found[0] <= 1, f"CLU-03: publishes routed to the queue while its node was down were stored: {found}"
    assert found == (1, 0), "CLU-04: the queue is back with its persistent message (message_count, consumer_count)"
