"""Support pieces of the model-vs-broker machines: target, settings, client, frame log.

Responsibility: what the machines (machine_base and the test_machine_* files) need around
Hypothesis and the raw driver, kept apart so machine_base holds only the run loop.
Rules:
- `AMQPC_MACHINE_EXAMPLES` overrides every machine's example count (deeper runs); deadlines
  are off (a broker's latency is not the code under test). The search is derandomized and
  keeps no example database: the same broker gets the same examples, so a verdict does not
  depend on luck or on files an earlier run (against another broker) left behind.
- Every wait is scaled by the target's timeout scale (`MachineTarget.timeout`).
- The frames of a run are formatted only when Hypothesis reports the minimal failing example
  (`FrameLog` is passed to `note()` unformatted).
- Broker closes become model outcomes (`to_outcome`): scope, code, class and method id.
- Data generation never depends on the broker: a value taken from the machine's state is
  drawn as a plain index (`from_machine` -> `Pick`) and resolved against the model when the
  step runs, so every replay of a choice sequence draws the same shapes (no
  FlakyStrategyDefinition, whatever the broker answered).
- Budget: each machine test has a wall-clock budget, shrinking included (`AMQPC_MACHINE_BUDGET`
  seconds, default `DEFAULT_BUDGET`, not scaled: a budget is what the user waits). Shrinking stops
  when it is spent, or once the smallest failure is stable (`STABLE_EXAMPLES` examples have run,
  or `STABLE_SECONDS` have passed (`REDUCED_STABLE_SECONDS` for a machine that reduces its failure
  by replaying it afterwards: machine_replay), since a smaller failing example was last seen: against a deviating broker each example waits
  for frames that never come, and a search that no longer finds smaller failures only spends
  the user's time); the smallest failure found by then is reported, as a failure (never
  `broken`); generation is bounded by the example count, every step by its bounded waits.
- Hurried shrinking: once a failure has been seen, the candidates Hypothesis tries while
  shrinking it wait less than the full settle for what must still come (a delivery, a cancel, a
  queue count): against a deviating broker each failing candidate otherwise waits out the full
  settle. The hurried wait is `HURRIED_FACTOR` times the slowest settle a sync of the same test
  completed in so far (`Smallest.settled`: how long the broker took, all owed frames and counts
  in), within `HURRIED_FLOOR_SECONDS` and `HURRIED_SETTLE_SECONDS` (both scaled); a machine whose
  waits are on the broker's clock (TTLs, consumer timeouts) keeps its own fixed `HURRIED_SECONDS`
  (`ADAPTIVE_HURRY = False`). Only the search is hurried, never a verdict:
  Hypothesis's final replay of the smallest candidate waits in full, and a failure seen only
  with the hurried wait never becomes the reported one (if the final replay passes, the
  smallest failure seen with full waits is reported, as for `Flaky`).
- Every machine test, over the raw driver (machine_base) or through a client library
  (machine_clients), runs by `run_within_budget` and ends each example by `example_ended`: the
  same budget, the same smallest failure reported when Hypothesis cannot replay one (`Flaky`),
  each example noted as its program and its frames.
- The derandomized seed is Hypothesis's digest of the machine factory's source (the
  `factory` closures of `run_machine` and `run_client_machine`): changing a line of one
  changes every example its machines run, and the fault tests are proven on those examples.
  Keep those few lines as they are. A machine split into shards that run side by side (the
  topology machine's three) seeds each shard by its number instead (`hypothesis.seed`, which wins
  over `derandomize`): the same examples on every run, different ones in each shard.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.errors import Flaky
from hypothesis.internal.conjecture import engine
from hypothesis.reporting import report as hypothesis_report
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from codec import Command, ExchangeDeleteOk, QueueDeleteOk
from codec.frames import BodyFrame, HeaderFrame, MethodFrame, describe
from conformance.drivers.raw import ChannelClosed as WireChannelClosed
from conformance.drivers.raw import ConnectionClosed as WireConnectionClosed
from conformance.drivers.raw import DriverError, RawClient, Recorder
from conformance.model import ChannelClosed, ConnectionClosed, Outcome, wording

ENV_EXAMPLES = "AMQPC_MACHINE_EXAMPLES"
ENV_SHRINK = "AMQPC_MACHINE_SHRINK"
ENV_BUDGET = "AMQPC_MACHINE_BUDGET"
DEFAULT_BUDGET = 60.0  # s per machine test against a deviating broker, shrinking included
STABLE_EXAMPLES = 60  # examples since the smallest failure last got smaller: shrinking ends
STABLE_SECONDS = 6.0  # or seconds since then (not scaled: what the user waits), whichever comes first
# a machine whose failure is then reduced by replaying its steps (machine_replay): the replay drops
# what Hypothesis's shrinking leaves, so that may stop sooner (timed: docs/benchmarks.md)
REDUCED_STABLE_SECONDS = 1.0
HURRIED_SETTLE_SECONDS = 0.1  # a shrink candidate's settle, at most (module rules: hurried shrinking)
HURRIED_FLOOR_SECONDS = 0.02  # and at least (scaled)
HURRIED_FACTOR = 4.0  # times the slowest settle a sync of this test has completed in
PICKS = 8  # an index into what the machine holds at that step: 0..PICKS-1, wrapping


@dataclass(frozen=True)
class MachineTarget:
    """Where and how a machine runs: broker URL, profile name, timeout scale, and whether the broker
    is RabbitMQ (its base profile), not another broker judged by a RabbitMQ profile for the
    extensions it claims."""

    url: str
    profile: str
    timeout_scale: float = 1.0
    rabbitmq_base: bool = True

    def timeout(self, seconds: float) -> float:
        return seconds * self.timeout_scale


def machine_settings(examples: int, steps: int) -> settings:
    count = int(os.environ.get(ENV_EXAMPLES, "0") or 0) or examples
    phases: tuple[Phase, ...] = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)  # no explain
    if os.environ.get(ENV_SHRINK) == "0":  # a kill matters, not its minimal form
        phases = (Phase.explicit, Phase.reuse, Phase.generate)
    return settings(max_examples=count, stateful_step_count=steps, deadline=None, derandomize=True, report_multiple_bugs=False,
                    database=None, suppress_health_check=list(HealthCheck), phases=phases)


class Budget:
    """The wall-clock budget of one machine test (see the module rules)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.perf_counter() + seconds  # Hypothesis's shrinker reads perf_counter

    @staticmethod
    def seconds_configured() -> float:
        return float(os.environ.get(ENV_BUDGET, "0") or 0) or DEFAULT_BUDGET

    @property
    def spent(self) -> bool:
        return time.perf_counter() > self.deadline

    @contextlib.contextmanager
    def limit_shrinking(self, smallest: Smallest) -> Iterator[None]:
        """Hypothesis stops shrinking once `finish_shrinking_deadline < perf_counter()`, the
        deadline being `perf_counter() + MAX_SHRINKING_SECONDS` taken when shrinking starts, and
        reports the smallest failure found by then: that deadline becomes `ShrinkEnd`, which has
        passed when the budget is spent or the smallest failure is stable. Generation is bounded
        by the example count."""
        def report(text: str) -> None:  # Hypothesis's warning assumes its own 5 minutes; ours is the note
            if not text.startswith("WARNING: Hypothesis has spent more than five minutes"):
                hypothesis_report(text)

        with mock.patch.object(engine, "MAX_SHRINKING_SECONDS", _ShrinkSeconds(self, smallest)), \
                mock.patch.object(engine, "report", report):
            yield

    def report(self) -> None:
        """In the reported (final) run: say so when the budget cut shrinking short."""
        if self.spent and current_build_context().is_final:
            note(f"the machine's budget ({self.seconds:g} s, {ENV_BUDGET}) ran out: this is the smallest "
                 "failing example found within it")


