"""Shared machinery of the model-vs-broker Hypothesis machines (docs/design.md, conventions: the fakeredis shape).

Responsibility: run a client program against a broker over the raw driver and against the model
(conformance.model) side by side, step by step, and fail with the shrunk steps and that run's frames.
Rules:
- Rules are synchronous (docs/design.md decision 5). A method without a reply (ack, nack, reject,
  publish) is followed by a ping (a passive exchange.declare on the same channel), so its
  outcome is known: the broker closes the channel before answering the ping, or answers it.
- Outcomes compare by scope, reply code and class/method id (`model.outcomes`), never text.
- An example's set-up declares its queues, exchanges and bindings on the control channel inside
  `pipelined()`: sent one after another, the replies read in order at the end, before any other
  channel is used. A channel handles its methods one at a time in the order they came and answers
  them in that order (RabbitMQ: the reader hands each method to the channel process, which runs
  queue.declare, exchange.declare and queue.bind to completion before the next:
  rabbit_channel `handle_method/3`), so a bind sent after its queue's declare finds the queue; a
  refused declare closes the channel and the reply awaited then raises that close.
- After every step `sync()` makes the run quiescent (`machine_settle`: what it checks and waits for).
- Each example uses fresh connections and uniquely named queues, deleted at teardown.
- `AMQPC_MACHINE_EXAMPLES` overrides every machine's example count (machine_support).
- Values from the machine's state are drawn as indices and resolved when the step runs
  (`Pick`); each example keeps the steps as run, values resolved, and a failing one reports
  them as a program, with the frames of that run. Each machine test has a budget, shrinking
  included (`Budget`, machine_budget).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar

from hypothesis.stateful import INITIALIZE_RULE_MARKER, RuleBasedStateMachine

from codec import (
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
from conformance.drivers.raw import DriverError, NoReply, Recorder
from conformance.model import (
    OK,
    BrokerModel,
    ChannelClosed,
    ConnectionClosed,
    Outcome,
)
from conformance.suite.steps.machine_budget import (
    REDUCED_STABLE_SECONDS,
    Budget,
    SetupRecorded,
    Smallest,
    example_ended,
    run_within_budget,
)
from conformance.suite.steps.machine_program import FrameLog, Program, format_frame
from conformance.suite.steps.machine_replay import Call, Replaying, reduce_failure, replay_in_full
from conformance.suite.steps.machine_settle import CONTROL, Settling
from conformance.suite.steps.machine_support import (
    ENV_EXAMPLES,
    MachineClient,
    MachineTarget,
    Pick,
    delete_after_close,
    from_machine,
    machine_settings,
    to_outcome,
)
from conformance.suite.steps.wire import PING

__all__ = ["CONTROL", "ENV_EXAMPLES", "FrameLog", "MachineClient", "MachineTarget", "ModelMachine", "Pick",
           "format_frame", "from_machine", "machine_settings", "run_machine", "step", "to_outcome"]

F = TypeVar("F", bound=Callable[..., None])




def run_machine(machine: type[ModelMachine], target: MachineTarget, *, examples: int, steps: int,
                **arguments: Any) -> None:
    """Run `machine(target, **arguments)` as a Hypothesis test, within its budget (`run_within_budget`);
    a failure is then reduced by replaying its steps (`machine_replay`), unless the machine says
    its replays cost too much (`REPLAY_REDUCTION`)."""
    reducing = machine.REPLAY_REDUCTION
    budget = Budget(Budget.seconds_configured())
    smallest = Smallest(stable_seconds=REDUCED_STABLE_SECONDS, replayed_after=True) if reducing else Smallest()

    def factory() -> ModelMachine:  # its source seeds the examples: keep it (machine_support rules)
        made = machine(target, **arguments)
        made.budget, made.smallest = budget, smallest
        return made

    def replaying(hurried: bool) -> ModelMachine:
        made = machine(target, **arguments)
        made.smallest = Replaying(smallest, hurried)
        return made

    try:
        run_within_budget(factory, budget, smallest, examples=examples, steps=steps)
    except AssertionError as failure:
        if reducing and smallest.failed_calls:
            calls = smallest.failed_calls
            fixed = sum(1 for name, _ in itertools.takewhile(lambda call: machine.initializes(call[0]), calls))
            reduce_failure(replaying, calls, failure, budget, fixed=fixed)
            if smallest.failed_hurried:
                replay_in_full(replaying, calls, failure, smallest)
        raise


def step(fn: F) -> F:
    """Wrap a rule: resolve its picks, log it, mark the run busy while it executes, then sync
    (see module docstring)."""

    @functools.wraps(fn)
    def wrapper(self: ModelMachine, **kwargs: Any) -> None:
        kwargs = {k: v.resolve(self) if isinstance(v, Pick) else v for k, v in kwargs.items()}
        self.program.add(fn.__name__, kwargs)
        self.calls.append((fn.__name__, kwargs))
        self.busy = True
        fn(self, **kwargs)
        self.sync()
        ModelMachine.steps_run += 1
        self.busy = False

    return wrapper  # type: ignore[return-value]


class ModelMachine(Settling, SetupRecorded, RuleBasedStateMachine):
    """Base of the machines: connections, channels, queues, teardown; the settle from `Settling`."""

    steps_run: ClassVar[int] = 0
    budget: Budget | None = None
    # False: a failure is reported as Hypothesis shrank it, after the usual STABLE_SECONDS (a machine
    # whose steps wait on the broker's clock, where each replay would cost seconds)
    REPLAY_REDUCTION: ClassVar[bool] = True
    PIPELINED_SETUP: ClassVar[bool] = True  # False: `pipelined` waits for each reply (declares on other nodes)

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
        self.pending: list[type[Method]] | None = None  # replies owed inside `pipelined`
        self.calls: list[Call] = []  # the steps as called, picks resolved (replay)

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
        self.control_rpc(declare, QueueDeclareOk)

    @contextlib.contextmanager
    def pipelined(self) -> Iterator[None]:
        """The set-up's declares and binds on the control channel go out without waiting for each
        reply; the replies are read, in order, when the block ends (module rules)."""
        if not self.PIPELINED_SETUP:
            yield
            return
        self.pending = []
        try:
            yield
            pending = self.pending
        finally:
            self.pending = None
        control = self.clients[self.control_conn]
        for reply in pending:
            control.expect(CONTROL, reply)

    def control_rpc(self, method: Method, reply: type[Method]) -> None:
        """`method` on the control channel and its reply, or only sent inside `pipelined`."""
        control = self.clients[self.control_conn]
        if self.pending is None:
            control.rpc(CONTROL, method, reply)
            return
        control.send(CONTROL, method)
        self.pending.append(reply)

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
        self.control_rpc(ExchangeDeclare(exchange=real, exchange_type="fanout", auto_delete=False), ExchangeDeclareOk)
        for queue in queues:
            self.control_rpc(QueueBind(queue=self.real[queue], exchange=real), QueueBindOk)
        self.model.declare_fanout(logical, queues)

    def body(self) -> bytes:
        return f"m{next(self.body_ids)}".encode()

    # -- calls -------------------------------------------------------------------------------
    def call_async(self, key: Any, method: Method) -> Outcome:
        """Send a method that has no reply, then ping the channel: Ok or how it was closed."""
        client, number = self.client(key)
        try:
            client.send(number, method)
            client.rpc(number, PING,
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

    # -- teardown ----------------------------------------------------------------------------
    def final_check(self) -> None:
        """Hook: what must hold at the end of a run (confirms settled, ...)."""

    @classmethod
    def initializes(cls, name: str) -> bool:
        """True for an `@initialize` step (a replay keeps it: machine_replay)."""
        return getattr(getattr(cls, name, None), INITIALIZE_RULE_MARKER, None) is not None

    def finish(self) -> None:
        """The end of a replay (machine_replay): the final check, unless a step was cut short."""
        if not self.busy:
            self.final_check()

    def close(self) -> None:
        self.cleanup()

    def teardown(self) -> None:
        failure = sys.exc_info()[1]
        try:
            self.finish()
        except AssertionError as exc:
            failure = exc
            raise
        finally:
            if self.REPLAY_REDUCTION and self.smallest is not None and isinstance(failure, AssertionError):
                self.smallest.failed_calls = list(self.calls)  # run_machine reduces the last
                self.smallest.failed_hurried = self.hurried
            self.cleanup()
            example_ended(self.budget, self.smallest, self.program, FrameLog(self.recorder), self.hurried)

    def cleanup(self) -> None:
        deletes: list[Method] = [QueueDelete(queue=q) for q in self.real.values()]
        deletes += [ExchangeDelete(exchange=x) for x in self.exchanges.values()]
        for client in self.clients.values():  # first: no consumer left on what we delete
            client.close()
        delete_after_close(deletes, self.target.url, self.target.timeout(5.0))
