"""The topology machine: exchanges, queues and bindings built and torn down at random, every
publish's destinations and every removal checked against the topology oracle.

Responsibility: drive one connection through declares (every exchange type, auto-delete,
internal, an alternate exchange; queues exclusive, auto-delete, durable), queue and
exchange-to-exchange bindings (topic patterns with `*` and `#`, headers with each `x-match`),
unbinds, deletes, a consumer's cancel, a reconnect and publishes (mandatory, CC), and fail at the
first step where the broker differs from `conformance.model.topology`, naming the rule.
Rules:
- One connection, channel 1 for every step, channel 2 for the checks (a 404 closes only it).
- Where a publish went is read, never guessed: every publish has its own body, then every queue
  the model holds is drained with basic.get (no-ack) on channel 1 until get-empty; the broker
  orders a publish and a later basic.get of the same channel, and a basic.return before the
  replies to what the channel sent after the publish. Every queue is empty after each step.
- After every step each exchange and queue the model holds must exist, empty (a passive declare
  each); what the step removed must be gone. A removal by the broker's own act may come a moment
  later and is asked again until the (scaled) wait ends, a round trip each: an exclusive queue
  after its connection closed, and an auto-delete queue after its consumer's basic.cancel-ok
  (the queue process sends cancel-ok first, then removes the consumer and stops:
  rabbit_amqqueue_process `maybe_send_reply(ChPid, OkMsg)`, v3.10.8 l. 1443, v4.0.5 l. 1380,
  v4.3.5 l. 1428). What queue.delete, exchange.delete and unbind remove is gone once the reply
  came (the queue process deletes in terminate, then replies: gen_server2 `{stop, ...}` and
  `terminate_delete` with `reply_to`), so those are asked once.
- A failure's first line names one rule: the hop the broker got wrong (`hop_rule`,
  `extra_rule`; for a copy missing behind an exchange-to-exchange binding, the bindings on its way
  tried alone first, topology_checks), the removal it did not make, or the request it refused.
- Values drawn from the machine's state are picks (machine_support), names are logical
  (`x0`..`x3`, `q0`..`q3`) and real names are unique per example; everything is deleted at teardown.
- A publish and its judgement are topology_publish's (`TopologyPublishing`), the checks after
  each step topology_checks' (its base class).
"""

from __future__ import annotations

import functools
import sys
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import hypothesis
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from codec import (
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    ExchangeBind,
    ExchangeBindOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    ExchangeUnbind,
    ExchangeUnbindOk,
    Method,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueueUnbind,
    QueueUnbindOk,
)
from conformance.drivers.raw import Recorder
from conformance.model.topology import Binding, Exchange, Queue, Removed, Topology
from conformance.suite.steps.machine_budget import (
    REDUCED_STABLE_SECONDS,
    Budget,
    Smallest,
    example_ended,
    run_within_budget,
)
from conformance.suite.steps.machine_program import FrameLog, Program
from conformance.suite.steps.machine_replay import reduce_failure
from conformance.suite.steps.machine_support import (
    PICKS,
    MachineClient,
    MachineTarget,
    Pick,
    delete_after_close,
    from_machine,
)
from conformance.suite.steps.topology_checks import CHECK
from conformance.suite.steps.topology_draws import (
    BINDING_HEADERS,
    EXCHANGES,
    HEADERS,
    NAMES,
    PATTERNS,
    QUEUES,
    WORDS,
)
from conformance.suite.steps.topology_draws import fill as fill_key
from conformance.suite.steps.topology_publish import STEP, TopologyPublishing

STABLE_EXAMPLES = 1000  # an example takes milliseconds: shrinking may go on (the stable seconds still end it)
# Hypothesis's shrinking stops REDUCED_STABLE_SECONDS after its last smaller failure: what it
# leaves, `reduce_failure` reduces by replaying the steps, dropping each that plays no part.
# Timed through exchange_bind_reversed: the first failure (5 steps) at 0.4 s, nothing smaller in
# the next 6 s (250 examples), the replay reduction 0.04 s.
F = TypeVar("F", bound=Callable[..., None])


def resolved(fn: F) -> F:
    """A rule whose picks are resolved against the machine's state when it runs (machine_support)."""

    @functools.wraps(fn)
    def wrapper(self: TopologyMachine, **kwargs: Any) -> None:
        kwargs = {k: v.resolve(self) if isinstance(v, Pick) else v for k, v in kwargs.items()}
        self.calls.append((fn.__name__, kwargs))
        fn(self, **kwargs)

    return wrapper  # type: ignore[return-value]


def _exchanges(m: TopologyMachine) -> list[str]:
    return sorted(m.model.exchanges)