class Smallest:
    """The smallest failing example a machine test saw: its error, program and frames. It is
    what the test reports when Hypothesis cannot replay a failure (a broker whose timing
    differs between runs makes Hypothesis raise `Flaky`): a failure, never `broken`. It is
    `stable` once `STABLE_EXAMPLES` examples have run, or `STABLE_SECONDS` have passed, since a
    failure with fewer steps was last seen (one with as many steps and smaller values does not
    count: the shrinker finds those on and on, each a little smaller)."""

    def __init__(self, stable_examples: int = STABLE_EXAMPLES, stable_seconds: float = STABLE_SECONDS, *,
                 replayed_after: bool = False) -> None:
        self.stable_examples = stable_examples  # a fast machine runs many more examples in STABLE_SECONDS
        self.stable_seconds = stable_seconds
        self.replayed_after = replayed_after  # a full replay follows Hypothesis's final one (machine_replay)
        self.best: tuple[int, BaseException, Program, str] | None = None
        self.examples = 0  # examples offered so far
        self.improved_at = 0  # the example that last gave a smaller failure
        self.improved_time = 0.0  # and when (perf_counter)
        self.size: tuple[int, int] | None = None  # the smallest failure's steps and length as written
        self.setup_failure: BaseException | None = None  # a failure before an example's first step
        self.slowest_settle = 0.0  # seconds: the slowest sync of this test that got all it waited for
        self.failed_calls: list[Any] | None = None  # the last failing example's steps as called (machine_replay)
        self.failed_hurried = False  # and whether it waited less than in full

    def hurry(self) -> bool:
        """True while Hypothesis shrinks a failure already seen, except in its final replay (in that
        one too when a replay with every wait in full follows it: `replayed_after`)."""
        return self.best is not None and (self.replayed_after or not current_build_context().is_final)

    def settled(self, seconds: float) -> None:
        """A sync got everything it waited for in `seconds` (module rules: hurried shrinking)."""
        self.slowest_settle = max(self.slowest_settle, seconds)

    def hurried_seconds(self, floor: float, cap: float) -> float:
        """A shrink candidate's settle: `HURRIED_FACTOR` times the slowest settle seen, within the
        (scaled) floor and cap."""
        return min(cap, max(floor, HURRIED_FACTOR * self.slowest_settle))

    def offer(self, program: Program, frames: FrameLog, hurried: bool = False) -> None:
        """Called from a machine's teardown, while its failure (if any) propagates; a failure
        seen with hurried waits moves the stop criterion, never what is reported."""
        self.examples += 1
        exc = sys.exc_info()[1]
        if not isinstance(exc, AssertionError | DriverError):
            return
        if not hurried and (self.best is None or program.rules < self.best[0]):
            self.best = (program.rules, exc, program, repr(frames))
        size = (program.rules, len(repr(program)))
        if self.size is None or size[0] < self.size[0]:  # fewer steps (smaller values alone go on and on)
            self.size, self.improved_at, self.improved_time = size, self.examples, time.perf_counter()

    @property
    def stable(self) -> bool:
        return self.best is not None and (self.examples - self.improved_at >= self.stable_examples
                                          or time.perf_counter() - self.improved_time >= self.stable_seconds)

    @contextlib.contextmanager
    def instead_of_flaky(self) -> Iterator[None]:
        try:
            yield
        except Flaky as flaky:
            if self.best is None and self.setup_failure is not None:
                failure = AssertionError(f"setting the machine up failed, before its first step: "
                                         f"{type(self.setup_failure).__name__}: {self.setup_failure}")
                failure.add_note(f"(an example that fails while the machine sets up ends before its first choice "
                                 f"and the next one goes on, so Hypothesis could not replay it: "
                                 f"{type(flaky).__name__})")
                raise failure from flaky
            if self.best is None:
                raise
            raise self.best_failure(f"Hypothesis could not replay it the same way, {type(flaky).__name__}: the "
                                    f"broker's timing differs between runs") from flaky

    def best_failure(self, why: str) -> AssertionError:
        """The smallest failure seen with every wait in full, as reported when a replay of a smaller
        one does not fail the same way (`why`)."""
        assert self.best is not None
        _, exc, program, frames = self.best
        failure = AssertionError(f"{type(exc).__name__}: {exc}")
        failure.add_note(program.as_failing_case())
        failure.add_note(f"(the smallest failing example seen with every wait in full; {why})")
        failure.add_note(repr(program))
        failure.add_note(frames)
        return failure


