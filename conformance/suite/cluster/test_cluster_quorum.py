"""A quorum queue whose nodes fail (CLU-05..08, docs/findings-cluster.md (b), (c), (f)).

The queue is declared on the node that will stop, so its leader is there; the consumer and the
publisher work from node 1, which never stops. CLU-07 stops nodes 2 and 3 (a 3-member queue
without a majority: the member set of a smaller queue is not known without the management API).
"""

from __future__ import annotations

import time

import pytest

from codec import (
    BasicAck,
    BasicCancel,
    BasicDeliver,
    BasicNack,
    BasicReject,
)
from conformance.plugin.cluster import Cluster
from conformance.plugin.session import Names, Target
from conformance.suite.steps.cluster import (
    CAP,
    QUIET,
    arrives,
    confirming,
    consumer,
    counts,
    delivered,
    measured,
    publish,
    quorum,
)
from conformance.suite.steps.queues import Delivery

DELIVERY_COUNT, ACQUIRED_COUNT = "x-delivery-count", "x-acquired-count"


@pytest.mark.rules("CLU-05", "CLU-06")
def test_a_quorum_leaders_failure_keeps_consumers_and_unacked_deliveries(cluster: Cluster, names: Names,
                                                                        target: Target) -> None:
    measured(target, "CLU-05", "CLU-06")
    cluster.require(3)
    queue = names.queue("qq")
    home = cluster.connect(3)
    quorum(home, home.channel(), queue)
    home.close()
    client = cluster.connect(1, capabilities=CAP)
    pub = confirming(client)
    for n in range(1, 6):
        publish(client, pub, queue, f"m{n}".encode())
    cch = consumer(client, queue, "qq", prefetch=10)
    held = {d.body: d.tag for d in (delivered(client, cch, target.timeout(5), "CLU-05", "before") for _ in range(5))}
    cluster.stop(3)
    quiet = arrives(client, cch, target.timeout(QUIET), BasicDeliver, BasicCancel)
    assert quiet is None, f"CLU-05: the consumer saw the leader change: {quiet}"
    publish(client, pub, queue, b"m6")
    m6 = delivered(client, cch, target.timeout(15), "CLU-05", "a message published after the failover")
    assert (m6.body, m6.redelivered) == (b"m6", False), "CLU-05: the delivery after the failover"
    client.send(cch, BasicAck(delivery_tag=held[b"m1"]))
    client.send(cch, BasicNack(delivery_tag=held[b"m2"], requeue=True))
    m2 = delivered(client, cch, target.timeout(5), "CLU-05", "m2 nacked (requeue) by its pre-failover tag")
    assert m2.body == b"m2", "CLU-05: a nack of a pre-failover tag returns that message"
    assert m2.redelivered and m2.headers.get(DELIVERY_COUNT, 0) == 0, \
        f"CLU-06: m2 after nack requeue=true: redelivered, x-delivery-count unchanged: {m2}"
    client.send(cch, BasicReject(delivery_tag=held[b"m3"], requeue=True))
    m3 = delivered(client, cch, target.timeout(5), "CLU-05", "m3 rejected (requeue) by its pre-failover tag")
    assert (m3.body, m3.redelivered, m3.headers.get(DELIVERY_COUNT)) == (b"m3", True, 1), \
        f"CLU-06: m3 after reject requeue=true: redelivered, x-delivery-count 1: {m3}"
    if target.profile.at_least("4.3"):  # required there (as RQ-05 on one node); other versions not measured
        assert m3.headers.get(ACQUIRED_COUNT) == 1, \
            f"CLU-06: x-acquired-count counts m3's one earlier delivery: 1 after its reject, got {m3}"
    client.close_channel(cch)
    other = cluster.connect(2)
    rest = consumer(other, queue, "qq-after", prefetch=10)
    after = {}
    while (got := arrives(other, rest, target.timeout(3), BasicDeliver)) is not None:
        after[Delivery.of(got).body] = Delivery.of(got)
    assert b"m1" not in after, "CLU-05: m1, acked by its pre-failover tag, came back"
    assert sorted(after) == [b"m2", b"m3", b"m4", b"m5", b"m6"], \
        f"CLU-05: the unacked deliveries return when the consumer's channel closes: {sorted(after)}"
    assert after[b"m4"].redelivered and after[b"m4"].headers.get(DELIVERY_COUNT) == 1, \
        f"CLU-06: m4 returned by the channel's closure: redelivered, x-delivery-count 1: {after[b'm4']}"


