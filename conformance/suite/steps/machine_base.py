"""Shared machinery of the model-vs-broker Hypothesis machines (docs/design.md, conventions: the fakeredis shape).

Responsibility: run a client program against a broker over the raw driver and against the model
(conformance.model) side by side, step by step, and fail with the shrunk steps and that run's frames.
Rules:
- Rules are synchronous (docs/design.md decision 5). A method without a reply (ack, nack, reject,
  publish) is followed by a ping (a passive exchange.declare on the same channel), so its
  outcome is known: the broker closes the channel before answering the ping, or answers it.
- Outcomes compare by scope, reply code and class/method id (`model.outcomes`), never text.
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
- Each example uses fresh connections and uniquely named queues, deleted at teardown.
- `AMQPC_MACHINE_EXAMPLES` overrides every machine's example count (machine_support).
- Values from the machine's state are drawn as indices and resolved when the step runs
  (`Pick`); each example keeps the steps as run, values resolved, and a failing one reports
  them as a program, with the frames of that run. Each machine test has a budget, shrinking
  included (`Budget`, machine_support).
"""

from __future__ import annotations

import functools
import itertools
import select
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar

from hypothesis.stateful import RuleBasedStateMachine

from codec import (
    BasicAck,
    BasicCancel,
    BasicDeliver,
    BasicNack,
    BasicReturn,
    ChannelClose,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    Method,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
)
from conformance.drivers.raw import DriverError, NoReply, RawClient, Recorder
from conformance.model import (
    OK,
    BrokerModel,
    ChannelClosed,
    Confirm,
    ConnectionClosed,
    Deliver,
    Outcome,
    Return,
    ServerCancel,
    Violation,
    wording,
)
from conformance.suite.steps.machine_support import (
    ENV_EXAMPLES,
    HURRIED_FLOOR_SECONDS,
    HURRIED_SETTLE_SECONDS,
    Budget,
    FrameLog,
    MachineClient,
    MachineTarget,
    Pick,
    Program,
    SetupRecorded,
    Smallest,
    count_meaning,
    delete_after_close,
    example_ended,
    format_frame,
    from_machine,
    machine_settings,
    run_within_budget,
    to_outcome,
)

__all__ = ["CONTROL", "ENV_EXAMPLES", "FrameLog", "MachineClient", "MachineTarget", "ModelMachine", "Pick",
           "format_frame", "from_machine", "machine_settings", "run_machine", "step", "to_outcome"]

CONTROL = 99  # the channel number of the harness's own channel (declares, counts, deletes)
READ_SLICE_SECONDS = 0.05  # the longest single wait for frames in `sync` (the deadline is checked between)
COUNT_POLL_SECONDS = 0.005  # a queue count that differs is asked again after this, then twice as long
F = TypeVar("F", bound=Callable[..., None])


def count_polls() -> Iterator[float]:
    """The waits between two looks at a queue count that differs: `COUNT_POLL_SECONDS`, then twice as
    long each time up to `READ_SLICE_SECONDS` (module rules)."""
    poll = COUNT_POLL_SECONDS
    while True:
        yield poll
        poll = min(2 * poll, READ_SLICE_SECONDS)


def run_machine(machine: type[ModelMachine], target: MachineTarget, *, examples: int, steps: int,
                **arguments: Any) -> None:
    """Run `machine(target, **arguments)` as a Hypothesis test, within its budget (`run_within_budget`)."""
    budget, smallest = Budget(Budget.seconds_configured()), Smallest()

    def factory() -> ModelMachine:  # its source seeds the examples: keep it (machine_support rules)
        made = machine(target, **arguments)
        made.budget, made.smallest = budget, smallest
        return made

    run_within_budget(factory, budget, smallest, examples=examples, steps=steps)


def step(fn: F) -> F:
    """Wrap a rule: resolve its picks, log it, mark the run busy while it executes, then sync
    (see module docstring)."""

    @functools.wraps(fn)
    def wrapper(self: ModelMachine, **kwargs: Any) -> None:
        kwargs = {k: v.resolve(self) if isinstance(v, Pick) else v for k, v in kwargs.items()}
        self.program.add(fn.__name__, kwargs)
        self.busy = True
        fn(self, **kwargs)
        self.sync()
        ModelMachine.steps_run += 1
        self.busy = False

    return wrapper  # type: ignore[return-value]