RUNNING: list[Smallest] = []  # the Smallest of the machine test `run_within_budget` runs now


class SetupRecorded:
    """Mixin of the machine classes: a failure while a machine sets itself up (its `__init__`,
    before the first step, where `teardown` and so `example_ended` never run) is remembered by the
    running test's Smallest, which reports it when Hypothesis cannot replay it (`instead_of_flaky`).
    The `factory` closures stay as they are: their source seeds the examples (module rules)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" not in cls.__dict__:
            return
        original = cls.__dict__["__init__"]

        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kw: Any) -> None:
            try:
                original(self, *args, **kw)
            except AssertionError as exc:  # DriverError and Violation are AssertionErrors
                if RUNNING and RUNNING[-1].setup_failure is None:
                    RUNNING[-1].setup_failure = exc
                raise

        cls.__init__ = __init__  # type: ignore[method-assign]


class _ShrinkSeconds:
    """What `limit_shrinking` puts in Hypothesis's MAX_SHRINKING_SECONDS: added to the moment
    shrinking starts, it gives the `ShrinkEnd` Hypothesis compares `perf_counter()` with."""

    def __init__(self, budget: Budget, smallest: Smallest) -> None:
        self.budget, self.smallest = budget, smallest

    def __radd__(self, _now: float) -> ShrinkEnd:
        return ShrinkEnd(self.budget, self.smallest)


@dataclass(frozen=True)
class ShrinkEnd:
    """The end of shrinking: passed (`end < now`) when the budget is spent or the smallest failure
    is stable (module rules)."""

    budget: Budget
    smallest: Smallest

    def __lt__(self, _now: float) -> bool:
        return self.budget.spent or self.smallest.stable


def run_within_budget(factory: Callable[[], RuleBasedStateMachine], budget: Budget, smallest: Smallest, *,
                      examples: int, steps: int) -> None:
    """`factory()` as a Hypothesis test within `budget`; Flaky becomes the smallest failure seen."""
    RUNNING.append(smallest)
    try:
        with budget.limit_shrinking(smallest), smallest.instead_of_flaky():
            run_state_machine_as_test(factory, settings=machine_settings(examples, steps))  # type: ignore[arg-type]
    finally:
        RUNNING.remove(smallest)


def example_ended(budget: Budget | None, smallest: Smallest | None, program: Program, frames: FrameLog,
                  hurried: bool = False) -> None:
    """At an example's teardown, while its failure (if any) propagates: offer it as the smallest,
    say when the budget cut shrinking short, and note its program and frames (the final run's
    notes are what the failure reports)."""
    if smallest is not None:
        smallest.offer(program, frames, hurried)
        if smallest.stable and current_build_context().is_final:
            note(f"shrinking stopped: no smaller failure in the last {smallest.stable_examples} examples or "
                 f"{smallest.stable_seconds:g} s")
    if budget is not None:
        budget.report()
    note(program)
    note(frames)


@dataclass(frozen=True)
class Pick:
    """A value taken from the machine's state at the step: `index` into what `choices` lists
    then, counted from the end (wrapping), or None when it lists nothing. From the end, because
    Hypothesis favours small indices and the newest item (the highest delivery tag, the latest
    consumer) is the one whose handling shows most: a multiple ack of the newest tag covers
    every older one."""

    index: int
    choices: Callable[[Any], list[Any] | tuple[Any, ...]]

    def resolve(self, machine: Any) -> Any:
        items = list(self.choices(machine))
        return items[-1 - self.index % len(items)] if items else None

    def __repr__(self) -> str:
        return f"pick({self.index})"


def from_machine(choices: Callable[[Any], list[Any] | tuple[Any, ...]]) -> st.SearchStrategy[Pick]:
    """A value from the running machine's state, drawn as a plain index (see the module rules):
    rules given None do nothing, which shrinks better than preconditions."""
    return st.integers(0, PICKS - 1).map(lambda index: Pick(index, choices))


class Program:
    """The steps of one example as they ran, values resolved: what a failure is reported as
    (formatted lazily, like `FrameLog`). Steps of the final check are marked `# at teardown`."""

    def __init__(self, machine: str) -> None:
        self.machine = machine
        self.steps: list[str] = []
        self.rules = 0  # steps that were rules (not the final check)

    def add(self, rule: str, arguments: dict[str, Any], *, teardown: bool = False) -> None:
        text = f"{rule}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
        self.steps.append(text + ("  # at teardown" if teardown else ""))
        self.rules += not teardown

    def __repr__(self) -> str:
        lines = [f"the steps as run ({self.rules}), picks resolved:", f"  m = {self.machine}()"]
        lines += [f"  m.{text}" for text in self.steps]
        return "\n".join(lines)

    def as_failing_case(self) -> str:
        """The steps in Hypothesis's own report format (`state.` lines, counted by the mutation report)."""
        lines = ["Failing test case: <state machine>", f"state = {self.machine}()"]
        lines += [f"state.{text}" for text in self.steps if not text.endswith("# at teardown")]
        return "\n".join([*lines, "state.teardown()"])


