"""Reducing a machine's failure by replaying its steps (conformance/suite/steps/machine_replay.py):
the reduction itself on a scripted machine, then a model machine through a deviating broker."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from conformance.catalogue.mentions import named_rules
from conformance.drivers.raw import Recorder
from conformance.suite.confirms.test_machine_confirms import ConfirmMachine
from conformance.suite.steps.machine_base import run_machine
from conformance.suite.steps.machine_budget import Budget, Smallest
from conformance.suite.steps.machine_program import Program
from conformance.suite.steps.machine_replay import Replaying, reduce_failure, replay_in_full
from conformance.suite.steps.machine_support import MachineTarget
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy
from tests.conformance.deviations import BY_NAME


class Scripted:
    """A machine whose run fails as PC-05 when its steps include every step of `culprits`; a
    hurried run also fails when `flaky_when_hurried` (a false failure a short wait would give)."""

    runs: ClassVar[list[tuple[bool, list[str]]]] = []

    def __init__(self, hurried: bool, culprits: set[str], flaky_when_hurried: bool = False) -> None:
        self.hurried, self.culprits, self.flaky = hurried, culprits, flaky_when_hurried
        self.program, self.recorder = Program("Scripted"), Recorder()
        self.steps: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def run_step(**arguments: Any) -> None:
            self.steps.append(name)
            self.program.add(name, arguments)
        return run_step

    def finish(self) -> None:
        Scripted.runs.append((self.hurried, list(self.steps)))
        if self.culprits <= set(self.steps) or (self.hurried and self.flaky):
            raise AssertionError(f"seqnos never settled after {'a hurried' if self.hurried else 'the full'} wait (PC-05)")

    def close(self) -> None:
        pass


CALLS = [("setup", {}), ("a", {}), ("publish", {"count": 2}), ("b", {}), ("wait", {}), ("c", {})]


def test_the_steps_that_play_no_part_go_and_the_full_replay_is_reported() -> None:
    Scripted.runs = []
    with pytest.raises(AssertionError) as failed:
        reduce_failure(lambda hurried: Scripted(hurried, {"publish", "wait"}), CALLS,
                       AssertionError("after 2.0 s: seqnos never settled (PC-05)"), Budget(60), fixed=1)
    assert "the full wait" in str(failed.value)  # the reported failure is the replay with full waits
    notes = "\n".join(failed.value.__notes__)
    assert "state.setup()\nstate.publish(count=2)\nstate.wait()\nstate.teardown()" in notes
    assert "reduced by replaying: 3 of the 6 steps Hypothesis reported still fail as PC-05" in notes
    *candidates, final = Scripted.runs
    assert all(hurried for hurried, _ in candidates) and final == (False, ["setup", "publish", "wait"])
    assert all(steps[0] == "setup" for _, steps in Scripted.runs)  # the fixed set-up step always stays


def test_a_failure_only_a_hurried_wait_shows_leaves_hypothesis_report() -> None:
    """Every hurried candidate fails, but the full replay of the reduced program passes: the
    reduction raises nothing, and the failure Hypothesis reported stands."""
    Scripted.runs = []
    reduce_failure(lambda hurried: Scripted(hurried, {"publish", "wait"}, flaky_when_hurried=True), CALLS,
                   AssertionError("after 2.0 s: seqnos never settled (PC-05)"), Budget(60), fixed=1)
    assert Scripted.runs[-1] == (False, ["setup"])


def test_a_failure_of_another_rule_is_no_reduction() -> None:
    Scripted.runs = []
    reduce_failure(lambda hurried: Scripted(hurried, {"publish"}), CALLS,
                   AssertionError("the broker answered 406 (PC-03)"), Budget(60), fixed=1)
    assert len(Scripted.runs) == len(CALLS) - 1  # each step tried once, none dropped, no final replay


def test_a_spent_budget_ends_the_reduction() -> None:
    Scripted.runs = []
    reduce_failure(lambda hurried: Scripted(hurried, {"publish"}), CALLS,
                   AssertionError("(PC-05)"), Budget(0), fixed=1)
    assert Scripted.runs == []


def test_a_hurried_report_is_replaced_by_its_full_replay() -> None:
    """Hypothesis's final replay was hurried (a reduction was to follow) and nothing was reduced:
    its example replayed with every wait in full is what is reported."""
    Scripted.runs = []
    with pytest.raises(AssertionError) as failed:
        replay_in_full(lambda hurried: Scripted(hurried, {"publish"}), CALLS,
                       AssertionError("after 0.1 s: seqnos never settled (PC-05)"), Smallest())
    assert "the full wait" in str(failed.value) and Scripted.runs == [(False, [c for c, _ in CALLS])]
    assert "(the example Hypothesis reported, replayed with every wait in full)" in failed.value.__notes__


def test_a_hurried_report_that_a_full_replay_does_not_show_gives_way_to_the_smallest_full_failure() -> None:
    smallest = Smallest()
    program = Program("Scripted")
    program.add("publish", {"count": 5})
    smallest.best = (1, AssertionError("seqnos never settled after the full wait (PC-05)"), program, "frames: ...")
    with pytest.raises(AssertionError) as failed:
        replay_in_full(lambda hurried: Scripted(hurried, {"publish"}, flaky_when_hurried=True), [("setup", {})],
                       AssertionError("seqnos never settled after a hurried wait (PC-05)"), smallest)
    assert "after the full wait" in str(failed.value)
    notes = "\n".join(failed.value.__notes__)
    assert "smallest failing example seen with every wait in full" in notes and "frames: ..." in notes


def test_a_replay_waits_as_it_is_told_with_the_settle_measured_so_far() -> None:
    smallest = Smallest()
    smallest.settled(0.05)
    assert Replaying(smallest, True).hurry() and not Replaying(smallest, False).hurry()
    assert Replaying(smallest, True).slowest_settle == 0.05


def test_the_confirms_machine_reports_a_dropped_confirm_in_one_replayed_step() -> None:
    """Through `confirm_dropped` (seqno 2 of each channel never confirmed): Hypothesis's shrinking
    leaves several steps, the replays leave the one publish of two or more messages on the
    confirm channel, and that replay, waited in full, is the failure reported, as PC-05."""
    with (EmbeddedBroker() as broker,
          DeviantProxy((broker.host, broker.port), BY_NAME["confirm_dropped"]) as proxy,
          pytest.raises(AssertionError) as failed):
        run_machine(ConfirmMachine, MachineTarget(proxy.url, "rabbitmq-4.3"), examples=120, steps=10)
    assert named_rules(str(failed.value))[0] == "PC-05"
    assert "seqnos never settled {1: [2]}" in str(failed.value)
    notes = "\n".join(failed.value.__notes__)
    assert "reduced by replaying: 1 of the" in notes
    program = notes[notes.index("the steps as run (1), picks resolved:"):]
    assert "m.publish(ch=1, count=" in program and "frames of this run" in program