@pytest.mark.rules("CLU-07")
def test_a_quorum_queue_without_a_majority_neither_delivers_nor_confirms(cluster: Cluster, names: Names,
                                                                        target: Target) -> None:
    measured(target, "CLU-07")
    cluster.require(3)
    queue = names.queue("qq")
    client = cluster.connect(1, capabilities=CAP)
    quorum(client, client.channel(), queue)
    pub = confirming(client)
    for body in (b"held-by-consumer", b"ready"):
        publish(client, pub, queue, body)
        client.expect(pub, BasicAck, timeout=target.timeout(5))
    cch = consumer(client, queue, "qq", prefetch=1)
    first = delivered(client, cch, target.timeout(5), "CLU-07", "before the stop")
    cluster.stop(2)
    cluster.stop(3)
    client.send(cch, BasicAck(delivery_tag=first.tag))  # frees the prefetch: "ready" could come now
    publish(client, pub, queue, b"no-majority-1")
    publish(client, pub, queue, b"no-majority-2")
    confirm = arrives(client, pub, target.timeout(3), BasicAck, BasicNack)
    assert confirm is None, f"CLU-07: a publish to a quorum queue without a majority was confirmed: {confirm}"
    got = arrives(client, cch, target.timeout(QUIET), BasicDeliver, BasicCancel)
    assert got is None, f"CLU-07: a quorum queue without a majority delivered or cancelled: {got}"
    assert counts(client, queue)[1] == 1, "CLU-07: queue.declare passive answers, the consumer is kept"
    cluster.start(2)
    settled: set[int] = set()
    deadline = time.monotonic() + target.timeout(20)
    while settled != {3, 4} and (c := arrives(client, pub, max(deadline - time.monotonic(), 0), BasicAck, BasicNack)):
        assert isinstance(c.method, BasicAck), f"CLU-07: a held publish was nacked once the majority returned: {c}"
        settled |= set(range(3, c.method.delivery_tag + 1)) if c.method.multiple else {c.method.delivery_tag}
    assert settled == {3, 4}, f"CLU-07: the held publishes are confirmed once a majority is back (acked {settled})"
    bodies = []
    for _ in range(3):
        got_one = delivered(client, cch, target.timeout(10), "CLU-07", "once the majority is back")
        bodies.append(got_one.body)
        client.send(cch, BasicAck(delivery_tag=got_one.tag))
    assert bodies == [b"ready", b"no-majority-1", b"no-majority-2"], "CLU-07: delivered once the majority is back"


@pytest.mark.rules("CLU-08")
def test_a_quorum_consumers_timeout_survives_a_leader_change(cluster: Cluster, names: Names, target: Target) -> None:
    measured(target, "CLU-08")
    cluster.require(3)
    timeout_ms = 12_000  # longer than a RabbitMQ node's stop (5 s), so the cancel comes after it
    queue = names.queue("qq")
    home = cluster.connect(3)
    quorum(home, home.channel(), queue, **{"x-consumer-timeout": timeout_ms})
    home.close()
    client = cluster.connect(1, capabilities=CAP)
    cch = consumer(client, queue, "qt", prefetch=1)
    publish(client, client.channel(), queue, b"f1")
    delivered(client, cch, target.timeout(5), "CLU-08", "f1")
    checked_out = time.monotonic()
    cluster.stop(3)
    cancel = arrives(client, cch, timeout_ms / 1000 + target.timeout(10), BasicCancel)
    elapsed = time.monotonic() - checked_out
    assert cancel is not None, "CLU-08: no basic.cancel: the consumer timeout was lost with the leader change"
    low, high = timeout_ms / 1000 - 0.5, timeout_ms / 1000 + target.timeout(3)
    assert low <= elapsed <= high, \
        f"CLU-08: the timeout fired {elapsed:.2f} s after the delivery, expected {timeout_ms / 1000:.0f} s (from the checkout)"
