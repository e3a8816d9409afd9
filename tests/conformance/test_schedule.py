"""The order pytest-xdist hands the suite's tests out in (conformance/plugin/schedule.py), and the
lock a broker-wide test takes (conformance/plugin/distributed.py)."""

from __future__ import annotations

import itertools
import multiprocessing
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conformance.plugin.distributed import EXCLUSIVE, LOCK_WAIT, BrokerLock, WorkerSide
from conformance.plugin.fixtures import broker_wide_claim
from conformance.plugin.schedule import (
    BESIDE,
    BOUND,
    BROKER_WIDE,
    FILL,
    FIRST,
    LAST,
    LONG_WAIT,
    MACHINE_SECONDS,
    PLAIN,
    SPREAD_SECONDS,
    TAKES,
    arrange,
    mark_problem,
    partner,
    rank,
    rank_of,
    read_ranks,
    sort_keys,
    write_ranks,
)
from conformance.plugin.watchdog import Budgets, Watchdog
from conformance.results.verdicts import HarnessError

SUITE = [
    "conformance/suite/ack/test_ack.py::test_a",
    "conformance/suite/ack/test_machine_ack.py::test_acks",
    "conformance/suite/qos/test_qos.py::test_b",
    "conformance/suite/qos/test_machine_prefetch.py::test_prefetch",
    "conformance/suite/requeue/test_machine_requeue.py::test_requeue",
    "conformance/suite/timeout/test_timeout.py::test_c[1]",
    "conformance/suite/timeout/test_machine_timeout.py::test_timeouts",
    "conformance/suite/timeout/test_timeout.py::test_c[2]",
    "conformance/suite/cancel/test_machine_cancel.py::test_cancel",
    "conformance/suite/cancel/test_cancel.py::test_d",
    "conformance/suite/framing/test_framing.py::test_e",
    "conformance/suite/errors/test_errors.py::test_f",
    "conformance/suite/messages/test_messages.py::test_g",
]
# what the workers would say: the timeout machine and test_c[1] change global settings, test_e waits
RANKS = {**{n: (rank(n), 10.0 if rank(n) == FIRST else 0.0) for n in SUITE},
         SUITE[6]: (LAST, 0.0), SUITE[5]: (LAST, 0.0), SUITE[10]: (FIRST, 3.0)}


class Item(SimpleNamespace):
    def get_closest_marker(self, name: str) -> Any:
        return SimpleNamespace(args=self.marks[name]) if name in self.marks else None


def test_a_node_id_alone_names_the_machines() -> None:
    assert [rank(n) for n in SUITE[:5]] == [PLAIN, FIRST, PLAIN, FIRST, FIRST]


def test_a_tests_marks_give_its_rank_and_broker_wide_wins() -> None:
    items = [Item(nodeid=SUITE[0], marks={}), Item(nodeid=SUITE[0], marks={LONG_WAIT: (12,)}),
             Item(nodeid=SUITE[1], marks={}), Item(nodeid=SUITE[6], marks={BROKER_WIDE: ()}),
             Item(nodeid=SUITE[0], marks={LONG_WAIT: (3,), BROKER_WIDE: ()})]
    # broker-wide tests keep their seconds: the longest of them starts the run (first_phase)
    assert [rank_of(i) for i in items] == [(PLAIN, 0), (FIRST, 12), (FIRST, MACHINE_SECONDS), (LAST, MACHINE_SECONDS),
                                           (LAST, 3)]


def test_a_test_that_takes_long_on_rabbitmq_starts_first_by_its_measured_seconds() -> None:
    # a machine longer than MACHINE_SECONDS, a plain drawn test, and both marks (the longer wins)
    items = [Item(nodeid=SUITE[1], marks={TAKES: (26,)}), Item(nodeid=SUITE[0], marks={TAKES: (12,)}),
             Item(nodeid=SUITE[0], marks={TAKES: (4,), LONG_WAIT: (30,)}),
             Item(nodeid=SUITE[0], marks={TAKES: (40,), BROKER_WIDE: ()})]
    assert [rank_of(i) for i in items] == [(FIRST, 26), (FIRST, 12), (FIRST, 30), (LAST, 40)]
    ranks = {**RANKS, SUITE[8]: (FIRST, 26.0), SUITE[12]: (FIRST, 12.0)}  # the cancel machine, test_g
    order = [SUITE[i] for i in arrange(SUITE, 3, ranks)]
    assert order[0:4:2] == [SUITE[8], SUITE[12]]  # longest first, whatever the collection order


