"""How a model machine settles after each step: the arrivals checked, the waits, the queue counts.

Responsibility: `Settling`, the mixin of `machine_base.ModelMachine` that makes a run quiescent
between two steps (`sync`) and reads what the broker sent (`read`, `drain`); the machine holds the
connections, channels, queues and the model it uses.
Rules:
- After every step `sync()` makes the run quiescent: it checks every asynchronous method that
  arrived (deliveries, confirms, returns, broker cancels) against the model in arrival order
  per channel, waits (bounded, scaled by the target's timeout) while the model says something
  must still come, and compares the ready count of every queue (passive queue.declare) until
  it matches (a quorum queue's up to `CONSENSUS_SETTLE_SECONDS`: RabbitMQ counts it by a 250 ms Ra
  query of the leader's applied state, 0 on a timeout: rabbit_quorum_queue:stat/2, v3.10.8 l. 920,
  v4.0.5 l. 1127, v4.3.5 l. 1387), so the next step starts from the same state on both sides. A
  count that differs is asked again after `COUNT_POLL_SECONDS`, then twice as long each time up to
  `READ_SLICE_SECONDS` (no frame announces a count that caught up, so a wait on frames would
  sleep out its whole slice; the deadline is the same). A
  delivery the model does not allow yet is held while other channels may still deliver (a broker
  writes each channel's frames independently, so arrival order across channels is free).
- A publish's effects are at its queues before a settle counts them: every channel that published
  since the last settle answers a ping (a passive exchange.declare of amq.direct), awaited, before
  the first count. A channel handles its methods one at a time in the order they came and hands a
  publish to its queues' processes while handling it (`rabbit_channel` `handle_method(#'basic.publish'{})`,
  v3.10.8 l. 1279, v4.0.5 l. 1174, v4.3.5 l. 1161, calls `deliver_to_queues`, which calls
  `rabbit_queue_type:deliver`: l. 2180, 2084, 2116), so once the ping's reply came its publishes have reached their queues,
  ahead of any count or later step sent on another channel. A ping on another channel of the same
  connection shows nothing of them: each channel is a process of its own. Measured without it,
  against RabbitMQ 4.3.6 under load: two publishes refused by a full queue (reject-publish, on a
  channel without confirms) left the count as it was, the settle passed at once, and the next
  step's purge (control channel) overtook them: one was then taken by the emptied queue, a false
  PC-05/PC-08 failure.
- The first count of a settle goes out with the flush (a ping on every other connection): the
  control channel's passive declares are its connection's round trip, as its ping on that channel
  was, and what arrived on any channel by the time their replies came is checked before the
  counts are trusted (then they are asked again). One round trip a settle fewer
  (docs/probes.md, "Fewer round trips in the machines").
- A settle waits `SETTLE_SECONDS` in full (scaled), less while a failure is being shrunk
  (`settle_seconds`; machine_budget rules: hurried shrinking).
"""

from __future__ import annotations