def to_outcome(exc: DriverError) -> Outcome:
    if isinstance(exc, WireChannelClosed):
        return ChannelClosed(exc.code, exc.class_id, exc.method_id)
    if isinstance(exc, WireConnectionClosed):
        return ConnectionClosed(exc.code, exc.class_id, exc.method_id)
    raise exc


class FrameLog:
    """The frames of one run, formatted lazily (only Hypothesis's final report prints them): the
    recorder's from index `since` on (a relay's recorder holds every example of a test)."""

    LIMIT = 400

    def __init__(self, recorder: Recorder, since: int = 0) -> None:
        self.recorder, self.since = recorder, since

    def __repr__(self) -> str:
        frames = self.recorder.frames[self.since:]
        lines = [f"frames of this run ({len(frames)}, oldest first):"]
        skipped = max(0, len(frames) - self.LIMIT)
        if skipped:
            lines.append(f"  ... {skipped} earlier frames")
        start = frames[0].ts if frames else 0.0
        for record in frames[skipped:]:
            arrow = "<" if record.direction == "in" else ">"
            lines.append(f"  {record.ts - start:8.4f} c{record.connection} {arrow} {format_frame(record.frame)}")
        return "\n".join(lines)


def format_frame(frame: Any) -> str:
    if isinstance(frame, BodyFrame):
        return f"ch{frame.channel} body {bytes(frame.payload)[:40]!r}"
    if isinstance(frame, (MethodFrame, HeaderFrame)):
        return describe(frame)
    if isinstance(frame, Command):
        method = frame.method
        text = f"ch{frame.channel} {method.NAME} {method.fields()}"
        return text + (f" body {frame.body[:40]!r}" if method.HAS_CONTENT else "")
    if isinstance(frame, bytes):
        return f"raw {frame[:40]!r}"
    return describe(frame)


