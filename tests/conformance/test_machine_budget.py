"""The machines' budget and stable smallest failure (conformance/suite/steps/machine_budget.py):
shrinking ends when the budget is spent or the smallest failure is stable."""

from __future__ import annotations

import sys

from hypothesis.internal.conjecture import engine

from conformance.drivers.raw import Recorder
from conformance.suite.steps.machine_budget import (
    HURRIED_FACTOR,
    HURRIED_FLOOR_SECONDS,
    HURRIED_SETTLE_SECONDS,
    STABLE_EXAMPLES,
    Budget,
    ShrinkEnd,
    Smallest,
)
from conformance.suite.steps.machine_program import FrameLog, Program


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


def test_a_failure_seen_with_hurried_waits_moves_the_stop_but_is_never_reported() -> None:
    """Hurried shrinking: a shrink candidate's failure (hurried waits) counts as smaller for the
    stop criterion, while what is reported on `Flaky` stays a failure seen with full waits."""
    smallest = Smallest()
    _offer(smallest, 6, failed=True)  # found while generating: full waits
    _offer_hurried(smallest, 2)
    assert smallest.size is not None and smallest.size[0] == 2  # the search moved on
    assert smallest.best is not None and smallest.best[0] == 6  # the report did not


def test_the_hurried_settle_follows_the_slowest_settle_within_its_bounds() -> None:
    """Hurried shrinking: a candidate waits `HURRIED_FACTOR` times the slowest settle a sync of
    the test completed in, never less than the floor nor more than the cap (both scaled by the
    caller); a slower settle later raises it, a faster one never lowers it."""
    floor, cap = HURRIED_FLOOR_SECONDS, HURRIED_SETTLE_SECONDS
    smallest = Smallest()
    assert smallest.hurried_seconds(floor, cap) == floor  # nothing measured yet
    smallest.settled(0.001)
    assert smallest.hurried_seconds(floor, cap) == floor  # a fast broker: the floor
    smallest.settled(0.01)
    assert smallest.hurried_seconds(floor, cap) == HURRIED_FACTOR * 0.01
    smallest.settled(0.002)
    assert smallest.hurried_seconds(floor, cap) == HURRIED_FACTOR * 0.01  # the slowest counts
    smallest.settled(1.5)  # a slow disk or a loaded node: the cap, as before the measure
    assert smallest.hurried_seconds(floor, cap) == cap
    assert smallest.hurried_seconds(floor * 3, cap * 3) == cap * 3  # --timeout-scale 3


def test_a_machine_on_the_brokers_clock_keeps_its_fixed_hurried_settle() -> None:
    """The machines whose waits are TTLs, consumer timeouts or a node's restart do not follow
    the measured settle (their `HURRIED_SECONDS` is what their clock needs)."""
    from conformance.suite.cancel.test_machine_cancel import CancelMachine, ClusterCancelMachine
    from conformance.suite.confirms.test_machine_confirms import ConfirmMachine
    from conformance.suite.deadletter.test_machine_lifecycle import LifecycleMachine
    from conformance.suite.requeue.test_machine_requeue import ClusterRequeueMachine, RequeueMachine
    from conformance.suite.timeout.machine_timeout import TimeoutWire

    assert all(m.ADAPTIVE_HURRY for m in (CancelMachine, ConfirmMachine, RequeueMachine))
    assert not any(m.ADAPTIVE_HURRY for m in (ClusterCancelMachine, LifecycleMachine, ClusterRequeueMachine,
                                              TimeoutWire))


def _offer_hurried(smallest: Smallest, steps: int) -> None:
    try:
        raise AssertionError(f"{steps} steps, hurried")
    except AssertionError:
        smallest.offer(_program(steps), FrameLog(Recorder()), hurried=True)


def test_a_machine_shrinks_with_hurried_waits_and_reports_a_full_wait_failure() -> None:
    """Against a broker that settles only the named tag of a multiple ack, the acks machine's
    candidates wait `HURRIED_SETTLE_SECONDS`; the failure it reports was replayed with the full
    settle (its message says so) and is small: the acks machine reduces its failure by replaying it
    (machine_replay) once Hypothesis's shrinking stops, so it is small however soon that stops on a
    loaded machine."""
    import pytest

    from conformance.catalogue.mentions import named_rules
    from conformance.suite.ack.test_machine_ack import AckMachine
    from conformance.suite.steps.machine_base import ModelMachine, run_machine
    from conformance.suite.steps.machine_support import MachineTarget
    from reference_broker.server import EmbeddedBroker

    with EmbeddedBroker(faults=["multi_ack_only_named"]) as broker, pytest.raises(AssertionError) as failure:
        run_machine(AckMachine, MachineTarget(broker.url, "rabbitmq-4.3"), examples=120, steps=10)
    message = str(failure.value)
    notes = "\n".join(getattr(failure.value, "__notes__", ()))
    assert f"after {ModelMachine.SETTLE_SECONDS:.1f} s" in message, message
    assert f"after {HURRIED_SETTLE_SECONDS:.1f} s" not in message, message
    assert 1 <= notes.count("\nstate.") - notes.count("state.teardown()") <= 4, notes
    # the missing delivery is traced to its cause by a probe (machine_steps.held_below_multiple)
    assert named_rules(message) == ("ACK-05",), message
    assert "the broker still held tag" in message, message


def test_a_machine_whose_setup_failed_once_is_a_failure_that_says_so_not_a_flaky_error() -> None:
    """A machine's setup fails in the first example only (a broker that was briefly busy): that
    example ends before its first choice and the next ones go on, which Hypothesis cannot replay
    (Flaky). The test fails with the setup's own error, readable, not as a harness error."""
    import pytest
    from hypothesis.errors import Flaky
    from hypothesis.stateful import RuleBasedStateMachine, rule

    from conformance.suite.steps.machine_budget import SetupRecorded, run_within_budget

    attempts: list[int] = []

    class OnceSlow(SetupRecorded, RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            attempts.append(1)
            if len(attempts) == 1:
                raise AssertionError("no reply within 5 s (waiting for queue.declare-ok on channel 1)")

        @rule()
        def nothing(self) -> None:
            pass

    with pytest.raises(AssertionError) as raised:
        run_within_budget(OnceSlow, Budget(30.0), Smallest(), examples=5, steps=3)
    assert "setting the machine up failed, before its first step: AssertionError: no reply within 5 s" in str(
        raised.value)
    assert isinstance(raised.value.__cause__, Flaky)