def test_a_bounded_plain_test_is_handed_out_first_among_the_plain_ones_and_is_no_long_ones_partner() -> None:
    items = [Item(nodeid=SUITE[12], marks={BOUND: (10,)}), Item(nodeid=SUITE[1], marks={BOUND: (10,)}),
             Item(nodeid=SUITE[10], marks={BOUND: (5,), LONG_WAIT: (3,)})]
    assert [rank_of(i) for i in items] == [(PLAIN, 10), (FIRST, MACHINE_SECONDS), (FIRST, 3)]  # a bound orders plain tests only
    ranks = {**RANKS, SUITE[11]: (PLAIN, 5.0), SUITE[12]: (PLAIN, 10.0)}  # test_f, test_g bounded
    order = [SUITE[i] for i in arrange(SUITE, 3, ranks)]
    assert SUITE[11] not in order[:6] and SUITE[12] not in order[:6]  # not a long test's short partner
    plain = [n for n in order if ranks[n][0] == PLAIN]
    assert plain[3:5] == [SUITE[12], SUITE[11]]  # after the partners, the longest bound first


def test_in_an_area_with_fewer_long_tests_than_workers_bounded_tests_lead_and_are_never_paired() -> None:
    """The confirms area through a proxy that drops a confirm: one machine, bounded tests that wait
    out their bound, short tests. Each worker's first two are a long or bounded test and a short
    one (two bounded tests paired on one worker waited 10 s + 10 s there), and a worker holding a
    bounded test is sent a short one next."""
    area = ["conformance/suite/confirms/test_machine_confirms.py::test_m",
            *(f"conformance/suite/confirms/test_confirms.py::test_b{i}" for i in range(4)),
            *(f"conformance/suite/confirms/test_confirms.py::test_s{i}" for i in range(8))]
    ranks = {area[0]: (FIRST, MACHINE_SECONDS), area[1]: (PLAIN, 10.0), area[2]: (PLAIN, 10.0),
             area[3]: (PLAIN, 5.0), area[4]: (PLAIN, 5.0), **{n: (PLAIN, 0.0) for n in area[5:]}}
    order = arrange(area, 4, ranks)
    firsts = [area[i] for i in order[:8]]
    assert firsts[0::2] == area[0:4]  # the machine, then the longest bounds
    assert all(ranks[n] == (PLAIN, 0.0) for n in firsts[1::2])  # each with a short partner
    keys = sort_keys(area, ranks)
    pending = order[8:]
    assert area[pending[0]] == area[4]  # the last bounded test is next in the order
    assert partner([1], pending, keys) == 1  # a worker holding a bounded test: a short one first
    assert partner([5], pending, keys) == 0  # holding a short test: the bounded one


def test_ranks_travel_from_a_worker_to_the_controller(tmp_path: Path) -> None:
    assert read_ranks(tmp_path) == {}  # none written: the controller ranks by file name
    write_ranks(tmp_path, [Item(nodeid=SUITE[0], marks={LONG_WAIT: (2,)}), Item(nodeid=SUITE[5], marks={BROKER_WIDE: ()})])
    assert read_ranks(tmp_path) == {SUITE[0]: (FIRST, 2.0), SUITE[5]: (LAST, 0.0)}
    (tmp_path / "ranks.json").write_text("{not json")
    assert read_ranks(tmp_path) == {}


def test_each_worker_starts_with_a_long_test_and_a_short_one_and_broker_wide_tests_come_last() -> None:
    order = [SUITE[i] for i in arrange(SUITE, 3, RANKS)]
    assert sorted(order) == sorted(SUITE)  # every test, once
    firsts = order[:6]  # xdist's first distribution: two tests per worker, in this order
    assert [RANKS[n][0] for n in firsts[0::2]] == [FIRST] * 3  # no long test waits behind another
    assert [RANKS[n][0] for n in firsts[1::2]] == [PLAIN] * 3
    ranks = [RANKS[n][0] for n in order[6:]]
    assert ranks == sorted(ranks)  # then by rank
    assert order[-2:] == [SUITE[5], SUITE[6]]  # the broker-wide tests, in collection order
    assert order[6:8] == [SUITE[8], SUITE[10]]  # the last machine, then the shorter long wait


