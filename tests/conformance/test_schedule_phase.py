"""The first phase of a distributed run (conformance/plugin/schedule.py, `LongestFirst`): the first
worker to collect starts the run, the broker-wide tests come first and only the tests marked to
run beside them go with them; driven here as pytest-xdist drives it, with workers that run a test
only once they hold the next one (xdist's `WorkerInteractor.run_one_test`), so a schedule that
would leave a worker one test forever shows as a stall."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conformance.plugin.schedule import FILL, FIRST, LAST, PLAIN, RANKS_FILE, make_scheduler, phase_tests

SUITE = ([f"conformance/suite/m{i}/test_machine_{i}.py::test_m" for i in range(4)]
         + [f"conformance/suite/p/test_p.py::test_{i}" for i in range(30)]
         + [f"conformance/suite/timeout/test_wide.py::test_{i}" for i in range(5)]
         + [f"conformance/suite/framing/test_beside.py::test_{i}" for i in range(2)])
RANKS = ({n: (FIRST, 10.0) for n in SUITE[:4]} | {n: (PLAIN, 0.0) for n in SUITE[4:34]}
         | {SUITE[34]: (LAST, 10.0)} | {n: (LAST, 0.0) for n in SUITE[35:39]} | {SUITE[39]: (FILL, 32.0)}
         | {SUITE[40]: (FILL, 3.0)})  # the 30-s test beside them, and a shorter one (ranked by its wait)


class Node:
    """A worker as the controller sees it; `held` is what it was sent and has not finished."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.held: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.held.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True

    def can_run(self) -> bool:  # xdist: the next test must be known, or the worker told to stop
        return len(self.held) >= 2 or (self.shutting_down and bool(self.held))


def scheduler(tmp_path: Path, workers: int) -> Any:
    (tmp_path / RANKS_FILE).write_text(json.dumps(RANKS))
    options = {"tx": [f"{workers}*popen"], "maxschedchunk": None}
    config = SimpleNamespace(getvalue=options.get, getoption=options.get,
                             hook=SimpleNamespace(pytest_collectreport=lambda report: None))
    log = SimpleNamespace(loadsched=lambda *args: None)
    return make_scheduler(config, log, tmp_path)


def drive(tmp_path: Path, workers: int, join_after: int) -> list[tuple[str, int]]:
    """Node 0 collects first; the others join once it ran `join_after` tests. Each round the
    worker that can run and has run least finishes its current test. The tests as they ran."""
    sched = scheduler(tmp_path, workers)
    nodes = [Node(f"gw{i}") for i in range(workers)]
    sched.add_node(nodes[0])
    sched.add_node_collection(nodes[0], SUITE)
    sched.schedule()
    ran: list[tuple[str, int]] = []
    joined = 1
    for _ in range(10 * len(SUITE)):
        if joined < workers and len(ran) >= join_after:
            for node in nodes[joined:]:
                sched.add_node(node)
                sched.add_node_collection(node, SUITE)
                sched.schedule()
            joined = workers
        ready = [n for n in nodes[:joined] if n.can_run()]
        if not ready:
            break
        node = min(ready, key=lambda n: sum(1 for name, _ in ran if name == n.gateway.id))
        index = node.held.pop(0)
        ran.append((node.gateway.id, index))
        sched.mark_test_complete(node, index)
        assert all(len(n.held) <= 2 for n in nodes), "a test queued behind two: it waits for both"
    return ran


@pytest.mark.parametrize("join_after", [0, 1, 3, 6])
def test_every_test_runs_once_and_nothing_long_starts_before_the_broker_wide_ones_end(tmp_path: Path,
                                                                                     join_after: int) -> None:
    ran = drive(tmp_path, 3, join_after)
    assert sorted(index for _, index in ran) == list(range(len(SUITE))), "a stall: a worker was left one test"
    order = [index for _, index in ran]
    last_wide = max(order.index(i) for i in range(34, 39))
    first = [index for name, index in ran if name == "gw0"][:2]
    assert first == [34, 39], "the first worker starts with the longest broker-wide test, then the longest beside them"
    assert order.index(40) > last_wide, "a short test beside them waits like the others, after the phase"
    early = [SUITE[i] for i in order[:last_wide] if RANKS[SUITE[i]][0] == FIRST]
    assert not early, f"a long test started while broker-wide tests were left: {early}"
    for worker in {name for name, _ in ran}:
        ranks = [RANKS[SUITE[index]][0] for name, index in ran if name == worker]
        behind = [later for before, later in itertools.pairwise(ranks) if before == FILL and later == LAST]
        assert not behind, f"{worker}: a broker-wide test waited behind a test beside them: {ranks}"


def test_a_worker_is_never_left_one_test_in_the_first_phase() -> None:
    keys = [RANKS[n] for n in SUITE]
    pending = list(range(len(SUITE)))
    assert phase_tests(pending, keys, [], 2) == [34, 39]  # holding none: a broker-wide one and one beside it
    assert phase_tests(pending, keys, [20], 1) == [34]  # then broker-wide ones first, in the order given
    assert phase_tests([35, 36, 39], keys, [], 2) == [35, 39]
    assert phase_tests([35, 36, 40, 5], keys, [39], 1) == [5]  # behind a test beside them: only a short partner
    assert phase_tests([35, 36, 40, 5], keys, [39, 6], 1) == []
    assert phase_tests([5, 6, 38, 1], keys, [20], 1) == [38]  # two with the one held
    assert phase_tests([1, 38], keys, [], 2) == [38, 1]  # no short test left: any, so it runs
    assert phase_tests([1, 5, 38], keys, [], 1) == [38, 5]  # one alone would never run: a short one with it
    assert phase_tests([1, 5], keys, [20], 1) == [5]  # holding one and nothing to go beside: a short one
    assert phase_tests([1, 5], keys, [], 2) == []  # holding none: it waits for the phase to end
    assert phase_tests([39, 40], keys, [], 2) == [39, 40]  # the tests marked to run beside them