class MachineClient(RawClient):
    """RawClient plus one non-blocking read, for waiting on several connections at once, and the
    channels it published on since a settle last pinged them (`published`: machine_settle)."""

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.published: set[int] = set()

    def send(self, channel: int, method: Any, properties: Any = None, body: bytes = b"") -> None:
        super().send(channel, method, properties, body)
        if method.HAS_CONTENT:
            self.published.add(channel)

    def connect(self) -> MachineClient:
        super().connect()
        return self

    def read_available(self) -> None:
        """Read what the socket holds now (the caller saw it readable) into the inboxes."""
        self._read(0.001)


def count_meaning(missing: int, failed_over: int, settle_rules: str) -> str:
    """What a queue's count mismatch means: CLU-05 when the missing messages can be the deliveries
    that were unacked across a failover and returned since (the broker dropped them), else the
    machine's settlement rules."""
    if 0 < missing <= failed_over:
        return (f"({missing} missing, and {failed_over} of the model's were unacked "
                "deliveries when a node stop moved the queue's leader, returned since: CLU-05 keeps them "
                "checked out across the failover, so they come back)")
    return wording.settled_differs(settle_rules)


def delete_after_close(deletes: list[Any], url: str, timeout: float) -> None:
    """An example's teardown, once every connection of the example has closed (no consumer of theirs
    is left on what is deleted: GarageMQ deadlocks on the queue.delete of a queue with a consumer,
    docs/garagemq.md): its queue and exchange deletes on a connection of its own, one channel."""
    if deletes:
        with contextlib.suppress(DriverError, OSError), RawClient(url, timeout=timeout) as c:
            _delete_each(c, c.channel(), deletes)


def _delete_each(client: RawClient, number: int, deletes: list[Any]) -> None:
    """Each delete in turn, one channel; a channel error (an exclusive queue whose closed owner the
    broker has not yet cleared: 405) skips that delete on a new channel; a connection error ends it."""
    for method in deletes:
        try:
            client.rpc(number, method, QueueDeleteOk, ExchangeDeleteOk)
        except WireChannelClosed:
            number = client.channel()