def test_only_a_test_beside_broker_wide_ones_longer_than_a_machine_keeps_its_place_in_the_phase() -> None:
    reason = "nothing broker-wide reaches it"
    items = [Item(nodeid=SUITE[10], marks={BESIDE: (reason,), LONG_WAIT: (3,)}),
             Item(nodeid=SUITE[11], marks={BESIDE: (reason,)}),
             Item(nodeid=SUITE[12], marks={BESIDE: (reason,), LONG_WAIT: (32,)})]  # longer than the tail
    assert [rank_of(i) for i in items] == [(FILL, 3), (FILL, 0), (FILL, 32)]
    ranks = {**RANKS, SUITE[10]: (FILL, 3.0), SUITE[11]: (FILL, 0.0), SUITE[12]: (FILL, 32.0)}
    order = [SUITE[i] for i in arrange(SUITE, 3, ranks)]
    assert order[-3:] == [SUITE[12], SUITE[5], SUITE[6]]  # only the one longer than a machine keeps FILL
    assert order[6:8] == [SUITE[8], SUITE[10]] and order[8] == SUITE[9]  # a wait with the long ones; plain
    without = [n for n in SUITE if ranks[n][0] != LAST]  # no broker-wide test selected: nothing to fill
    order = [without[i] for i in arrange(without, 3, ranks)]
    assert order[0] == SUITE[12] and order[7:9] == [SUITE[8], SUITE[10]]  # the longest wait first, then as above
    assert order[-1] == SUITE[11]  # plain


def test_a_worker_holding_a_long_test_is_sent_a_short_one_before_the_next_long_one() -> None:
    keys = sort_keys(SUITE, RANKS)
    machines = [i for i, n in enumerate(SUITE) if RANKS[n][0] == FIRST]
    shorts = [i for i, n in enumerate(SUITE) if RANKS[n] == (PLAIN, 0.0)]
    pending = [*machines[1:], *shorts, 5, 6]
    assert partner([machines[0]], pending, keys) == len(machines) - 1  # the first short test, not a machine
    assert partner([shorts[0]], pending, keys) == 0  # holding a short test: the next long one
    assert partner([], pending, keys) == 0
    assert partner([machines[0]], [machines[1], 5, 6], keys) == 0  # no short test left: the order as it is
    assert partner([machines[0]], [], keys) == 0


def test_dispatch_one_at_a_time_never_queues_a_long_test_behind_another() -> None:
    """xdist's load scheduling as the plugin drives it: each worker holds the test it runs and the
    next one; when a test ends, its worker is sent one more (`partner` choosing which). A machine
    ranked at 10 s takes 40 here (a busy broker): without `partner`, the next machine is queued
    behind it while the other worker runs short tests."""
    suite = [f"conformance/suite/m{i}/test_machine_{i}.py::test_m" for i in range(4)] + [
        f"conformance/suite/p/test_p.py::test_{i}" for i in range(40)]
    ranks = {n: (rank(n), 10.0) for n in suite[:4]} | {suite[0]: (FIRST, 20.0)} | {n: (PLAIN, 0.0) for n in suite[4:]}
    keys, workers = sort_keys(suite, ranks), 2
    seconds = [20.0, 10.0, 40.0, 10.0] + [0.5] * 40  # as they take on the broker

    def run(choose: bool) -> tuple[float, list[list[int]]]:
        pending = arrange(suite, workers, ranks)
        held = [[pending.pop(0), pending.pop(0)] for _ in range(workers)]
        ran: list[list[int]] = [[] for _ in range(workers)]
        clock = [0.0] * workers
        while any(held):
            w = min((w for w in range(workers) if held[w]), key=lambda w: clock[w] + seconds[held[w][0]])
            done = held[w].pop(0)
            clock[w] += seconds[done]
            ran[w].append(done)
            if pending:
                position = partner(held[w], pending, keys) if choose else 0
                held[w].append(pending.pop(position))
        return max(clock), ran

    chosen, ran = run(True)
    plain, _ = run(False)
    for order in ran:  # on each worker, a short test between any two long ones
        longs = [k for k, i in enumerate(order) if keys[i][0] == FIRST]
        assert all(b - a > 1 for a, b in itertools.pairwise(longs)), order
    assert (chosen, plain) == (51.0, 60.5)  # the last machine ran beside the slow one, not after it


