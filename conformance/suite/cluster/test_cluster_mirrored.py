"""A classic mirrored queue failing over (CCN-06.a/b: RabbitMQ up to 3.13; docs/findings-cluster.md (h)).

The queue is mirrored on every node by an `ha-mode: all` policy put before it is declared: the
leader's declare returns only once its mirrors run (rabbit_mirror_queue_master:init_with_existing_bq
adds them with `sync`, v3.10.8), so the mirror on node 1 is in sync, empty, when node 2 stops.
Its leader lives on node 2 (where it is declared); two consumers on node 1, one with
`x-cancel-on-ha-failover: true`, one without. When node 2 stops, the channel on node 1 sees its
queue's leader go (`queue_down`) and, per consumer (rabbit_channel:queue_down_consumer_action,
v3.10.8 l. 1887; the same in v3.12.14 and v3.13.7): the argument true cancels it (basic.cancel, the
connection has consumer_cancel_notify); otherwise it consumes again on the promoted mirror, under
the same tag, and says nothing.
"""

from __future__ import annotations

import pytest

from codec import BasicCancel, BasicConsume, BasicConsumeOk, BasicDeliver, QueueDeclare, QueueDeclareOk
from conformance.plugin.cluster import Cluster
from conformance.plugin.session import Names, Target
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.cluster import CAP, QUIET, arrives, counts, measured, publish
from conformance.suite.steps.queues import Delivery
from conformance.suite.steps.timeouts import exact

LEADER = 2  # the node the queue is declared on, then stopped
FAILOVER = "x-cancel-on-ha-failover"


@pytest.mark.rules("CCN-06")
@pytest.mark.clauses("CCN-06.a", "CCN-06.b")
def test_a_mirrored_queues_failover_cancels_only_the_consumers_that_asked(cluster: Cluster, names: Names,
                                                                          target: Target,
                                                                          request: pytest.FixtureRequest) -> None:
    measured(target, "CCN-06")
    cluster.require(LEADER)
    admin: RestoringAdmin = request.getfixturevalue("admin")  # the ha policy; only where the rule is judged
    queue = names.queue("mirrored")
    admin.put_policy(target.vhost, f"{queue}.ha", exact(queue), {"ha-mode": "all"}, "queues", 100)
    home = cluster.connect(LEADER)
    home.rpc(home.channel(), QueueDeclare(queue=queue, arguments={"x-queue-type": "classic"}), QueueDeclareOk)
    home.close()
    client = cluster.connect(1, capabilities=CAP)
    ch = client.channel()
    client.rpc(ch, BasicConsume(queue=queue, consumer_tag="cancel-me", arguments={FAILOVER: True}), BasicConsumeOk)
    client.rpc(ch, BasicConsume(queue=queue, consumer_tag="keep-me"), BasicConsumeOk)
    cluster.stop(LEADER)
    cancel = arrives(client, ch, target.timeout(10), BasicCancel)
    assert cancel is not None, \
        f"CCN-06.a: node {LEADER}, the leader of the mirrored queue {queue}, stopped and its mirror on node 1 took " \
        f"over; the consumer 'cancel-me' (consumed with {FAILOVER}=true on a connection with " \
        "consumer_cancel_notify) must get basic.cancel; nothing came within the wait"
    assert cancel.method == BasicCancel(consumer_tag="cancel-me", nowait=True), \
        f"CCN-06.a/b: after the failover only 'cancel-me' (with {FAILOVER}=true) may be cancelled; got {cancel.method}"
    late = arrives(client, ch, target.timeout(QUIET), BasicCancel)
    assert late is None, \
        f"CCN-06.b: the consumer 'keep-me' (no {FAILOVER}) must be registered again on the new leader without a " \
        f"word; it got {late.method if late else late}"
    assert counts(client, queue) == (0, 1), \
        "CCN-06.b: after the failover the queue must have one consumer ('keep-me'), (message_count, consumer_count)"
    publish(client, ch, queue, b"after-failover")
    got = arrives(client, ch, target.timeout(5), BasicDeliver)
    assert got is not None, \
        f"CCN-06.b: a message published to {queue} after the failover did not reach 'keep-me' within the wait"
    delivery = Delivery.of(got)
    assert (delivery.consumer_tag, got.body) == ("keep-me", b"after-failover"), \
        f"CCN-06.b: the message after the failover must go to 'keep-me', under its tag: got {delivery.consumer_tag!r} " \
        f"with {got.body!r}"
