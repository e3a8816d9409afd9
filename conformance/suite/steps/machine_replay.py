"""Reducing a failing machine example by replaying its steps.

Responsibility: Hypothesis shrinks the machines' failures poorly (a step that first decided one
of its rule choices, a swarm-testing feature flag among them, often cannot be deleted without
changing what the later choices mean), so the failure it reports may carry steps that play no
part; and shrinking until no smaller failure comes takes seconds of examples. `reduce_failure`
replays the reported example's steps, values resolved, on fresh machines, drops each step whose
absence leaves the same failure (the same first rule named), and raises the smallest program
that still fails, with that replay's frames (when no step could go, Hypothesis's report stands).
Rules:
- Only a failure that replays in full counts: the candidates run hurried (a shrink candidate's
  waits: machine_budget, hurried shrinking), the reduced program is run once more from scratch
  with every wait in full, and its own failure (message, frames) is what is raised; if it does not
  fail the same way again, the original failure stands unchanged.
- Hypothesis's own final replay is hurried too when a reduction follows (`Smallest.replayed_after`:
  a missing frame's full wait is not waited twice). Its failure is then only reported once a replay
  waited in full shows it: the reduced program's, else `replay_in_full` of Hypothesis's example;
  if that passes, the smallest failure seen with every wait in full is reported
  (`Smallest.best_failure`).
- The first `fixed` steps (the set-up: the topology's build, a machine's `@initialize` steps)
  stay; the others are tried in order, each replay a fresh connection and fresh names, within the
  machine test's budget (a spent budget ends the reduction). A candidate whose later step names
  what it no longer makes (a dropped declare) is not a reduction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from conformance.catalogue.mentions import named_rules
from conformance.drivers.raw import DriverError
from conformance.suite.steps.machine_budget import Budget, Smallest
from conformance.suite.steps.machine_program import FrameLog, Program

Call = tuple[str, dict[str, Any]]


class Replayable(Protocol):
    program: Program
    recorder: Any

    def finish(self) -> None: ...  # what must hold at the end of a run (a machine's final check)

    def close(self) -> None: ...


class Replaying(Smallest):
    """A replay's Smallest (machine_replay), outside any Hypothesis run: hurried or in full as the
    replay chooses, its hurried wait from the settles the machine test has measured so far."""

    def __init__(self, of: Smallest, hurried: bool) -> None:
        super().__init__(of.stable_examples, of.stable_seconds)
        self.slowest_settle, self.hurried = of.slowest_settle, hurried

    def hurry(self) -> bool:
        return self.hurried


def _first_rule(failure: BaseException) -> str | None:
    rules = getattr(failure, "rules", None) or named_rules(str(failure))
    return rules[0] if rules else None


def replay(make: Callable[[bool], Replayable], calls: list[Call], *,
           hurried: bool = False) -> tuple[Replayable, AssertionError | None]:
    """Run `calls` on a fresh machine (`make(hurried)`), then its final check: the machine and
    the failure they end in, if any."""
    machine = make(hurried)
    try:
        for name, arguments in calls:
            getattr(machine, name)(**arguments)
        machine.finish()
    except AssertionError as failure:
        return machine, failure
    except (KeyError, DriverError, OSError):
        # a later step names what a shorter program never made (KeyError), or the broker went: this
        # candidate does not show the failure, it is not taken
        return machine, None
    finally:
        machine.close()
    return machine, None


def reduce_failure(make: Callable[[bool], Replayable], calls: list[Call], failure: AssertionError,
                   budget: Budget, *, fixed: int = 1) -> None:
    """Raise the smallest replayed program that fails as `failure` does (module rules); return
    when the example does not fail the same way again."""
    rule = _first_rule(failure)
    kept, index = list(calls), max(fixed, 0)
    while index < len(kept) and not budget.spent:
        candidate = kept[:index] + kept[index + 1:]
        _, again = replay(make, candidate, hurried=True)
        if again is not None and _first_rule(again) == rule:
            kept = candidate
        else:
            index += 1
    if len(kept) == len(calls):
        return
    machine, final = replay(make, kept)
    if final is None or _first_rule(final) != rule:
        return
    final.add_note(machine.program.as_failing_case())
    final.add_note(f"(reduced by replaying: {len(kept)} of the {len(calls)} steps Hypothesis reported still fail "
                   f"as {rule}; this is that replay)")
    final.add_note(repr(machine.program))
    final.add_note(repr(FrameLog(machine.recorder)))
    raise final from failure


def replay_in_full(make: Callable[[bool], Replayable], calls: list[Call], failure: AssertionError,
                   smallest: Smallest) -> NoReturn:
    """Hypothesis's failure came from a hurried final replay and no reduced replay stood in for it:
    raise the replay of its `calls` with every wait in full if it fails the same way, else the
    smallest failure seen in full (module rules)."""
    machine, again = replay(make, calls)
    if again is not None and _first_rule(again) == _first_rule(failure):
        again.add_note(machine.program.as_failing_case())
        again.add_note("(the example Hypothesis reported, replayed with every wait in full)")
        again.add_note(repr(machine.program))
        again.add_note(repr(FrameLog(machine.recorder)))
        raise again from failure
    raise smallest.best_failure("the smallest one Hypothesis found, replayed with every wait in full, did not "
                                "fail the same way") from failure
