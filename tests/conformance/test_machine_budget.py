"""The machines' budget and stable smallest failure (conformance/suite/steps/machine_support.py,
issue 31 item 3): shrinking ends when the budget is spent or the smallest failure is stable."""

from __future__ import annotations

import sys

from hypothesis.internal.conjecture import engine

from conformance.drivers.raw import Recorder
from conformance.suite.steps.machine_support import (
    STABLE_EXAMPLES,
    Budget,
    FrameLog,
    Program,
    ShrinkEnd,
    Smallest,
)


def _program(steps: int) -> Program:
    program = Program("M")
    for n in range(steps):
        program.add(f"rule_{n}", {})
    return program


def _offer(smallest: Smallest, steps: int, failed: bool) -> None:
    try:
        if failed:
            raise AssertionError(f"{steps} steps")
        smallest.offer(_program(steps), FrameLog(Recorder()))
    except AssertionError:
        assert sys.exc_info()[1] is not None
        smallest.offer(_program(steps), FrameLog(Recorder()))


def test_the_smallest_failure_is_stable_after_enough_examples_without_a_smaller_one() -> None:
    smallest = Smallest()
    assert not smallest.stable  # no failure yet
    _offer(smallest, 5, failed=True)
    for _ in range(STABLE_EXAMPLES - 1):
        _offer(smallest, 3, failed=False)  # passing examples: nothing smaller
    assert not smallest.stable
    _offer(smallest, 2, failed=True)  # a smaller failure: the count starts again
    for _ in range(STABLE_EXAMPLES - 1):
        _offer(smallest, 4, failed=True)  # failing, but not smaller
    assert not smallest.stable
    _offer(smallest, 2, failed=True)  # as small, not smaller
    assert smallest.stable and smallest.best is not None and smallest.best[0] == 2


def test_shrinking_ends_when_the_budget_is_spent_or_the_smallest_is_stable() -> None:
    budget, smallest = Budget(3600.0), Smallest()
    with budget.limit_shrinking(smallest):
        end = 12.5 + engine.MAX_SHRINKING_SECONDS  # what Hypothesis computes when shrinking starts
    assert isinstance(end, ShrinkEnd) and not end < 13.0
    _offer(smallest, 1, failed=True)
    for _ in range(STABLE_EXAMPLES):
        _offer(smallest, 1, failed=False)
    assert end < 13.0
    assert ShrinkEnd(Budget(0.0), Smallest()) < 0.0  # a spent budget ends it with no failure at all