import select
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from codec import (
    BasicAck,
    BasicCancel,
    BasicDeliver,
    BasicNack,
    BasicReturn,
    ChannelClose,
    ExchangeDeclareOk,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.drivers.raw import RawClient
from conformance.model import (
    BrokerModel,
    Confirm,
    Deliver,
    Return,
    ServerCancel,
    Violation,
    wording,
)
from conformance.suite.steps.machine_budget import HURRIED_FLOOR_SECONDS, HURRIED_SETTLE_SECONDS, Smallest
from conformance.suite.steps.machine_support import MachineClient, MachineTarget, count_meaning
from conformance.suite.steps.wire import PING

CONTROL = 99  # the channel number of the harness's own channel (declares, counts, deletes)
READ_SLICE_SECONDS = 0.05  # the longest single wait for frames in `sync` (the deadline is checked between)
COUNT_POLL_SECONDS = 0.005  # a queue count that differs is asked again after this, then twice as long


def count_polls() -> Iterator[float]:
    """The waits between two looks at a queue count that differs: `COUNT_POLL_SECONDS`, then twice as
    long each time up to `READ_SLICE_SECONDS` (module rules)."""
    poll = COUNT_POLL_SECONDS
    while True:
        yield poll
        poll = min(2 * poll, READ_SLICE_SECONDS)


class Settling:
    """`sync` and what it uses (module rules); the attributes below are the machine's."""

    # the rules a queue-count mismatch means in this machine (a failure names its rule: docs/design.md decision 13)
    COUNT_RULES: ClassVar[str] = "ACK-05/ACK-06/ACK-07 settlement, RQ-03 requeue on close"
    SETTLE_SECONDS: ClassVar[float] = 2.0
    CONSENSUS_SETTLE_SECONDS: ClassVar[float] = 10.0  # a quorum queue's count: once Ra applied it (sync)
    HURRIED_SECONDS: ClassVar[float] = HURRIED_SETTLE_SECONDS  # a shrink candidate's settle, at most (settle_seconds)
    # the hurried settle follows the broker's measured settle (machine_budget rules: hurried shrinking);
    # False: always HURRIED_SECONDS (waits on the broker's clock, which a settle does not measure)
    ADAPTIVE_HURRY: ClassVar[bool] = True
    smallest: Smallest | None = None
    target: MachineTarget
    model: BrokerModel
    clients: dict[str, MachineClient]
    channels: dict[Any, tuple[str, int]]  # model channel key -> (connection, number)
    real: dict[str, str]  # logical queue name -> broker name
    declared: dict[str, tuple[str, bool, dict[str, Any]]]  # logical -> declare call
    control_conn: str
    hurried: bool  # this example waited less than in full (settle_seconds)

    def client(self, key: Any) -> tuple[RawClient, int]:
        conn, number = self.channels[key]
        return self.clients[conn], number

    def sync(self) -> None:
        """Check what arrived, wait for what must come, and sync queue counts (module doc)."""
        settle = self.settle_seconds()
        started = time.monotonic()
        deadline = started + settle
        flushed = False
        polls = count_polls()
        while True:
            slice_ = READ_SLICE_SECONDS
            blocked = self.drain()
            for key, delivery in blocked:
                # held back only while another channel may still deliver first (the one way it can become allowed)
                if time.monotonic() > deadline or not any(self.model.due(k) for k in self.channels if k != key):
                    self.model.deliver(key, delivery)  # raises the Violation with what was allowed
            waiting = self.waiting_for()
            if not waiting:
                if flushed:
                    mismatch = self.count_mismatch()
                else:  # the counts and the flush in one round trip (module rules)
                    flushed = True
                    self.ping_publishers()
                    queues = self.ask_counts()
                    self.flush(counting=bool(queues))
                    mismatch = self.read_counts(queues)
                    if self.arrived():
                        continue  # something arrived meanwhile: check it first, then count again
                if mismatch is None:
                    self.settled(time.monotonic() - started)
                    break
                queue, waiting = mismatch
                if self.declared.get(queue, ("classic",))[0] == "quorum" and not self.hurried:  # module doc
                    settle = max(settle, self.target.timeout(self.CONSENSUS_SETTLE_SECONDS))
                deadline = started + settle
                slice_ = next(polls)  # module doc
            if time.monotonic() > deadline:
                raise Violation(f"after {settle:.1f} s: {self.explain_missing(waiting)}")
            self.read(deadline, slice_)
        self.model.quiesce()

    def explain_missing(self, waiting: str) -> str:
        """What `sync` reports when the wait ran out; a machine may prove a cause first."""
        return waiting

    def settle_seconds(self) -> float:
        """How long `sync` waits for what must still come: in full, or hurried while a failure
        is being shrunk (machine_budget rules: hurried shrinking)."""
        if self.smallest is not None and self.smallest.hurry():
            self.hurried = True
            cap = self.target.timeout(self.HURRIED_SECONDS)
            if not self.ADAPTIVE_HURRY:
                return cap
            return self.smallest.hurried_seconds(self.target.timeout(HURRIED_FLOOR_SECONDS), cap)
        return self.target.timeout(self.SETTLE_SECONDS)

    def settled(self, seconds: float) -> None:
        """A settle that got all it waited for took `seconds` (what bounds the hurried settle)."""
        if self.smallest is not None:
            self.smallest.settled(seconds)

    def flush(self, counting: bool = False) -> bool:
        """A round trip on each connection: what the broker wrote to it before is read now, not
        in some later step, so every run notices a frame at the same step (Hypothesis replays
        must see the same run). True when a channel then has something to check. `counting`: the
        count declares just sent on the control channel are that connection's round trip (its
        replies are read by `read_counts`, which then tells what arrived: `arrived`)."""
        pinged: list[tuple[RawClient, int]] = []
        for conn, client in self.clients.items():  # every connection's ping out, then each reply awaited
            if counting and conn == self.control_conn:
                continue
            numbers = [n for k, (c, n) in self.channels.items() if c == conn and self.model.is_open(k)]
            number = CONTROL if conn == self.control_conn else next(iter(numbers), None)
            if number is None or client.sock is None or client.lost or client.connection_closed is not None:
                continue
            client.send(number, PING)
            pinged.append((client, number))
        for pinger, number in pinged:
            pinger.expect(number, ExchangeDeclareOk, timeout=self.target.timeout(self.SETTLE_SECONDS))
        return self.arrived()

    def ping_publishers(self) -> None:
        """A ping on every open channel that published since the last settle, each reply awaited,
        before any count is asked (module rules: a publish's effects are at its queues)."""
        pinged: list[tuple[RawClient, int]] = []
        for conn, client in self.clients.items():
            published, client.published = client.published, set()
            if client.sock is None or client.lost or client.connection_closed is not None:
                continue
            open_numbers = {n for k, (c, n) in self.channels.items() if c == conn and self.model.is_open(k)}
            for number in sorted(published & open_numbers - ({CONTROL} if conn == self.control_conn else set())):
                client.send(number, PING)
                pinged.append((client, number))
        for pinger, number in pinged:
            pinger.expect(number, ExchangeDeclareOk, timeout=self.target.timeout(self.SETTLE_SECONDS))

    def arrived(self) -> bool:
        """Whether an open channel of the model has something to check."""
        return any(self.clients[c].inbox.get(n) for k, (c, n) in self.channels.items() if self.model.is_open(k))

    def waiting_for(self) -> str | None:
        if self.model.due():
            return wording.missing_delivery()
        owed = self.model.owed_cancel_rules()
        if owed:
            why = {"CCN-02": "its queue was deleted", "CLU-01": "its queue's node stopped"}
            return "the broker did not send basic.cancel for " + "; for ".join(
                f"{dict(tags)} ({rule}: {why.get(rule, 'owed')})" for rule, tags in owed.items())
        return None

    def count_mismatch(self) -> tuple[str, str] | None:
        """The first queue whose ready count differs from the model's. The passive declares go
        out one after another without waiting, and their replies are read in order (a channel answers in the order it
        was asked), every one of them, so none is left for a later wait to take."""
        return self.read_counts(self.ask_counts())

    def ask_counts(self) -> list[str]:
        """Send the passive declare of every queue of the model (`count_mismatch`); the queues asked."""
        control = self.clients[self.control_conn]
        queues = list(self.model.queues())
        for logical in queues:
            control.send(CONTROL, QueueDeclare(queue=self.real[logical], passive=True))
        return queues

    def read_counts(self, queues: list[str]) -> tuple[str, str] | None:
        """The replies to `ask_counts`, in order: the first queue whose count differs from the model's."""
        control = self.clients[self.control_conn]
        counts = []
        for _ in queues:
            reply = control.expect(CONTROL, QueueDeclareOk)
            assert isinstance(reply.method, QueueDeclareOk)
            counts.append(reply.method.message_count)
        for logical, count in zip(queues, counts, strict=True):
            if count != self.model.ready(logical):
                return logical, (f"queue {logical} holds {count} ready messages, the model "
                                 f"{self.model.ready(logical)}: {self.model.ready_bodies(logical)} "
                                 f"{self.count_rules(logical, count)}")
        return None

    def count_rules(self, logical: str, observed: int) -> str:
        return count_meaning(self.model.ready(logical) - observed, self.model.failed_over_ready(logical),
                             self.COUNT_RULES)

    def read(self, deadline: float, at_most: float = READ_SLICE_SECONDS) -> None:
        """Read what came on any connection, waiting until `deadline` but at most `at_most` seconds."""
        live = {c.sock: c for c in self.clients.values()
                if c.sock is not None and not c.lost and c.connection_closed is None}
        if not live:
            return
        wait = max(0.0, min(deadline - time.monotonic(), at_most))
        readable, _, _ = select.select(list(live), [], [], wait)
        for sock in readable:
            client = live[sock]
            client.read_available()
            if client.connection_closed is not None:
                raise client.connection_closed

    def drain(self) -> list[tuple[Any, Deliver]]:
        """Check every queued asynchronous method; returns deliveries the model holds back."""
        while True:
            progress = False
            blocked: list[tuple[Any, Deliver]] = []
            for key in list(self.channels):
                if not self.model.is_open(key):
                    continue
                progress |= self.drain_channel(key, blocked)
            if not progress:
                return blocked

    def drain_channel(self, key: Any, blocked: list[tuple[Any, Deliver]] | None = None,
                      drop_deliveries: bool = False) -> bool:
        client, number = self.client(key)
        box = client.inbox.get(number)
        progress = False
        while box:
            command = box[0]
            m = command.method
            if isinstance(m, BasicDeliver) and drop_deliveries:
                pass
            elif isinstance(m, BasicDeliver):
                delivery = Deliver(m.consumer_tag, m.delivery_tag, m.redelivered, command.body)
                if delivery not in self.model.deliveries(key):
                    if blocked is None:
                        self.model.deliver(key, delivery)  # raises
                    else:
                        blocked.append((key, delivery))
                    return progress
                self.model.deliver(key, delivery)
            elif isinstance(m, BasicCancel):
                if not m.nowait:
                    raise Violation(f"broker basic.cancel {m.consumer_tag!r} on {key!r} without nowait=true (CCN-02)")
                self.model.server_cancel(key, ServerCancel(m.consumer_tag))
            elif isinstance(m, (BasicAck, BasicNack)):
                self.model.confirm(key, Confirm(m.delivery_tag, m.multiple, isinstance(m, BasicNack)))
            elif isinstance(m, BasicReturn):
                self.model.returned(key, Return(m.reply_code, m.exchange, m.routing_key, command.body))
            elif isinstance(m, ChannelClose):
                if blocked is not None:  # a close nobody expected
                    raise Violation(f"channel {key!r} closed by the broker: {m.reply_code} "
                                    f"({m.class_id}/{m.method_id}) {m.reply_text!r}")
                return progress
            else:
                raise Violation(f"unexpected {m.NAME} on channel {key!r}")
            box.popleft()
            progress = True
        return progress