class ModelMachine(SetupRecorded, RuleBasedStateMachine):
    """Base of the machines: connections, channels, queues, settle, teardown."""

    steps_run: ClassVar[int] = 0
    # the rules a queue-count mismatch means in this machine (a failure names its rule: docs/design.md decision 13)
    COUNT_RULES: ClassVar[str] = "ACK-05/ACK-06/ACK-07 settlement, RQ-03 requeue on close"
    budget: Budget | None = None
    smallest: Smallest | None = None
    SETTLE_SECONDS: ClassVar[float] = 2.0
    CONSENSUS_SETTLE_SECONDS: ClassVar[float] = 10.0  # a quorum queue's count: once Ra applied it (sync)
    HURRIED_SECONDS: ClassVar[float] = HURRIED_SETTLE_SECONDS  # a shrink candidate's settle, at most (settle_seconds)
    # the hurried settle follows the broker's measured settle (machine_support rules: hurried shrinking);
    # False: always HURRIED_SECONDS (waits on the broker's clock, which a settle does not measure)
    ADAPTIVE_HURRY: ClassVar[bool] = True

    def __init__(self, target: MachineTarget) -> None:
        super().__init__()
        self.target = target
        self.model = BrokerModel(target.profile)
        self.recorder = Recorder()
        self.clients: dict[str, MachineClient] = {}
        self.capabilities: dict[str, dict[str, Any]] = {}
        self.channels: dict[Any, tuple[str, int]] = {}  # model channel key -> (connection, number)
        self.real: dict[str, str] = {}  # logical queue name -> broker name
        self.exchanges: dict[str, str] = {}  # logical exchange name -> broker name
        self.declared: dict[str, tuple[str, bool, dict[str, Any]]] = {}  # logical -> declare call
        self.prefix = f"amqpc.m.{uuid.uuid4().hex[:10]}"
        self.body_ids = itertools.count(1)
        self.busy = False
        self.hurried = False  # this example waited less than in full (settle_seconds)
        self.control_conn = "A"
        self.program = Program(type(self).__name__)

    # -- setup -------------------------------------------------------------------------------
    def connect(self, conn: str, **capabilities: Any) -> MachineClient:
        client = MachineClient(self.target.url, capabilities=capabilities or None, recorder=self.recorder,
                               timeout=self.target.timeout(5.0))
        client.connect()
        self.clients[conn] = client
        self.capabilities[conn] = capabilities
        self.model.open_connection(conn, cancel_notify=capabilities.get("consumer_cancel_notify", True))
        if conn == self.control_conn:
            client.channel(CONTROL)
        return client

    def open(self, key: Any, conn: str = "A", number: int | None = None) -> None:
        number = number if number is not None else int(key) if isinstance(key, int) else 1
        client = self.clients[conn]
        client.inbox.pop(number, None)
        # RawClient.channel() clears closed_channels only after channel.open-ok, but waiting
        # for it raises while the number is still marked closed: clear it first
        client.closed_channels.pop(number, None)
        client.channel(number)
        self.channels[key] = (conn, number)
        self.model.open_channel(key, conn)

    def declare(self, logical: str, kind: str = "classic", *, durable: bool = False,
                arguments: dict[str, Any] | None = None) -> None:
        real = self.real.setdefault(logical, f"{self.prefix}.{logical}")
        self.declared[logical] = (kind, durable, dict(arguments or {}))
        arguments = dict(arguments or {})
        if kind == "quorum":  # a high delivery limit: RQ-06 is not what these machines check
            durable, arguments = True, {"x-queue-type": "quorum", "x-delivery-limit": 1000, **arguments}
        self.declare_on_broker(QueueDeclare(queue=real, durable=durable, arguments=arguments))
        max_length = arguments.get("x-max-length")
        self.model.declare_queue(logical, kind, max_length=max_length,
                                 overflow=arguments.get("x-overflow", "drop-head"))

    def declare_on_broker(self, declare: QueueDeclare) -> None:
        """The queue.declare of `declare` (a hook: a cluster machine declares some on another node)."""
        self.clients[self.control_conn].rpc(CONTROL, declare, QueueDeclareOk)

    def delete_and_declare(self, logical: str) -> None:
        """queue.delete, then the same declare and bindings again (a new, empty queue)."""
        control = self.clients[self.control_conn]
        reply = control.rpc(CONTROL, QueueDelete(queue=self.real[logical]), QueueDeleteOk)
        assert isinstance(reply.method, QueueDeleteOk)
        expected = self.model.delete_queue(logical)
        assert reply.method.message_count == expected, \
            f"queue.delete {logical}: delete-ok says {reply.method.message_count} messages, the model {expected}"
        kind, durable, arguments = self.declared[logical]
        self.declare(logical, kind, durable=durable, arguments=arguments)
        for exchange, queues in self.model.state.fanouts.items():
            if logical in queues:
                control.rpc(CONTROL, QueueBind(queue=self.real[logical], exchange=self.exchanges[exchange]),
                            QueueBindOk)

    def declare_fanout(self, logical: str, queues: list[str]) -> None:
        real = self.exchanges.setdefault(logical, f"{self.prefix}.{logical}")
        control = self.clients[self.control_conn]
        control.rpc(CONTROL, ExchangeDeclare(exchange=real, exchange_type="fanout", auto_delete=False),
                    ExchangeDeclareOk)
        for queue in queues:
            control.rpc(CONTROL, QueueBind(queue=self.real[queue], exchange=real), QueueBindOk)
        self.model.declare_fanout(logical, queues)

    def body(self) -> bytes:
        return f"m{next(self.body_ids)}".encode()

    def client(self, key: Any) -> tuple[RawClient, int]:
        conn, number = self.channels[key]
        return self.clients[conn], number

    # -- calls -------------------------------------------------------------------------------
    def call_async(self, key: Any, method: Method) -> Outcome:
        """Send a method that has no reply, then ping the channel: Ok or how it was closed."""
        client, number = self.client(key)
        try:
            client.send(number, method)
            client.rpc(number, ExchangeDeclare(exchange="amq.direct", exchange_type="direct", passive=True),
                       ExchangeDeclareOk, timeout=self.target.timeout(self.SETTLE_SECONDS))
            return OK
        except DriverError as exc:
            return self.closed_outcome(key, exc)

    def call(self, key: Any, method: Method, *reply: type) -> Outcome:
        client, number = self.client(key)
        try:
            client.rpc(number, method, *reply, timeout=self.target.timeout(self.SETTLE_SECONDS))
            return OK
        except DriverError as exc:
            return self.closed_outcome(key, exc)

    def closed_outcome(self, key: Any, exc: DriverError) -> Outcome:
        """The outcome a broker close means, after checking what arrived before it."""
        if isinstance(exc, NoReply):
            raise AssertionError(f"channel {key!r}: {exc}") from None
        outcome = to_outcome(exc)
        # what arrived before the close came before the broker handled our method: check it
        # against the model as it was (PC-13 keeps earlier confirms valid, for instance)
        if isinstance(outcome, ConnectionClosed):
            # RQ-03 while the connection goes: a closing channel's requeues may reach consumers
            # on sibling channels that are closing too; those deliveries die with them
            conn = self.channels[key][0]
            for other, (c, _) in self.channels.items():
                if c == conn and self.model.is_open(other):
                    self.drain_channel(other, drop_deliveries=True)
        else:
            self.drain_channel(key)
        return outcome

    def expect_outcome(self, what: str, observed: Outcome, expected: Outcome, rules: str = "") -> None:
        assert observed == expected, f"{what}: broker gave {observed}, the rules say {expected}" + \
            (f" ({rules})" if rules else "")

    def recover_from(self, key: Any, outcome: Outcome) -> None:
        """After a broker close: reopen the channel, or reconnect and reopen its channels."""
        if isinstance(outcome, ChannelClosed):
            conn, number = self.channels[key]
            self.open(key, conn, number)
        elif isinstance(outcome, ConnectionClosed):
            conn = self.channels[key][0]
            self.clients[conn].close()
            self.connect(conn, **self.capabilities[conn])
            for other, (c, number) in list(self.channels.items()):
                if c == conn:
                    self.open(other, c, number)

    # -- settling ----------------------------------------------------------------------------
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
            if not waiting and not flushed:
                flushed = True
                if self.flush():
                    continue  # something arrived meanwhile: check it first
            if not waiting:
                mismatch = self.count_mismatch()
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
        is being shrunk (machine_support rules: hurried shrinking)."""
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

    def flush(self) -> bool:
        """A round trip on each connection: what the broker wrote to it before is read now, not
        in some later step, so every run notices a frame at the same step (Hypothesis replays
        must see the same run). True when a channel then has something to check."""
        pinged: list[tuple[RawClient, int]] = []
        for conn, client in self.clients.items():  # every connection's ping out, then each reply awaited
            numbers = [n for k, (c, n) in self.channels.items() if c == conn and self.model.is_open(k)]
            number = CONTROL if conn == self.control_conn else next(iter(numbers), None)
            if number is None or client.sock is None or client.lost or client.connection_closed is not None:
                continue
            client.send(number, ExchangeDeclare(exchange="amq.direct", exchange_type="direct", passive=True))
            pinged.append((client, number))
        for pinger, number in pinged:
            pinger.expect(number, ExchangeDeclareOk, timeout=self.target.timeout(self.SETTLE_SECONDS))
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
        control = self.clients[self.control_conn]
        queues = list(self.model.queues())
        for logical in queues:
            control.send(CONTROL, QueueDeclare(queue=self.real[logical], passive=True))
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

    # -- teardown ----------------------------------------------------------------------------
    def final_check(self) -> None:
        """Hook: what must hold at the end of a run (confirms settled, ...)."""

    def teardown(self) -> None:
        try:
            if not self.busy:
                self.final_check()
        finally:
            self.cleanup()
            example_ended(self.budget, self.smallest, self.program, FrameLog(self.recorder), self.hurried)

    def cleanup(self) -> None:
        deletes: list[Method] = [QueueDelete(queue=q) for q in self.real.values()]
        deletes += [ExchangeDelete(exchange=x) for x in self.exchanges.values()]
        for client in self.clients.values():  # first: no consumer left on what we delete
            client.close()
        delete_after_close(deletes, self.target.url, self.target.timeout(5.0))
