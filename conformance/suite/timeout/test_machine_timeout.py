"""Model-vs-broker machine for 4.3 consumer timeouts (TMO-03, TMO-4.3-2..5).

TimeoutMachine: one quorum queue per example whose queue argument, `consumer-timeout` policy and
global value are drawn (policy and global only where `--broker-admin` can set them), two
connections (with and without consumer_cancel_notify), consumers with or without their own
`x-consumer-timeout`, basic.get, acks of live deliveries, late settles of timed-out ones,
cancel-ok, client cancels and channel closes, in any order.

The oracle is `conformance.model.timeouts` (effective value and reaction) plus a small state
model here: consumers (prefetch 1) are active, paused (timed-out tags unsettled: no deliveries,
TMO-4.3-2/5) or gone; every delivery is live or timed out. Values are SHORT (fires within the
step) or LONG (never within the run), so after every step the run is made quiescent: every live
delivery with a SHORT timeout must have timed out, as basic.cancel (capability and a registered
consumer) or channel.close 406 "-1 ms" (TMO-4.3-3); no ready message may wait while an active
consumer has room; the queue's ready and consumer counts must match the model. "Partial timeout"
is exercised per consumer: a SHORT consumer's deliveries are returned while a LONG consumer's
deliveries on the same channel and queue stay checked out (acking them later removes them).
Waits are bounded (scaled by the target's timeout); rules are synchronous (docs/design.md decision 5).
ClusterTimeoutMachine (a run with a cluster): the queues' leader on node 2 and a step that
stops and starts it while deliveries are live (CLU-05: nothing changes); without a cluster
TimeoutMachine, unchanged (run_machine's factory seeds its examples).
The machine runs on the shared base (`machine_timeout.TimeoutWire`, a `ModelMachine`): picks
resolved from its state, the program of steps, the budget and the frames of each example.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from codec import (
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicReject,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.model import timeouts as model
from conformance.plugin.session import Target
from conformance.plugin.verdicts import not_applicable
from conformance.run.admin import Unavailable
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.machine_base import CONTROL, MachineTarget, from_machine, run_machine, step
from conformance.suite.steps.machine_cluster import MAX_STOPS, MachineCluster, cluster_for
from conformance.suite.steps.timeouts import LONG, SHORT, can_set_global, exact, set_global
from conformance.suite.timeout.machine_timeout import PROFILE, Consumer, Held, Queue, TimeoutWire

LEVEL = st.sampled_from([None, SHORT, LONG])
CONNECTION = st.sampled_from(["cap", "nocap"])
QUEUE = st.sampled_from(["a", "b"])
DELIVERY = from_machine(lambda m: m.deliveries())  # (connection, channel, delivery tag)
CONSUMER = from_machine(lambda m: sorted(m.consumers))
MAX_CONSUMERS = 4


class TimeoutMachine(TimeoutWire):
    """TMO-03 and TMO-4.3-2..5: the client's side (see the module docstring)."""

    def __init__(self, target: MachineTarget, admin: RestoringAdmin, can_policy: bool, can_global: bool,
                 original_global: int | None) -> None:
        super().__init__(target)
        self.admin, self.can_policy, self.can_global = admin, can_policy, can_global
        self.original_global = original_global

    # -- setup ------------------------------------------------------------------------------------
    @initialize(a_arg=LEVEL, a_policy=LEVEL, b_arg=LEVEL, b_policy=LEVEL, global_=st.sampled_from([None, SHORT]))
    @step
    def setup(self, a_arg: int | None, a_policy: int | None, b_arg: int | None, b_policy: int | None,
              global_: int | None) -> None:
        """Two quorum queues with their own queue argument and policy; one global value."""
        for logical, arg, policy in (("a", a_arg, a_policy), ("b", b_arg, b_policy)):
            queue = Queue(f"{self.prefix}.{logical}", arg, policy if self.can_policy else None)
            self.queues[logical] = queue
            self.real[logical] = queue.name  # deleted at cleanup
            args: dict[str, Any] = {"x-queue-type": "quorum", "x-delivery-limit": 1000}  # RQ-06: not here
            if arg is not None:
                args[model.ARGUMENT] = arg
            self.declare_quorum(queue.name, args)
            if queue.policy is not None:
                self.admin.put_policy("/", f"{queue.name}.tmo", exact(queue.name), {model.POLICY_KEY: queue.policy},
                                      "queues", 100)
        if self.can_global:
            self.global_ = global_
            if global_ is None:
                self.admin.adapter.set_global("consumer_timeout", self.original_global)
            else:
                self.admin.set_global("consumer_timeout", global_)

    def declare_quorum(self, name: str, arguments: dict[str, Any]) -> None:
        self.clients["cap"].rpc(CONTROL, QueueDeclare(queue=name, durable=True, arguments=arguments), QueueDeclareOk)

    # -- rules ------------------------------------------------------------------------------------
    @rule(conn=CONNECTION, queue=QUEUE, arg=LEVEL, count=st.integers(0, 2))
    @step
    def consume(self, conn: str, queue: str, arg: int | None, count: int) -> None:
        """A consumer (x-consumer-timeout = arg) on the connection's channel, then `count` publishes."""
        if len(self.consumers) < MAX_CONSUMERS:
            ch = self.channel(conn)
            tag = f"c{next(self.body_ids)}"
            args = {} if arg is None else {model.ARGUMENT: arg}
            self.clients[conn].send(ch, BasicConsume(queue=self.queues[queue].name, consumer_tag=tag, arguments=args))
            self.consumers[tag] = Consumer(tag, conn, ch, queue, self.is_short(queue, arg))
            self.expect_reply(conn, ch, BasicConsumeOk)
        self.publish_some(queue, count)

    @rule(queue=QUEUE, count=st.integers(1, 3))
    @step
    def publish(self, queue: str, count: int) -> None:
        self.publish_some(queue, count)

    @rule(conn=CONNECTION, queue=QUEUE)
    @step
    def get(self, conn: str, queue: str) -> None:
        """basic.get (publishing one first when nothing is ready): the queue-level value applies
        (no consumer argument); its timeout closes the channel even with the capability
        (TMO-4.3-3)."""
        q = self.queues[queue]
        if not q.ready:
            self.publish_some(queue, 1)
            self.settle()
        ch = self.channel(conn)
        self.clients[conn].send(ch, BasicGet(queue=q.name))
        reply = self.expect_reply(conn, ch, BasicGetOk, BasicGetEmpty)
        if reply is not None and isinstance(reply.method, BasicGetOk):
            assert q.ready > 0, f"basic.get-ok although the model has no ready message in {queue} (TMO-4.3-2)"
            q.taken()
            self.held[(conn, ch)][reply.method.delivery_tag] = Held(queue, None, self.is_short(queue, None))
        elif reply is not None:
            assert q.ready == 0, f"basic.get-empty although {q.ready} messages are ready in {queue} (TMO-4.3-2)"

    @rule(delivery=DELIVERY, reject=st.booleans())
    @step
    def settle_delivery(self, delivery: tuple[str, int, int] | None, reject: bool) -> None:
        """A live delivery: ack (removed; room again) or reject-requeue (back, ready). A timed-out
        one (TMO-4.3-5): accepted (no 406), removes nothing, and un-pauses its consumer once all
        its timed-out tags are settled. RabbitMQ 4.3.6 never resumes it after a reject with requeue
        (a known bug, baselined: docs/findings-rabbitmq-4.3.6.md, docs/findings-cluster.md)."""
        if delivery is None:
            return
        conn, ch, tag = delivery
        method = BasicReject(delivery_tag=tag, requeue=True) if reject else BasicAck(delivery_tag=tag)
        self.clients[conn].send(ch, method)
        item = self.held[(conn, ch)].pop(tag)
        if item.timed_out:
            consumer = self.consumers.get(item.consumer or "")
            if consumer is not None:
                consumer.timed_out.discard(tag)
                consumer.resumed = consumer.resumed or not consumer.timed_out
                consumer.requeued_late = consumer.requeued_late or reject
        elif reject:
            self.queues[item.queue].returned(item)
        self.ping(conn, ch)

    @rule(tag=CONSUMER, cancel_ok=st.booleans())
    @step
    def cancel(self, tag: str | None, cancel_ok: bool) -> None:
        """TMO-4.3-4: a consumer the broker cancelled goes with the client's cancel-ok; any
        consumer goes with the client's own basic.cancel (answered with cancel-ok)."""
        if tag is None:
            return
        consumer = self.consumers.pop(tag)
        client = self.clients[consumer.conn]
        if cancel_ok and consumer.cancelled_by_broker:
            client.send(consumer.ch, BasicCancelOk(consumer_tag=tag))
            self.ping(consumer.conn, consumer.ch)
        else:
            client.send(consumer.ch, BasicCancel(consumer_tag=tag))
            self.expect_reply(consumer.conn, consumer.ch, BasicCancelOk)

    @rule(conn=CONNECTION)
    @step
    def close_channel(self, conn: str) -> None:
        if conn not in self.work:
            return
        ch = self.work[conn]
        self.clients[conn].close_channel(ch)
        self.channel_gone(conn, ch)