def _queues(m: TopologyMachine) -> list[str]:
    return sorted(m.model.queues)


def _publishable(m: TopologyMachine) -> list[str]:
    return [x for x in _exchanges(m) if not m.model.exchanges[x].internal]


def _aimable(m: TopologyMachine) -> list[Binding]:
    return [b for b in m.model.bindings if not m.model.exchanges[b.source].internal]


class TopologyMachine(TopologyPublishing, RuleBasedStateMachine):
    """ROUTE-01, 03..07, 09..13, EXCH-06..10, QUEUE-05, 06, 10, 11 over one connection. A step runs
    nothing when what it would name does not exist (no preconditions: a rule's draw keeps its meaning
    when the shrinker deletes the steps before it)."""

    def __init__(self, target: MachineTarget) -> None:
        super().__init__()
        self.target, self.model, self.recorder = target, Topology(), Recorder()
        self.prefix = f"amqpc.t.{uuid.uuid4().hex[:10]}"
        self.program = Program(type(self).__name__)
        self.budget: Budget | None = None
        self.smallest: Smallest | None = None
        self.bodies = 0
        self.hurried = False
        self.calls: list[tuple[str, dict[str, Any]]] = []  # the steps as called, picks resolved (replay)
        self.failed: list[list[tuple[str, dict[str, Any]]]] | None = None  # where a failing example's calls go
        self.declared: set[str] = set()  # the logical names a declare named (close deletes them)
        self.client = self._connect()

    def real(self, logical: str) -> str:
        return f"{self.prefix}.{logical}"

    def _connect(self) -> MachineClient:
        client = MachineClient(self.target.url, recorder=self.recorder, timeout=self.target.timeout(5.0))
        client.connect()
        client.channel(STEP)
        client.channel(CHECK)
        return client

    # -- steps -------------------------------------------------------------------------------
    @initialize(exchanges=st.lists(EXCHANGES, min_size=1, max_size=3), queues=st.lists(QUEUES, min_size=1, max_size=3),
                bindings=st.lists(st.tuples(st.integers(0, NAMES - 1), st.integers(0, NAMES - 1), st.booleans(),
                                            PATTERNS, BINDING_HEADERS), min_size=1, max_size=5))
    def build(self, exchanges: list[Exchange], queues: list[Queue],
              bindings: list[tuple[int, int, bool, str, dict[str, str]]]) -> None:
        """A first topology in one step: exchanges x0.., queues q0.., bindings between them."""
        self.calls.append(("build", {"exchanges": exchanges, "queues": queues, "bindings": bindings}))
        exchanges = [Exchange(e.kind, e.auto_delete, e.internal, e.alternate if e.alternate is None or
                              int(e.alternate[1:]) < len(exchanges) else None) for e in exchanges]
        made = [self._binding(f"x{s % len(exchanges)}", f"x{d % len(exchanges)}" if to_x else f"q{d % len(queues)}",
                              to_x, pattern, headers, kind=exchanges[s % len(exchanges)].kind)
                for s, d, to_x, pattern, headers in bindings]
        self._log("build", exchanges=exchanges, queues=queues, bindings=[b.describe() for b in made])
        for n, spec in enumerate(exchanges):
            self._declare_exchange(f"x{n}", spec)
        for n, qspec in enumerate(queues):
            self._declare_queue(f"q{n}", qspec)
        for binding in made:
            self._bind(binding)
        self._check(Removed())

    @rule(name=from_machine(lambda m: [f"x{n}" for n in range(NAMES) if f"x{n}" not in m.model.exchanges]),
          spec=EXCHANGES)
    @resolved
    def declare_exchange(self, name: str | None, spec: Exchange) -> None:
        """An exchange under a name not in use (redeclarations are the exchanges area's tests)."""
        if name is None:
            return
        self._log("declare_exchange", name=name, spec=spec)
        self._declare_exchange(name, spec)
        self._check(Removed())

    @rule(name=from_machine(lambda m: [f"q{n}" for n in range(NAMES) if f"q{n}" not in m.model.queues]), spec=QUEUES)
    @resolved
    def declare_queue(self, name: str | None, spec: Queue) -> None:
        if name is None:
            return
        self._log("declare_queue", name=name, spec=spec)
        self._declare_queue(name, spec)
        self._check(Removed())

    @rule(exchange=from_machine(_exchanges), queue=from_machine(_queues), pattern=PATTERNS, headers=BINDING_HEADERS)
    @resolved
    def bind_queue(self, exchange: str | None, queue: str | None, pattern: str, headers: dict[str, str]) -> None:
        if exchange is None or queue is None:
            return
        binding = self._binding(exchange, queue, False, pattern, headers)
        self._log("bind", binding=binding.describe())
        self._bind(binding)
        self._check(Removed())

    @rule(source=from_machine(_exchanges), destination=from_machine(_exchanges), pattern=PATTERNS,
          headers=BINDING_HEADERS)
    @resolved
    def bind_exchange(self, source: str | None, destination: str | None, pattern: str,
                      headers: dict[str, str]) -> None:
        if source is None or destination is None:
            return
        binding = self._binding(source, destination, True, pattern, headers)
        self._log("bind", binding=binding.describe())
        self._bind(binding)
        self._check(Removed())

    @rule(how=st.sampled_from(["unbind", "delete_queue", "delete_exchange", "consume_and_cancel", "reconnect"]),
          index=st.integers(0, PICKS - 1))
    def remove(self, how: str, index: int) -> None:
        """One of the removals (one rule, so that building and publishing are drawn as often):
        unbind a binding, delete a queue or an exchange, a consumer comes and goes (an auto-delete
        queue goes with it), the connection closes (its exclusive queues go)."""
        choices: dict[str, list[Any]] = {"unbind": list(self.model.bindings), "delete_exchange": _exchanges(self),
                                         "reconnect": [None]}
        items = choices.get(how, _queues(self))
        if not items:
            return
        item = items[-1 - index % len(items)]
        if how == "reconnect":
            self._log("reconnect")
            self.client.close()
            self.client = self._connect()
            self._check(self.model.connection_closed(), wait=True)
        elif how == "unbind":
            self._log("unbind", binding=item.describe())
            self._request("EXCH-10", f"unbind {item.describe()}", self._bind_method(item, unbind=True),
                          ExchangeUnbindOk, QueueUnbindOk)
            self._check(self.model.unbind(item))
        elif how == "delete_queue":
            self._log("delete_queue", queue=item)
            self._request("QUEUE-10", f"queue.delete {item}", QueueDelete(queue=self.real(item)), QueueDeleteOk)
            self._check(self.model.delete_queue(item))
        elif how == "delete_exchange":
            self._log("delete_exchange", exchange=item)
            self._request("EXCH-06", f"exchange.delete {item}", ExchangeDelete(exchange=self.real(item)),
                          ExchangeDeleteOk)
            self._check(self.model.delete_exchange(item))
        else:  # the queue is empty: the consumer gets nothing
            self._log("consume_and_cancel", queue=item)
            self._request("QUEUE-06", f"basic.consume on {item}",
                          BasicConsume(queue=self.real(item), consumer_tag="c", no_ack=True), BasicConsumeOk)
            self._request("QUEUE-06", f"basic.cancel of the consumer on {item}", BasicCancel(consumer_tag="c"),
                          BasicCancelOk)
            self._check(self.model.consumer_cancelled(item), wait=True)

    @rule(exchange=from_machine(_publishable), key=WORDS, headers=HEADERS, cc=st.lists(WORDS, max_size=2),
          mandatory=st.booleans())
    @resolved
    def publish(self, exchange: str | None, key: str, headers: dict[str, str], cc: list[str], mandatory: bool) -> None:
        if exchange is None:
            return
        table: dict[str, Any] = {**headers, **({"CC": list(cc)} if cc else {})}
        self._log("publish", exchange=exchange, key=key, headers=table, mandatory=mandatory)
        self._publish(exchange, self.real(exchange), key, table, tuple(cc), mandatory)

    @rule(binding=from_machine(_aimable), fill=st.lists(st.integers(0, 2), min_size=4, max_size=4),
          keep=st.lists(st.booleans(), min_size=3, max_size=3), mandatory=st.booleans())
    @resolved
    def publish_along(self, binding: Binding | None, fill: list[int], keep: list[bool], mandatory: bool) -> None:
        """A publish to a binding's source made from the binding: `*` and `#` filled in (`fill`), the
        binding's headers kept or changed (`keep`), so that it matches or nearly does."""
        if binding is None:
            return
        key = fill_key(binding.key, fill)
        headers = {k: (v if kept else "3") for (k, v), kept in
                   zip([a for a in binding.arguments if a[0] != "x-match"], keep, strict=False)}
        self._log("publish", exchange=binding.source, key=key, headers=headers, mandatory=mandatory)
        self._publish(binding.source, self.real(binding.source), key, dict(headers), (), mandatory)

    @rule(queue=from_machine(_queues), mandatory=st.booleans(), missing=st.booleans())
    @resolved
    def publish_to_queue(self, queue: str | None, mandatory: bool, missing: bool) -> None:
        """Through the default exchange, by a queue's name (or a name no queue has)."""
        if queue is None:
            return
        logical = f"{queue}-missing" if missing else queue
        self._log("publish_to_queue", queue=logical, mandatory=mandatory)
        self._publish("", "", self.real(logical), {}, (), mandatory, logical=logical)

    # -- the steps' parts --------------------------------------------------------------------
    def _log(self, step: str, **arguments: Any) -> None:
        self.program.add(step, arguments)

    def _binding(self, source: str, destination: str, to_exchange: bool, pattern: str, headers: dict[str, str],
                 kind: str | None = None) -> Binding:
        if (kind or self.model.exchanges[source].kind) == "headers":
            return Binding(source, destination, to_exchange, "", tuple(sorted(headers.items())))
        return Binding(source, destination, to_exchange, pattern)

    def _bind_method(self, binding: Binding, unbind: bool = False) -> Method:
        source, destination = self.real(binding.source), self.real(binding.destination)
        key, arguments = binding.key, dict(binding.arguments)
        if binding.to_exchange:
            kind = ExchangeUnbind if unbind else ExchangeBind
            return kind(destination=destination, source=source, routing_key=key, arguments=arguments)
        qkind = QueueUnbind if unbind else QueueBind
        return qkind(queue=destination, exchange=source, routing_key=key, arguments=arguments)

    def _bind(self, binding: Binding) -> None:
        self._request("EXCH-10", f"bind {binding.describe()}", self._bind_method(binding), ExchangeBindOk, QueueBindOk)
        self.model.bind(binding)

    def _declare_exchange(self, name: str, spec: Exchange) -> None:
        self.declared.add(name)
        arguments = {"alternate-exchange": self.real(spec.alternate)} if spec.alternate else {}
        self._request("EXCH-01", f"exchange.declare {name} {spec}",
                      ExchangeDeclare(exchange=self.real(name), exchange_type=spec.kind, auto_delete=spec.auto_delete,
                                      internal=spec.internal, arguments=arguments), ExchangeDeclareOk)
        self.model.declare_exchange(name, spec)

    def _declare_queue(self, name: str, spec: Queue) -> None:
        self.declared.add(name)
        self._request("QUEUE-01", f"queue.declare {name} {spec}",
                      QueueDeclare(queue=self.real(name), exclusive=spec.exclusive, auto_delete=spec.auto_delete,
                                   durable=spec.durable), QueueDeclareOk)
        self.model.declare_queue(name, spec)

    # -- teardown ----------------------------------------------------------------------------
    def teardown(self) -> None:
        if self.failed is not None and isinstance(sys.exc_info()[1], AssertionError):
            self.failed.append(list(self.calls))
        try:
            self.close()
        finally:
            example_ended(self.budget, self.smallest, self.program, FrameLog(self.recorder), self.hurried)

    def finish(self) -> None:
        """Nothing more at the end of a replay (machine_replay): each step judged its own outcome."""

    def close(self) -> None:
        """Close the connection, then delete every name a declare of this example named (nothing
        else can exist; machine_support.delete_after_close)."""
        self.client.close()
        deletes: list[Method] = [QueueDelete(queue=self.real(n)) for n in sorted(self.declared) if n.startswith("q")]
        deletes += [ExchangeDelete(exchange=self.real(n)) for n in sorted(self.declared) if n.startswith("x")]
        delete_after_close(deletes, self.target.url, self.target.timeout(5.0))


def run_topology_machine(target: MachineTarget, *, examples: int, steps: int, shard: int = 0) -> None:
    """The machine as a Hypothesis test within its budget (machine_budget rules); a failure is
    then reduced by replaying its steps (`machine_replay`). `shard` 1..n: one of the suite's
    shards, side by side on their own workers, each with its examples seeded by its number in
    place of the factory's source (Hypothesis's `seed` wins over `derandomize`)."""
    budget, smallest = Budget(Budget.seconds_configured()), Smallest(STABLE_EXAMPLES, REDUCED_STABLE_SECONDS)
    failed: list[list[tuple[str, dict[str, Any]]]] = []

    def factory() -> TopologyMachine:  # its source seeds the examples (machine_support rules)
        made = TopologyMachine(target)
        made.budget, made.smallest, made.failed = budget, smallest, failed
        return made

    try:
        run_within_budget(hypothesis.seed(shard)(factory) if shard else factory, budget, smallest,
                          examples=examples, steps=steps)
    except AssertionError as failure:
        if failed:
            reduce_failure(lambda _hurried: TopologyMachine(target), failed[-1], failure, budget)
        raise