def test_short_waits_are_spread_among_the_plain_tests_not_run_together_at_the_end() -> None:
    """A FIRST test shorter than SPREAD_SECONDS (a TTL test waiting 1 s on the broker's clock) went
    after the longer ones: on RabbitMQ 4.3.6 forty of them ran on every worker at once as the
    machines ended, with a core idle for 7 s. Spread, each follows its share of the plain tests."""
    machines = [f"conformance/suite/m{i}/test_machine_{i}.py::test_m" for i in range(3)]
    waits = [f"conformance/suite/ttl/test_ttl.py::test_{i}" for i in range(4)]
    long_wait = "conformance/suite/timeout/test_timeout.py::test_long"
    plain = [f"conformance/suite/p/test_p.py::test_{i}" for i in range(20)]
    bounded = "conformance/suite/confirms/test_confirms.py::test_quorum"
    suite = [*waits, *machines, long_wait, bounded, *plain]
    ranks = ({n: (FIRST, MACHINE_SECONDS) for n in machines} | {n: (FIRST, 1.3) for n in waits}
             | {long_wait: (FIRST, SPREAD_SECONDS)} | {bounded: (PLAIN, 10.0)} | {n: (PLAIN, 0.0) for n in plain})
    order = [suite[i] for i in arrange(suite, 3, ranks)]
    assert sorted(order) == sorted(suite)
    assert order[:6] == [machines[0], plain[0], machines[1], plain[1], machines[2], plain[2]]
    assert order[6:8] == [long_wait, bounded]  # not short: in rank order, before the plain tests
    places = [order.index(n) for n in waits]
    assert places == sorted(places) and all(order[p - 1] in plain for p in places)
    assert [b - a for a, b in itertools.pairwise(places)] == [4, 5, 4]  # 4 waits among the 17 plain left
    assert order[-1] in plain
    few = [*waits, *machines, *plain[:5]]  # more waits than plain tests after the pairs: none is lost
    order = [few[i] for i in arrange(few, 3, ranks)]
    assert sorted(order) == sorted(few) and order[:6] == [machines[0], plain[0], machines[1], plain[1], machines[2],
                                                          plain[2]]


def test_one_worker_or_too_few_short_tests_keep_the_rank_order() -> None:
    assert SUITE[arrange(SUITE, 1)[0]] == SUITE[1]
    machines_only = [n for n in SUITE if rank(n) == FIRST]
    assert arrange(machines_only, 2) == list(range(len(machines_only)))


def _hold(directory: str, upgrade_after: float, log: Any, name: str, reading: Any) -> None:
    lock = BrokerLock(Path(directory))
    with lock.hold() as (upgrade, _release):
        log.put((name, "shared", time.monotonic()))
        if upgrade_after >= 0:
            assert reading.wait(timeout=10)  # the reader holds its shared lock
            time.sleep(upgrade_after)  # the test's own work before its broker-wide change
            upgrade()
            log.put((name, "exclusive", time.monotonic()))
            time.sleep(0.3)
        else:
            reading.set()
            time.sleep(-upgrade_after)
        log.put((name, "end", time.monotonic()))
    lock.close()


def test_an_upgraded_hold_runs_alone_and_two_upgrades_do_not_deadlock(tmp_path: Path) -> None:
    """Two tests upgrade while a third holds a shared lock for a while: each upgraded part starts
    after every other holder let go, and all three end (a deadlock would hit the join timeout)."""
    context = multiprocessing.get_context("fork")
    log, reading = context.Queue(), context.Event()
    procs = [context.Process(target=_hold, args=(str(tmp_path), after, log, name, reading))
             for name, after in (("a", 0.1), ("b", 0.1), ("reader", -0.8))]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=20)
    assert all(proc.exitcode == 0 for proc in procs), [proc.exitcode for proc in procs]
    events = [log.get(timeout=5) for _ in range(8)]
    at = {(name, what): when for name, what, when in events}
    alone = sorted((at[n, "exclusive"], at[n, "end"]) for n in ("a", "b"))
    assert alone[0][1] <= alone[1][0], f"the two upgraded holds overlapped: {events}"
    assert at["reader", "end"] <= alone[0][0], f"an upgraded hold ran beside the reader's shared one: {events}"