class ClusterTimeoutMachine(TimeoutMachine):
    """TimeoutMachine with its quorum queues declared on node 2 (their leader there) and a step that
    stops and starts node 2 while deliveries are live: the queues fail over with a majority and
    nothing changes (CLU-05): the consumers stay, their live deliveries stay checked out (no
    redelivery, no more than prefetch 1) and are returned as before when rejected or their
    channel ends."""

    NODE = 2

    def __init__(self, target: MachineTarget, admin: RestoringAdmin, can_policy: bool, can_global: bool,
                 original_global: int | None, cluster: MachineCluster) -> None:
        super().__init__(target, admin, can_policy, can_global, original_global)
        self.nodes = cluster
        self.cluster = cluster.cluster(target.timeout_scale, self.recorder)
        self.stops = 0

    def declare_quorum(self, name: str, arguments: dict[str, Any]) -> None:
        home = self.cluster.connect(self.NODE)  # its leader is where it is declared
        home.rpc(home.channel(), QueueDeclare(queue=name, durable=True, arguments=arguments), QueueDeclareOk)
        home.close()

    @rule()
    @step
    def stop_and_start_node_2(self) -> None:
        live = [h for items in self.held.values() for h in items.values() if not h.timed_out]
        if self.stops >= MAX_STOPS or not live:
            return
        self.stops += 1
        self.nodes.stop(self.cluster, self.NODE)
        self.cluster.start(self.NODE)
        for item in live:
            item.failed_over = True  # CLU-05: still checked out, its deadline kept (CLU-08)
            if item.consumer in self.consumers:
                self.consumers[item.consumer].failed_over = True

    def cleanup(self) -> None:
        self.cluster.restore()
        super().cleanup()


