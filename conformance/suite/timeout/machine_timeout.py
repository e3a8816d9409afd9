"""The wire and state model of the 4.3 consumer-timeout machine, on the shared machine base.

Responsibility: `TimeoutWire` is a `ModelMachine` whose oracle is `conformance.model.timeouts`
(effective value and reaction) plus a small state model: consumers (prefetch 1) are active,
paused (timed-out tags unsettled: no deliveries, TMO-4.3-2/5) or gone; every delivery is live or
timed out. The rules (what a client does) are in test_machine_timeout.py; connections, the
control channel, picks, the program of steps, the budget, the frame log and the cleanup come
from `ModelMachine`.
Rules:
- Timeout values are SHORT (fires within the step) or LONG (never within the run). After every
  step (`sync`) the run is made quiescent: every live delivery with a SHORT timeout must have
  timed out, as basic.cancel (capability and a registered consumer) or channel.close 406
  "-1 ms" (TMO-4.3-3); no ready message may wait while an active consumer has room; the
  queues' ready and consumer counts must match the model. Every wait is bounded (scaled).
- Asynchronous frames are checked in arrival order per channel, in any order across channels
  (`process`); a delivery of a message the model does not see as ready yet is held until
  another channel's frame allows it, or the settle deadline passes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from codec import (
    BasicAck,
    BasicCancel,
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    ChannelClose,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDeclareOk,
)
from codec.constants import ReplyCode
from conformance.drivers.raw import ChannelClosed
from conformance.model import queues as queues_model
from conformance.model import timeouts as model
from conformance.suite.steps.machine_base import CONTROL, MachineClient, MachineTarget, ModelMachine
from conformance.suite.steps.machine_settle import count_polls
from conformance.suite.steps.timeouts import SHORT

PROFILE = "rabbitmq-4.3"
CONNECTIONS = ("cap", "nocap")


@dataclass
class Queue:
    name: str
    arg: int | None  # x-consumer-timeout queue argument
    policy: int | None  # consumer-timeout policy
    ready: int = 0
    failed_over: int = 0  # of the ready ones: at most this many were deliveries held across a failover (CLU-05)

    def returned(self, item: Held) -> None:
        """A live delivery comes back (a reject with requeue, or its channel's end: RQ-03)."""
        self.ready += 1
        self.failed_over += item.failed_over

    def taken(self) -> None:
        self.ready -= 1
        self.failed_over = min(self.failed_over, self.ready)


@dataclass
class Consumer:
    tag: str
    conn: str
    ch: int
    queue: str  # logical name
    short: bool  # its effective timeout fires within a step
    timed_out: set[int] = field(default_factory=set)  # TMO-4.3-5: paused while non-empty
    cancelled_by_broker: bool = False
    resumed: bool = False  # TMO-4.3-5: it was paused and its timed-out tags were all settled
    requeued_late: bool = False  # one of its timed-out tags was settled by a reject/nack with requeue
    failed_over: bool = False  # it held a live delivery when a node stop moved its queue's leader (CLU-05)


@dataclass
class Held:
    """A delivery on a channel: live (checked out) or timed out (returned, still on the channel)."""

    queue: str  # logical name
    consumer: str | None  # None: basic.get
    short: bool
    timed_out: bool = False
    failed_over: bool = False  # live when a node stop moved its queue's leader (CLU-05: still checked out)


class TimeoutWire(ModelMachine):
    """Two connections ("cap" with consumer_cancel_notify, "nocap" without), the control channel
    (confirm mode) on "cap", and the timeout state model; see the module rules."""

    SETTLE_SECONDS: ClassVar[float] = 3.0  # per step, scaled: SHORT timeouts fire well within it
    HURRIED_SECONDS: ClassVar[float] = 1.0  # while a failure is shrunk (machine_base.settle_seconds): 5 x SHORT
    ADAPTIVE_HURRY: ClassVar[bool] = False  # its waits are the consumer timeouts' clock
    REPLAY_REDUCTION: ClassVar[bool] = False  # each replay would wait on that clock again (machine_base)

    def __init__(self, target: MachineTarget) -> None:
        super().__init__(target)
        self.control_conn = "cap"
        self.work: dict[str, int] = {}  # connection -> its consuming channel
        self.consumers: dict[str, Consumer] = {}
        self.held: dict[tuple[str, int], dict[int, Held]] = {}  # (conn, channel) -> tag -> Held
        self.queues: dict[str, Queue] = {}
        self.global_: int | None = None
        self.seqno = 0
        self.connect("cap")
        self.connect("nocap", consumer_cancel_notify=False)
        self.clients["cap"].rpc(CONTROL, ConfirmSelect(), ConfirmSelectOk)

    def sync(self) -> None:
        self.settle()

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

    def publish_some(self, queue: str, count: int) -> None:
        """`count` publishes to `queue` on the control channel, each confirmed."""
        if not count:
            return
        client = self.clients["cap"]
        for _ in range(count):
            client.send(CONTROL, BasicPublish(routing_key=self.queues[queue].name), BasicProperties(), self.body())
        self.seqno += count
        acked = 0
        while acked < self.seqno:
            m = client.expect(CONTROL, BasicAck, timeout=self.target.timeout(self.SETTLE_SECONDS)).method
            assert isinstance(m, BasicAck), f"publish to {queue}: {m} instead of basic.ack (PC-05)"
            acked = m.delivery_tag
        self.queues[queue].ready += count

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
        """Queues whose ready messages wait for an idle eligible consumer, each naming the rule: a
        consumer resumed by settling its timed-out tags (TMO-4.3-5), else one never paused (TMO-4.3-2)."""
        found = []
        for name, q in self.queues.items():
            idle = self.eligible(name)
            if q.ready and idle:
                rule = "TMO-4.3-2"
                if any(self.consumers[t].resumed for t in idle):  # how it was resumed: 4.3.6 fails one way only
                    late = "a reject with requeue" if any(self.consumers[t].requeued_late for t in idle) else "an ack"
                    rule = f"TMO-4.3-5, resumed by {late} of its timed-out tags"
                if any(self.consumers[t].failed_over for t in idle):
                    rule = "CLU-05: they held deliveries across a failover, which settle and free them as before"
                found.append(f"{name}: {q.ready} ready, consumers {idle} idle ({rule})")
        return found

    def channel_gone(self, conn: str, ch: int) -> None:
        """RQ-03: live deliveries go back; the channel's consumers go."""
        for item in self.held.pop((conn, ch), {}).values():
            if not item.timed_out:
                self.queues[item.queue].returned(item)
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
        deadline = time.monotonic() + self.target.timeout(self.SETTLE_SECONDS)
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
            f"delivery to {m.consumer_tag} on {conn}/{ch}, not a registered consumer there (TMO-4.3-4)")
        assert not consumer.timed_out, (
            f"delivery to {m.consumer_tag} in timeout state (timed-out tags {sorted(consumer.timed_out)} "
            "unsettled): TMO-4.3-2 says no new messages")
        assert not self.failed_over_live(m.consumer_tag), (
            f"delivery to {m.consumer_tag} beyond prefetch 1: its delivery from before the node stop stays checked "
            "out across the failover (CLU-05)")
        assert self.live(m.consumer_tag) == 0, \
            f"delivery to {m.consumer_tag} beyond prefetch 1: a timed-out delivery stays counted (TMO-4.3-2)"
        queue = self.queues[consumer.queue]
        assert queue.ready > 0, \
            f"a delivery although the model has no ready message in {consumer.queue} (TMO-4.3-2: no redelivery)"
        queue.taken()
        self.held[(conn, ch)][m.delivery_tag] = Held(consumer.queue, m.consumer_tag, consumer.short)

    def on_cancel(self, conn: str, ch: int, m: BasicCancel) -> None:
        consumer = self.consumers.get(m.consumer_tag)
        assert conn == "cap", \
            f"basic.cancel {m.consumer_tag} to a connection without consumer_cancel_notify (TMO-4.3-3)"
        assert consumer is not None and consumer.short, (
            f"basic.cancel for {m.consumer_tag}, whose timeout is not due (TMO-03 says LONG, or unknown tag)")
        assert m.nowait, "the timeout basic.cancel must have nowait=true (TMO-4.3-3)"
        expired = [(tag, h) for tag, h in self.held[(conn, ch)].items()
                   if h.consumer == m.consumer_tag and not h.timed_out]
        assert expired, f"basic.cancel for {m.consumer_tag} with no live delivery to time out (TMO-03)"
        for tag, item in expired:
            item.timed_out = True
            consumer.timed_out.add(tag)
            self.queues[item.queue].ready += 1  # TMO-4.3-2: returned to the queue
        consumer.cancelled_by_broker = True

    def on_close(self, conn: str, ch: int, closed: ChannelClosed) -> None:
        due = [h for h in self.held.get((conn, ch), {}).values() if h.short and not h.timed_out]
        reasons = [h for h in due if conn == "nocap" or h.consumer is None or h.consumer not in self.consumers]
        assert reasons, f"channel.close on {conn}/{ch} with no timeout that closes it (TMO-03/TMO-4.3-3): {closed}"
        assert (closed.code, closed.class_id, closed.method_id) == (ReplyCode.PRECONDITION_FAILED, 0, 0), \
            f"timeout channel.close: {closed}, expected 406 (0/0) (TMO-4.3-3)"
        assert closed.text == model.close_text(ch, model.SENTINEL_4_3), \
            f"timeout channel.close text {closed.text!r} (TMO-4.3-3)"
        self.channel_gone(conn, ch)

    def settle(self) -> None:
        """Quiescence: every SHORT delivery fired, no ready message waits for an eligible
        consumer, and the queues' counts match (bounded wait, then a failure naming what)."""
        settle = self.settle_seconds()
        deadline = time.monotonic() + settle
        polls = count_polls()  # counts are asked again sooner, then less often (machine_base rules)
        while True:
            self.process()
            waiting = self.waiting_for()
            if waiting is None:
                return
            if time.monotonic() > deadline:
                for name, number, method in self.held_deliveries():
                    self.on_deliver(name, number, method)  # raises what makes it wrong
                raise AssertionError(f"after {settle:.1f} s: {waiting}")
            self.read(deadline, next(polls))

    def waiting_for(self) -> str | None:
        held = self.held_deliveries()
        if held:
            return f"deliveries of messages the model has not seen returned: {held} (TMO-4.3-2)"
        due = self.must_fire()
        if due:
            return f"deliveries past a SHORT ({SHORT} ms) timeout never timed out: {due} (TMO-03)"
        if self.starved():
            return f"ready messages not delivered: {self.starved()}"
        client = self.clients["cap"]
        counts = {}
        for name, q in self.queues.items():
            ok = client.rpc(CONTROL, QueueDeclare(queue=q.name, passive=True), QueueDeclareOk).method
            assert isinstance(ok, QueueDeclareOk)
            counts[name] = (ok.message_count, ok.consumer_count)
        self.process()
        if self.must_fire() or self.starved() or self.held_deliveries():
            return "deliveries still arriving"
        want = {name: (q.ready, self.consumer_count(name)) for name, q in self.queues.items()}
        if counts != want:
            return f"queues (ready, consumers) = {counts}, model {want} {self.count_meaning(counts)}"
        return None

    def count_meaning(self, counts: dict[str, tuple[int, int]]) -> str:
        """What a count mismatch means: CLU-05 when the missing ready messages can be deliveries held
        across a failover and returned since (the broker dropped them), else TMO-4.3-2/4."""
        short = {name: q.ready - counts[name][0] for name, q in self.queues.items() if counts[name][0] < q.ready}
        if short and all(missing <= self.queues[name].failed_over for name, missing in short.items()):
            return ("(the missing ready messages were deliveries held when a node stop moved the queue's leader, "
                    "returned since: CLU-05 keeps them checked out across the failover, so they come back)")
        return "(TMO-4.3-2 returns, TMO-4.3-4 consumers)"

    def failed_over_live(self, consumer: str) -> bool:
        c = self.consumers[consumer]
        return any(h.consumer == consumer and h.failed_over and not h.timed_out
                   for h in self.held.get((c.conn, c.ch), {}).values())

    def consumer_count(self, queue: str) -> int:
        """queue.declare-ok's consumer_count for a quorum queue (model.queues, TMO-4.3-4)."""
        live = [(conn, ch, h.consumer) for (conn, ch), items in self.held.items()
                for h in items.values() if h.queue == queue and not h.timed_out]
        return queues_model.declared_consumer_count(
            "quorum", sum(1 for c in self.consumers.values() if c.queue == queue),
            cancelled_holding=len({key for key in live if key[2] is not None and key[2] not in self.consumers}),
            gets_held=sum(1 for key in live if key[2] is None))