def _release_early(directory: str, log: Any, started: Any) -> None:
    lock = BrokerLock(Path(directory))
    with lock.hold() as (upgrade, release):
        upgrade()
        started.set()
        time.sleep(0.2)  # the part that needs the broker alone
        log.put(("a", "released", time.monotonic()))
        release()
        time.sleep(1.0)  # the rest of the test, beside the others
        log.put(("a", "end", time.monotonic()))
    lock.close()


def _writer(directory: str, log: Any, started: Any) -> None:
    lock = BrokerLock(Path(directory))
    assert started.wait(timeout=10)
    with lock.hold() as (upgrade, _release):
        upgrade()
        log.put(("b", "exclusive", time.monotonic()))
    lock.close()


def test_a_released_hold_lets_the_next_writer_in_before_its_end(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    log, started = context.Queue(), context.Event()
    procs = [context.Process(target=_release_early, args=(str(tmp_path), log, started)),
             context.Process(target=_writer, args=(str(tmp_path), log, started))]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=20)
    assert all(proc.exitcode == 0 for proc in procs), [proc.exitcode for proc in procs]
    at = {(name, what): when for name, what, when in (log.get(timeout=5) for _ in range(3))}
    assert at["a", "released"] <= at["b", "exclusive"] < at["a", "end"], at


class Stashed(SimpleNamespace):
    def get_closest_marker(self, name: str) -> Any:
        return object() if name in self.marks else None


def test_a_broker_wide_change_needs_the_mark_and_its_lock_wait_is_not_the_tests() -> None:
    unmarked = Stashed(nodeid="suite/test_x.py::test_y", marks=(), stash={})
    with pytest.raises(HarnessError, match=r"test_y changes a broker-wide setting but is not marked "
                                           r"@pytest.mark.broker_wide"):
        broker_wide_claim(unmarked, None)()
    upgrades: list[str] = []
    dog = Watchdog(Budgets(test=60.0, session=0.0, scale=1.0), lambda reason, session: None)
    dog.arm("suite/test_x.py::test_z")
    armed = dog._deadlines()[0]
    marked = Stashed(nodeid="suite/test_x.py::test_z", marks=(BROKER_WIDE,),
                     stash={EXCLUSIVE: lambda: upgrades.append("exclusive")})
    broker_wide_claim(marked, dog)()
    assert upgrades == ["exclusive"]
    waited = marked.stash[LOCK_WAIT]
    assert waited >= 0 and dog._deadlines()[0] == pytest.approx(armed + waited)  # the deadline moved by the wait
    dog.disarm()
    dog.stop()


def test_a_test_beside_broker_wide_ones_holds_no_lock_and_its_marks_are_checked(tmp_path: Path) -> None:
    import fcntl

    side = WorkerSide(SimpleNamespace(), str(tmp_path))
    writer = BrokerLock(tmp_path)  # another worker's broker-wide test, as its own open files

    def exclusive_now() -> bool:
        try:
            fcntl.flock(writer._main, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(writer._main, fcntl.LOCK_UN)
        return True

    try:
        for marks, free in (({}, False), ({BESIDE: ("a closed connection",)}, True)):
            item = Item(nodeid="suite/test_x.py::test_w", marks=marks, fixturenames=["target"], stash={})
            running = side.pytest_runtest_protocol(item, None)  # type: ignore[arg-type]
            next(running)  # the test runs now
            assert exclusive_now() is free, marks
            with pytest.raises(StopIteration):
                running.send(None)
            assert exclusive_now()
    finally:
        writer.close()
        assert side.lock is not None
        side.lock.close()
    reasonless = Item(nodeid="suite/test_x.py::test_v", marks={BESIDE: ()})
    both = Item(nodeid="suite/test_x.py::test_u", marks={BESIDE: ("why",), BROKER_WIDE: ()})
    assert "needs its reason" in str(mark_problem(reasonless))
    assert "marked both broker_wide and beside_broker_wide" in str(mark_problem(both))
    assert mark_problem(Item(nodeid="suite/test_x.py::test_t", marks={BESIDE: ("why",)})) is None
    assert mark_problem(Item(nodeid="suite/test_x.py::test_s", marks={})) is None
