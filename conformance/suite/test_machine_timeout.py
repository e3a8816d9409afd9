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
Waits are bounded (scaled by the target's timeout); rules are synchronous (DESIGN decision 5).
"""

from __future__ import annotations

import itertools
import select
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from codec import (
    BasicAck,
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
    BasicQos,
    BasicQosOk,
    BasicReject,
    ChannelClose,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
)
from conformance.drivers.raw import ChannelClosed, DriverError, Recorder
from conformance.model import timeouts as model
from conformance.plugin.admin import RestoringAdmin, Unavailable
from conformance.plugin.hooks import Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.machine_base import FrameLog, MachineClient, machine_settings
from conformance.suite.timeout_steps import LONG, SHORT, can_set_global, exact
from conformance.suite.machine_support import Budget

PROFILE = "rabbitmq-4.3"
CONNECTIONS = ("cap", "nocap")
LEVEL = st.sampled_from([None, SHORT, LONG])
CONNECTION = st.sampled_from(CONNECTIONS)
QUEUE = st.sampled_from(["a", "b"])
SETTLE_SECONDS = 3.0  # per step, scaled: SHORT timeouts fire well within it
MAX_CONSUMERS = 4


PICK = st.integers(0, 7)  # an index into what the machine holds at that step (see `pick`)


def pick(items: list[Any], index: int) -> Any:
    """items[index] (wrapping), or None when there are none. The draw is a plain integer, not
    a value from the machine's state: which consumer got which message depends on the broker,
    and a strategy built from that state would make Hypothesis's replay of a failure flaky."""
    return items[index % len(items)] if items else None


@dataclass
class Env:
    url: str
    scale: float
    admin: RestoringAdmin
    can_policy: bool
    can_global: bool
    original_global: int | None
    recorder: Recorder = field(default_factory=Recorder)
    queues: list[str] = field(default_factory=list)


@dataclass
class Queue:
    name: str
    arg: int | None  # x-consumer-timeout queue argument
    policy: int | None  # consumer-timeout policy
    ready: int = 0


@dataclass
class Consumer:
    tag: str
    conn: str
    ch: int
    queue: str  # logical name
    short: bool  # its effective timeout fires within a step
    timed_out: set[int] = field(default_factory=set)  # TMO-4.3-5: paused while non-empty
    cancelled_by_broker: bool = False


@dataclass
class Held:
    """A delivery on a channel: live (checked out) or timed out (returned, still on the channel)."""

    queue: str  # logical name
    consumer: str | None  # None: basic.get
    short: bool
    timed_out: bool = False


class TimeoutMachine(RuleBasedStateMachine):
    def __init__(self, env: Env) -> None:
        super().__init__()
        self.env = env
        self.clients: dict[str, MachineClient] = {}
        self.work: dict[str, int] = {}  # connection -> its consuming channel
        self.consumers: dict[str, Consumer] = {}
        self.held: dict[tuple[str, int], dict[int, Held]] = {}  # (conn, channel) -> tag -> Held
        self.queues: dict[str, Queue] = {}
        self.global_: int | None = None
        self.ids = itertools.count(1)
        self.prefix = f"amqpc.mt.{uuid.uuid4().hex[:10]}"
        for conn in CONNECTIONS:
            caps = {} if conn == "cap" else {"consumer_cancel_notify": False}
            client = MachineClient(env.url, capabilities=caps or None, recorder=env.recorder,
                                   timeout=self.timeout(5.0))
            self.clients[conn] = client.connect()
        self.control = self.clients["cap"].channel()
        self.clients["cap"].rpc(self.control, ConfirmSelect(), ConfirmSelectOk)
        self.seqno = 0
        note(FrameLog(env.recorder))

    def timeout(self, seconds: float) -> float:
        return seconds * self.env.scale

    # -- setup ------------------------------------------------------------------------------------
    @initialize(a_arg=LEVEL, a_policy=LEVEL, b_arg=LEVEL, b_policy=LEVEL, global_=st.sampled_from([None, SHORT]))
    def setup(self, a_arg: int | None, a_policy: int | None, b_arg: int | None, b_policy: int | None,
              global_: int | None) -> None:
        """Two quorum queues with their own queue argument and policy; one global value."""
        for logical, arg, policy in (("a", a_arg, a_policy), ("b", b_arg, b_policy)):
            queue = Queue(f"{self.prefix}.{logical}", arg, policy if self.env.can_policy else None)
            self.queues[logical] = queue
            args: dict[str, Any] = {"x-queue-type": "quorum", "x-delivery-limit": 1000}  # RQ-06: not here
            if arg is not None:
                args[model.ARGUMENT] = arg
            self.env.queues.append(queue.name)
            self.clients["cap"].rpc(self.control, QueueDeclare(queue=queue.name, durable=True, arguments=args),
                                    QueueDeclareOk)
            if queue.policy is not None:
                self.env.admin.put_policy("/", f"{queue.name}.tmo", exact(queue.name),
                                          {model.POLICY_KEY: queue.policy}, "queues", 100)
        if self.env.can_global:
            self.global_ = global_
            if global_ is None:
                self.env.admin.adapter.set_global("consumer_timeout", self.env.original_global)
            else:
                self.env.admin.set_global("consumer_timeout", global_)

    def is_short(self, queue: str, consumer_arg: int | None) -> bool:
        """TMO-03 (the oracle): does a delivery from `queue` to this consumer (or basic.get,
        consumer_arg None) time out within a step?"""
        q = self.queues[queue]
        value = model.effective_consumer_timeout(PROFILE, consumer_arg, q.arg, q.policy, self.global_)
        return value is not None and value <= SHORT

    def channel(self, conn: str) -> int:
        """The connection's consuming channel (reopened after a close), prefetch 1."""
        if conn not in self.work:
            client = self.clients[conn]
            ch = client.channel()
            client.rpc(ch, BasicQos(prefetch_count=1), BasicQosOk)
            self.work[conn] = ch
            self.held[(conn, ch)] = {}
        return self.work[conn]

    # -- rules ------------------------------------------------------------------------------------
    @rule(conn=CONNECTION, queue=QUEUE, arg=LEVEL, count=st.integers(0, 2))
    def consume(self, conn: str, queue: str, arg: int | None, count: int) -> None:
        """A consumer (x-consumer-timeout = arg) on the connection's channel, then `count` publishes."""
        if len(self.consumers) < MAX_CONSUMERS:
            ch = self.channel(conn)
            tag = f"c{next(self.ids)}"
            args = {} if arg is None else {model.ARGUMENT: arg}
            self.clients[conn].send(ch, BasicConsume(queue=self.queues[queue].name, consumer_tag=tag,
                                                     arguments=args))
            self.consumers[tag] = Consumer(tag, conn, ch, queue, self.is_short(queue, arg))
            self.expect_reply(conn, ch, BasicConsumeOk)
        self.publish_some(queue, count)
        self.settle()

    @rule(queue=QUEUE, count=st.integers(1, 3))
    def publish(self, queue: str, count: int) -> None:
        self.publish_some(queue, count)
        self.settle()

    def publish_some(self, queue: str, count: int) -> None:
        if not count:
            return
        client = self.clients["cap"]
        for _ in range(count):
            client.send(self.control, BasicPublish(routing_key=self.queues[queue].name), BasicProperties(),
                        f"m{next(self.ids)}".encode())
        self.seqno += count
        acked = 0
        while acked < self.seqno:
            m = client.expect(self.control, BasicAck).method
            assert isinstance(m, BasicAck)
            acked = m.delivery_tag
        self.queues[queue].ready += count

    @rule(conn=CONNECTION, queue=QUEUE)
    def get(self, conn: str, queue: str) -> None:
        """basic.get (publishing one first when nothing is ready): the queue-level value applies
        (no consumer argument); its timeout closes the channel even with the capability
        (TMO-4.3-3)."""
        q = self.queues[queue]
        if not q.ready:
            self.publish_some(queue, 1)
            self.settle()
        ch = self.channel(conn)
        client = self.clients[conn]
        client.send(ch, BasicGet(queue=q.name))
        reply = self.expect_reply(conn, ch, BasicGetOk, BasicGetEmpty)
        if reply is not None and isinstance(reply.method, BasicGetOk):
            assert q.ready > 0, f"basic.get-ok although the model has no ready message in {queue}"
            q.ready -= 1
            self.held[(conn, ch)][reply.method.delivery_tag] = Held(queue, None, self.is_short(queue, None))
        elif reply is not None:
            assert q.ready == 0, f"basic.get-empty although {q.ready} messages are ready in {queue}"
        self.settle()

    @rule(index=PICK, reject=st.booleans())
    def settle_delivery(self, index: int, reject: bool) -> None:
        """A live delivery: ack (removed; room again) or reject-requeue (back, ready). A timed-out
        one (TMO-4.3-5): accepted (no 406), removes nothing, and un-pauses its consumer once all
        its timed-out tags are settled."""
        held = pick(self.deliveries(), index)
        if held is None:
            return
        conn, ch, tag = held
        method = BasicReject(delivery_tag=tag, requeue=True) if reject else BasicAck(delivery_tag=tag)
        self.clients[conn].send(ch, method)
        item = self.held[(conn, ch)].pop(tag)
        if item.timed_out:
            consumer = self.consumers.get(item.consumer or "")
            if consumer is not None:
                consumer.timed_out.discard(tag)
        elif reject:
            self.queues[item.queue].ready += 1
        self.ping(conn, ch)
        self.settle()

    @rule(index=PICK, cancel_ok=st.booleans())
    def cancel(self, index: int, cancel_ok: bool) -> None:
        """TMO-4.3-4: a consumer the broker cancelled goes with the client's cancel-ok; any
        consumer goes with the client's own basic.cancel (answered with cancel-ok)."""
        tag = pick(sorted(self.consumers), index)
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
        self.settle()

    @rule(conn=CONNECTION)
    def close_channel(self, conn: str) -> None:
        if conn not in self.work:
            return
        ch = self.work[conn]
        self.clients[conn].close_channel(ch)
        self.channel_gone(conn, ch)
        self.settle()

    # -- model bookkeeping ------------------------------------------------------------------------
    def deliveries(self) -> list[tuple[str, int, int]]:
        return sorted((conn, ch, tag) for (conn, ch), items in self.held.items() for tag in items)

    def live(self, consumer: str) -> int:
        c = self.consumers[consumer]
        return sum(1 for h in self.held.get((c.conn, c.ch), {}).values()
                   if h.consumer == consumer and not h.timed_out)

    def eligible(self, queue: str) -> list[str]:
        """Consumers of `queue` that must be given a ready message: unpaused, room under prefetch 1."""
        return [t for t, c in self.consumers.items() if c.queue == queue and not c.timed_out and self.live(t) == 0]

    def starved(self) -> list[str]:
        return [f"{name}: {q.ready} ready, consumers {self.eligible(name)} idle"
                for name, q in self.queues.items() if q.ready and self.eligible(name)]

    def channel_gone(self, conn: str, ch: int) -> None:
        """RQ-03: live deliveries go back; the channel's consumers go."""
        for item in self.held.pop((conn, ch), {}).values():
            if not item.timed_out:
                self.queues[item.queue].ready += 1
        for tag in [t for t, c in self.consumers.items() if (c.conn, c.ch) == (conn, ch)]:
            del self.consumers[tag]
        if self.work.get(conn) == ch:
            del self.work[conn]

    def must_fire(self) -> list[tuple[str, int, int]]:
        return sorted((conn, ch, tag) for (conn, ch), items in self.held.items()
                      for tag, item in items.items() if item.short and not item.timed_out)

    # -- the wire ---------------------------------------------------------------------------------
    def expect_reply(self, conn: str, ch: int, *types: type) -> Any:
        """The reply on `ch`, processing what arrives before it; None when a timeout closed the
        channel first (the close is checked against the model)."""
        client = self.clients[conn]
        deadline = time.monotonic() + self.timeout(SETTLE_SECONDS)
        while True:
            self.process(conn, ch)
            if (conn, ch) not in self.held:
                return None
            found = client.poll(ch, *types, duration=0.0)
            if found is not None:
                return found
            assert time.monotonic() < deadline, f"no {'/'.join(t.__name__ for t in types)} on {conn}/{ch}"
            self.read(deadline)

    def ping(self, conn: str, ch: int) -> None:
        """A passive declare after a method without reply: its channel.close would come first."""
        self.clients[conn].send(ch, QueueDeclare(queue=self.queues["a"].name, passive=True))
        self.expect_reply(conn, ch, QueueDeclareOk)

    def read(self, deadline: float) -> None:
        socks = {client.sock: client for client in self.clients.values() if client.sock is not None}
        wait = max(min(deadline - time.monotonic(), 0.05), 0.0)
        readable, _, _ = select.select(list(socks), [], [], wait)
        for sock in readable:
            socks[sock].read_available()

    def process(self, conn: str | None = None, only: int | None = None) -> None:
        """Check every asynchronous frame that arrived against the model: in arrival order per
        channel, but across channels and connections in any order (a broker writes each
        channel's frames independently). A delivery of a message the model does not see as
        ready yet (its return, a basic.cancel or channel.close elsewhere, is still unread) is
        held, with what follows it on its channel, until another channel's frame allows it."""
        progress = True
        while progress:
            progress = False
            for name, client in self.clients.items():
                if conn is not None and name != conn:
                    continue
                for number in sorted(client.inbox):
                    if only is not None and number != only:
                        continue
                    progress |= self.process_channel(name, client, number)

    def process_channel(self, name: str, client: MachineClient, number: int) -> bool:
        box = client.inbox[number]
        done = False
        for command in list(box):
            m = command.method
            if isinstance(m, BasicDeliver):
                consumer = self.consumers.get(m.consumer_tag)
                if consumer is not None and not self.queues[consumer.queue].ready:
                    break  # held: see process()
                box.remove(command)
                self.on_deliver(name, number, m)
            elif isinstance(m, BasicCancel):
                box.remove(command)
                self.on_cancel(name, number, m)
            elif isinstance(m, ChannelClose):
                box.remove(command)
                self.on_close(name, number, client.closed_channels.pop(number))
            else:
                continue
            done = True
        return done

    def held_deliveries(self) -> list[tuple[str, int, BasicDeliver]]:
        return [(name, number, c.method) for name, client in self.clients.items()
                for number, box in client.inbox.items() for c in box if isinstance(c.method, BasicDeliver)]

    def on_deliver(self, conn: str, ch: int, m: BasicDeliver) -> None:
        consumer = self.consumers.get(m.consumer_tag)
        assert consumer is not None and (consumer.conn, consumer.ch) == (conn, ch), (
            f"delivery to {m.consumer_tag} on {conn}/{ch}, not a registered consumer there")
        assert not consumer.timed_out, (
            f"delivery to {m.consumer_tag} in timeout state (timed-out tags {sorted(consumer.timed_out)} "
            "unsettled): TMO-4.3-2 says no new messages")
        assert self.live(m.consumer_tag) == 0, f"delivery to {m.consumer_tag} beyond prefetch 1"
        queue = self.queues[consumer.queue]
        assert queue.ready > 0, f"a delivery although the model has no ready message in {consumer.queue}"
        queue.ready -= 1
        self.held[(conn, ch)][m.delivery_tag] = Held(consumer.queue, m.consumer_tag, consumer.short)

    def on_cancel(self, conn: str, ch: int, m: BasicCancel) -> None:
        consumer = self.consumers.get(m.consumer_tag)
        assert conn == "cap", f"basic.cancel {m.consumer_tag} to a connection without consumer_cancel_notify"
        assert consumer is not None and consumer.short, (
            f"basic.cancel for {m.consumer_tag}, whose timeout is not due (TMO-03 says LONG, or unknown tag)")
        assert m.nowait, "the timeout basic.cancel must have nowait=true (TMO-4.3-3)"
        expired = [(tag, h) for tag, h in self.held[(conn, ch)].items()
                   if h.consumer == m.consumer_tag and not h.timed_out]
        assert expired, f"basic.cancel for {m.consumer_tag} with no live delivery to time out"
        for tag, item in expired:
            item.timed_out = True
            consumer.timed_out.add(tag)
            self.queues[item.queue].ready += 1  # TMO-4.3-2: returned to the queue
        consumer.cancelled_by_broker = True

    def on_close(self, conn: str, ch: int, closed: ChannelClosed) -> None:
        due = [h for h in self.held.get((conn, ch), {}).values() if h.short and not h.timed_out]
        reasons = [h for h in due if conn == "nocap" or h.consumer is None or h.consumer not in self.consumers]
        assert reasons, f"channel.close on {conn}/{ch} with no timeout that closes it (TMO-03/TMO-4.3-3): {closed}"
        assert (closed.code, closed.class_id, closed.method_id) == (406, 0, 0), closed
        assert closed.text == model.close_text(ch, model.SENTINEL_4_3), closed.text
        self.channel_gone(conn, ch)

    def settle(self) -> None:
        """Quiescence: every SHORT delivery fired, no ready message waits for an eligible
        consumer, and the queues' counts match (bounded wait, then a failure naming what)."""
        deadline = time.monotonic() + self.timeout(SETTLE_SECONDS)
        while True:
            self.process()
            waiting = self.waiting_for()
            if waiting is None:
                return
            if time.monotonic() > deadline:
                for name, number, method in self.held_deliveries():
                    self.on_deliver(name, number, method)  # raises what makes it wrong
                raise AssertionError(f"after {self.timeout(SETTLE_SECONDS):.1f} s: {waiting}")
            self.read(deadline)

    def waiting_for(self) -> str | None:
        held = self.held_deliveries()
        if held:
            return f"deliveries of messages the model has not seen returned: {held}"
        due = self.must_fire()
        if due:
            return f"deliveries past a SHORT ({SHORT} ms) timeout never timed out: {due}"
        if self.starved():
            return f"ready messages not delivered: {self.starved()}"
        client = self.clients["cap"]
        counts = {}
        for name, q in self.queues.items():
            ok = client.rpc(self.control, QueueDeclare(queue=q.name, passive=True), QueueDeclareOk).method
            assert isinstance(ok, QueueDeclareOk)
            counts[name] = (ok.message_count, ok.consumer_count)
        self.process()
        if self.must_fire() or self.starved() or self.held_deliveries():
            return "deliveries still arriving"
        want = {name: (q.ready, sum(1 for c in self.consumers.values() if c.queue == name))
                for name, q in self.queues.items()}
        if counts != want:
            return f"queues (ready, consumers) = {counts}, model {want}"
        return None

    def teardown(self) -> None:
        for client in self.clients.values():
            client.close()


def run(env: Env, examples: int, steps: int) -> None:
    factory: Any = lambda: TimeoutMachine(env)  # noqa: E731 - Hypothesis accepts any factory
    with Budget(Budget.seconds_configured()).limit_shrinking():
        run_state_machine_as_test(factory, settings=machine_settings(examples, steps))


def admin_can_put_policy(admin: RestoringAdmin) -> bool:
    try:
        admin.get_policy("/", "amqpc.probe")
    except Unavailable:
        return False
    return True


@pytest.mark.rules("TMO-03", "TMO-4.3-2", "TMO-4.3-3", "TMO-4.3-4", "TMO-4.3-5")
def test_timeout_precedence_and_reactions_match_the_model(target: Target, admin: RestoringAdmin) -> None:
    if target.profile.name != PROFILE:
        not_applicable(f"the timeout machine models the 4.3 rules, not {target.profile.name}")
    can_global = can_set_global(admin)
    original = admin.get_global("consumer_timeout") if can_global else None
    if original is not None and original <= 10 * SETTLE_SECONDS * 1000:
        not_applicable(f"the broker's consumer_timeout ({original} ms) is too short for the machine's LONG level")
    env = Env(target.url, target.timeout_scale, admin, admin_can_put_policy(admin), can_global, original)
    try:
        run(env, examples=15, steps=15)
    finally:
        cleanup(env)


def cleanup(env: Env) -> None:
    try:
        client = MachineClient(env.url, timeout=env.scale * 5.0).connect()
    except (OSError, DriverError):
        return
    try:
        ch = client.channel()
        for queue in env.queues:
            try:
                client.rpc(ch, QueueDelete(queue=queue), QueueDeleteOk)
            except ChannelClosed:
                ch = client.channel()
    finally:
        client.close()
