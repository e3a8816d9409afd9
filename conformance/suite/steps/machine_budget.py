"""The wall-clock budget of a machine test and the smallest failure it reports.

Responsibility: bound each machine test (shrinking included) and report the smallest failing
example it saw, for the raw machines (machine_base, machine_topology) and those run through a
client library (machine_clients) alike.
Rules:
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

from hypothesis import note
from hypothesis.control import current_build_context
from hypothesis.errors import Flaky
from hypothesis.internal.conjecture import engine
from hypothesis.reporting import report as hypothesis_report
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from conformance.drivers.raw import DriverError
from conformance.suite.steps.machine_program import FrameLog, Program
from conformance.suite.steps.machine_support import machine_settings

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

    def __init__(self, stable_examples: int | None = None, stable_seconds: float | None = None, *,
                 replayed_after: bool = False) -> None:
        # the module's values when none is given, read now (a test may set them for one run)
        self.stable_examples = STABLE_EXAMPLES if stable_examples is None else stable_examples
        self.stable_seconds = STABLE_SECONDS if stable_seconds is None else stable_seconds  # a fast machine
        # runs many more examples in STABLE_SECONDS than STABLE_EXAMPLES
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
    The `factory` closures stay as they are: their source seeds the examples (machine_support's rules)."""

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