def admin_can_put_policy(admin: RestoringAdmin) -> bool:
    try:
        admin.get_policy("/", "amqpc.probe")
    except Unavailable:
        return False
    return True


@pytest.mark.broker_wide
@pytest.mark.rules("TMO-03", "TMO-4.3-2", "TMO-4.3-3", "TMO-4.3-4", "TMO-4.3-5")
def test_timeout_precedence_and_reactions_match_the_model(target: Target, admin: RestoringAdmin,
                                                          request: pytest.FixtureRequest) -> None:
    if target.profile.name != PROFILE:
        not_applicable(f"the timeout machine models the 4.3 rules, not {target.profile.name}")
    can_global = can_set_global(admin)
    if can_global:
        admin.claim_broker_wide()  # its examples set the global value: alone from the start, before any delivery
    original = admin.get_global("consumer_timeout") if can_global else None
    if original is not None and original <= 10 * TimeoutWire.SETTLE_SECONDS * 1000:
        set_global(admin, LONG)  # a global as short as a step would time out the LONG level: raised for this test,
        original = LONG  # restored at teardown (RestoringAdmin); the rules are judged, never set aside
    machine = MachineTarget(target.url, target.profile.name, target.timeout_scale)
    arguments = {"admin": admin, "can_policy": admin_can_put_policy(admin), "can_global": can_global,
                 "original_global": original}
    cluster = cluster_for(target, request, "CLU-05")
    if cluster is None:
        run_machine(TimeoutMachine, machine, examples=15, steps=10, **arguments)
    else:  # with a cluster: node stops too
        run_machine(ClusterTimeoutMachine, machine, examples=15, steps=10, cluster=cluster, **arguments)
