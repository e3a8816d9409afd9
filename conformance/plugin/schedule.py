"""Which worker runs which test first, when pytest-xdist spreads the suite.

Responsibility: against a broker that deviates, the model machines run for tens of seconds
each (they explore, then shrink their failure) while an example test takes a fraction of one;
with xdist's plain `load` distribution two machines could land one after the other on the
same worker while the others idled (measured: one worker 91 s, three 21-28 s, with
`multi_ack_only_named`). The plugin's scheduler starts the run on the first worker that has
collected, runs the tests that change broker-wide settings first, while the other workers
start, then the long tests, each on its own worker, and hands the rest out one test at a time to
whichever worker is free.

Rules:
- In xdist's `load` mode (what `-n N` means, and what `amqp-conformance run --jobs N` runs)
  without `--maxschedchunk`, the controller's scheduler is `LongestFirst`: xdist's load
  scheduling with a chunk of one (a worker holds the test it runs and the next one, as xdist
  needs: a worker runs a test only once it holds the next or is told to stop) and the pending
  tests in the order `first_phase(arrange(...))` gives. With `--maxschedchunk` or another
  `--dist` mode, xdist schedules as it always does; without pytest-xdist nothing changes.
- Each test has a rank, from what the test says of itself (`rank_of`, on the workers, which
  hold the collected items; the controller holds only node ids): FIRST for the model machines
  and the tests marked `long_wait(seconds)` (seconds spent on the broker's clock by design) or
  `takes(seconds)` (seconds it takes on RabbitMQ, measured: a machine that explores longer than
  `MACHINE_SECONDS`, a drawn test whose examples are slow there), longest first, PLAIN for the rest
  (those marked `bound(seconds)` first, longest bound first: a reply a conforming broker sends at
  once but is allowed that long, such as a quorum queue's confirm, which a deviating broker makes
  the test wait out; handed out early, such waits overlap the machines' in place of following them),
  LAST for the tests marked `broker_wide` (they may change a setting every connection sees,
  such as the global consumer timeout) and FILL for the tests marked `beside_broker_wide` (they
  hold no lock), each with their seconds, the longest first. Only a FILL test waiting longer than a
  machine (`MACHINE_SECONDS`: the 30-s framing test) keeps FILL in the order (`sort_keys`); the
  others, and every one in a run without broker-wide tests, rank as their waits alone would. Workers write the ranks into the run's lock directory
  (`write_ranks`); the controller reads them at its first distribution (`read_ranks`). Without
  them (a worker that could not write), a test ranks by its file name (`rank`).
- The first phase. Workers other than the first wait at the start gate until the first has
  collected (`start_gate`), so one worker is ready seconds before the others, which are then
  starting Python and collecting the suite: every core is busy and no test could run. The
  scheduler starts the run with the first collection (`collection_is_completed`), and a worker
  that joins later gets tests as it comes (a worker whose collection differs gets none and is
  reported, as xdist reports it). The broker-wide tests come first (`first_phase`), while those
  workers start: they wait on the broker's clock and use little CPU, where at the end of the run
  they kept the broker alone for 8 s at 10 % CPU (measured, RabbitMQ 4.3.6, 2 cores: 54.4-54.9 s
  before, 44.3-46.2 s after). While any broker-wide test is to run or running, a worker is sent only
  broker-wide tests and tests beside them (`phase_tests`: a worker holding nothing gets one of each,
  so the 30-s framing test starts behind the first broker-wide test; nothing is queued behind a
  test beside them; a lone test gets a short plain partner, or it would never run), never a long or
  plain test, whose shared hold would make the next broker-wide change wait for it. The shorter
  tests beside them (2-5 s of refused handshakes and heartbeats) are not sent then: handed one to
  every worker joining the phase, each held its worker while the last broker-wide tests waited for a
  free one, and the machines waited behind them (RabbitMQ 4.3.6, 2 cores: two workers ran the last
  fifteen broker-wide tests one after the other while ten slept in them, one core idle for 3 s);
  ranked by their waits they run beside the machines. When the last
  broker-wide test ends, every idle worker gets tests. When a worker joins or the phase ends, only
  workers holding fewer than two tests are sent more (xdist's own `schedule` would queue a third
  test behind two on every worker).
- `arrange` is pure: from the node ids, their ranks and the number of workers it returns the
  order of the tests: each worker's first two tests are a long one (a FIRST test or, once those
  are placed, a plain test with a bound) and a short one (a plain test without a bound), so no
  long test waits behind another on one worker (xdist sends each worker two tests at first:
  against a deviating broker two bounded tests paired so waited 10 s + 10 s on one worker), then
  the rest by rank, the longer seconds first, collection order within the same, except the short
  waits: FIRST tests expected to take less than `SPREAD_SECONDS` (a TTL or lease test, about a
  second on the broker's clock) are spread evenly among the short plain tests (`spread`). Last in
  the FIRST rank they were handed out together as the machines ended: on RabbitMQ 4.3.6 (2 cores)
  forty TTL tests waited on every worker at once and a core idled for 7 s; spread, the workers
  beside each of them have CPU work.
- Later, each test sent to a worker is the first of that order unless the worker already holds
  a long test (FIRST, bounded, or a waiting test beside broker-wide ones) and the first is long
  too: then the first short plain test goes instead (`partner`, pure), since a worker runs its
  tests in the order it got them.
- Why no other test runs beside the broker-wide ones: when one of them changes a broker-wide
  setting it takes the exclusive lock (`distributed.BrokerLock`) and waits for every running test;
  one started while a machine runs would make every worker wait for that machine (measured: 24 s
  stalls against a deviating broker). Only the marked tests can take it (`fixtures.admin` refuses
  an unmarked test with a harness error), so the mark cannot be forgotten.
- A test marked `beside_broker_wide(reason)` takes no part in the lock: it runs beside a
  broker-wide test (FILL above). The reason names, with RabbitMQ's source for every profiled version, why
  nothing such a test changes (the global consumer timeout, the channel tick, an alarm) reaches
  what the test observes; such a test cannot make a broker-wide change itself (`fixtures.admin`
  refuses a test not marked `broker_wide`, and the two marks together are a harness error).
- The verdicts do not depend on the order: every test sets up its own queues and connections.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FIRST, PLAIN, FILL, LAST = 0, 1, 2, 3  # ranks, in the order they are handed out
LONG_WAIT = "long_wait"  # marker: the test spends seconds on the broker's clock
TAKES = "takes"  # marker: the test takes about this many seconds on RabbitMQ (measured; not a limit)
BOUND = "bound"  # marker: the test's longest bound for a reply, waited out only when the broker never sends it
BROKER_WIDE = "broker_wide"  # marker: the test may change a setting every connection sees
BESIDE = "beside_broker_wide"  # marker (with its reason): nothing a broker-wide change touches reaches the test
RANKS_FILE = "ranks.json"
MACHINE_SECONDS = 10.0  # what a model machine is expected to take (4-13 s on the brokers we run)
SPREAD_SECONDS = 3.0  # a FIRST test expected to take less is spread among the short plain tests


def rank(nodeid: str) -> int:
    """The rank a node id gives on its own: FIRST for a model machine, PLAIN otherwise."""
    path = nodeid.split("::", 1)[0]
    return FIRST if path.rsplit("/", 1)[-1].startswith("test_machine_") else PLAIN


def mark_problem(item: Any) -> str | None:
    """What is wrong with a test's scheduling marks, or None: `beside_broker_wide` needs its reason
    and excludes `broker_wide`."""
    beside = item.get_closest_marker(BESIDE)
    if beside is None:
        return None
    if item.get_closest_marker(BROKER_WIDE) is not None:
        return f"{item.nodeid}: marked both {BROKER_WIDE} and {BESIDE}: a broker-wide test cannot run beside itself"
    if not (beside.args and isinstance(beside.args[0], str) and beside.args[0].strip()):
        return f"{item.nodeid}: @pytest.mark.{BESIDE} needs its reason (why no broker-wide change reaches the test)"
    return None


def rank_of(item: Any) -> tuple[int, float]:
    """A collected test's rank and the seconds it is expected to take on a conforming broker
    (the longer of `long_wait(seconds)` and `takes(seconds)`; a machine: MACHINE_SECONDS; a plain
    test marked `bound(seconds)`: that bound, which orders it among the plain tests; otherwise 0)."""
    marked = [m for m in (item.get_closest_marker(LONG_WAIT), item.get_closest_marker(TAKES)) if m is not None]
    if marked:
        found, seconds = FIRST, max(float(m.args[0]) if m.args else MACHINE_SECONDS for m in marked)
    else:
        found = rank(item.nodeid)
        bound = item.get_closest_marker(BOUND)
        seconds = MACHINE_SECONDS if found == FIRST else float(bound.args[0]) if bound is not None else 0.0
    if item.get_closest_marker(BROKER_WIDE) is not None:  # the longest first among them too
        return LAST, seconds if found == FIRST else 0.0
    if item.get_closest_marker(BESIDE) is not None:  # runs beside the broker-wide tests, the longest first
        return FILL, seconds
    return found, seconds


def write_ranks(directory: Path, items: list[Any]) -> None:
    """On a worker: every collected test's rank and expected seconds, for the controller (written
    whole, then renamed)."""
    ranks = {item.nodeid: rank_of(item) for item in items}
    partial = directory / f"{RANKS_FILE}.{os.getpid()}"
    partial.write_text(json.dumps(ranks))
    partial.replace(directory / RANKS_FILE)


def read_ranks(directory: Path) -> dict[str, tuple[int, float]]:
    """On the controller: what a worker wrote, or {} when there is nothing readable."""
    try:
        found = json.loads((directory / RANKS_FILE).read_text())
        return {str(k): (int(v[0]), float(v[1])) for k, v in found.items()}
    except (OSError, ValueError, TypeError, IndexError, AttributeError):
        return {}


def sort_keys(nodeids: list[str], ranks: Mapping[str, tuple[int, float]] | None = None) -> list[tuple[int, float]]:
    """Each test's place in the order: (its rank, minus its seconds); a test without a known rank
    ranks by its file name, and a FILL test by its wait alone unless it waits longer than a
    machine in a run with broker-wide tests (module rules: the first phase)."""
    known = ranks or {}
    broker_wide = any(known.get(nodeid, (PLAIN, 0.0))[0] == LAST for nodeid in nodeids)

    def key(nodeid: str) -> tuple[int, float]:
        found = known.get(nodeid)
        if found is None:
            named = rank(nodeid)
            return named, -MACHINE_SECONDS if named == FIRST else 0.0
        if found[0] == FILL and (not broker_wide or found[1] <= MACHINE_SECONDS):  # where its wait alone puts it
            return FIRST if found[1] > 0 else PLAIN, -found[1]
        return found[0], -found[1]

    return [key(nodeid) for nodeid in nodeids]


def partner(held: list[int], pending: list[int], keys: list[tuple[int, float]]) -> int:
    """The position in `pending` of the next test to send a worker that holds `held` (the test it
    runs and the one queued behind it): the first, unless the worker holds a long test and the
    first is long too; then the first short plain test, so no long test is queued behind another
    (a worker runs what it was sent in order: measured, the requeue machine queued behind a 60-s
    confirms machine started 60 s late while other workers ran short tests), or the first when
    no short test is left."""
    def long(index: int) -> bool:  # a machine or a long wait, a bounded test, a test beside broker-wide ones that waits
        return keys[index][0] == FIRST or (keys[index][0] in (PLAIN, FILL) and keys[index][1] < 0)

    if not pending or not long(pending[0]) or not any(long(index) for index in held):
        return 0
    return next((position for position, index in enumerate(pending) if keys[index] == (PLAIN, 0.0)), 0)


def arrange(nodeids: list[str], workers: int, ranks: Mapping[str, tuple[int, float]] | None = None) -> list[int]:
    """The collection indices in the order to hand out (see the module's rules)."""
    keys = sort_keys(nodeids, ranks)

    def key(i: int) -> tuple[int, float]:
        return keys[i]

    def of(i: int) -> int:
        return key(i)[0]

    by_rank = sorted(range(len(nodeids)), key=key)  # stable
    longs = [i for i in by_rank if of(i) == FIRST or (of(i) == PLAIN and key(i)[1] < 0)][:workers]  # FIRST, then bounded
    short = [i for i in by_rank if key(i) == (PLAIN, 0.0)][:len(longs)]  # a bounded test is no long one's partner
    if workers < 2 or len(short) < len(longs):
        return by_rank
    first = [index for pair in zip(longs, short, strict=True) for index in pair]
    taken = set(first)
    return first + spread([index for index in by_rank if index not in taken], keys)  # the pairs kept whole


def spread(order: list[int], keys: list[tuple[int, float]]) -> list[int]:
    """`order` with its short waits (FIRST tests of less than SPREAD_SECONDS) taken from the end of
    the FIRST tests and spread evenly among the short plain tests that follow them (pure; module
    rules)."""
    waits = [index for index in order if keys[index][0] == FIRST and -keys[index][1] < SPREAD_SECONDS]
    plain = [index for index in order if keys[index] == (PLAIN, 0.0)]
    if not waits or not plain:
        return order
    moved = set(waits)
    rest = [index for index in order if index not in moved]
    after: dict[int, list[int]] = {}  # a plain test -> the waits that follow it (several when waits outnumber them)
    for n, index in enumerate(waits):
        after.setdefault(plain[max(len(plain) * (n + 1) // (len(waits) + 1) - 1, 0)], []).append(index)
    spread_out: list[int] = []
    for index in rest:
        spread_out.append(index)
        spread_out.extend(after.get(index, ()))
    return spread_out


def first_phase(order: list[int], keys: list[tuple[int, float]]) -> list[int]:
    """The order with the broker-wide tests (LAST) at its front, then the tests that run beside them
    (FILL), each in their own order, the longest first (pure; module rules: the first phase)."""
    def of(rank: int) -> list[int]:
        return [index for index in order if keys[index][0] == rank]

    return of(LAST) + of(FILL) + [index for index in order if keys[index][0] not in (LAST, FILL)]


def phase_tests(pending: list[int], keys: list[tuple[int, float]], held: list[int], num: int) -> list[int]:
    """What to send a worker holding `held` while broker-wide tests are left (pure): up to `num` of
    the broker-wide tests (they wait for the lock) and the tests marked to run beside them (they hold
    none), in the order of `pending`. A worker holding nothing gets one of each when it can, so the
    longest test beside them starts behind the first broker-wide one, not after all of them; a
    worker holding a test beside them gets nothing more than a short partner: a broker-wide test
    would wait behind it (measured: an alarm test queued behind the 30-s framing test kept the phase
    open for 30 s), and so would another test beside them, which an idle worker can run. When that would
    leave the worker one test, a short plain test joins it: an xdist worker runs a test only once it
    holds the next one (or is told to stop), so a lone broker-wide test would never run and the phase
    never end; a short plain test holds the shared lock for a moment after it."""
    wide = [index for index in pending if keys[index][0] == LAST]
    beside = [index for index in pending if keys[index][0] == FILL]
    if any(keys[index][0] == FILL for index in held):  # only a short partner (below), never queued behind it
        chosen = []
    elif not held and num >= 2 and wide and beside:
        chosen = [wide[0], beside[0]]
    else:
        chosen = [index for index in pending if keys[index][0] in (LAST, FILL)][:num]
    if len(held) + len(chosen) == 1:
        short = [index for index in pending if keys[index] == (PLAIN, 0.0) and index not in chosen]
        rest = short or [index for index in pending if index not in chosen]
        chosen += rest[:1]
    return chosen


def make_scheduler(config: Any, log: Any, lock_dir: Path) -> Any:
    """xdist's load scheduler, one test at a time, in the order of `arrange`, starting on the first
    worker that collected, the broker-wide tests first on it (module rules)."""
    from xdist.scheduler import LoadScheduling

    class LongestFirst(LoadScheduling):  # type: ignore[misc]
        arranged = False

        def __init__(self, config: Any, log: Any) -> None:
            super().__init__(config, log)
            self.maxschedchunk = 1  # only when the user chose none (`wanted`)
            self.keys: list[tuple[int, float]] = []

        @property
        def collection_is_completed(self) -> bool:  # the first worker's collection starts the run
            return bool(self.node2collection)

        def add_node_collection(self, node: Any, collection: Any) -> None:
            if self.collection is not None and list(collection) != self.collection:
                self._report_difference(node, collection)  # as xdist reports it; the worker gets no test
                node.shutdown()
                return
            super().add_node_collection(node, collection)

        def _report_difference(self, node: Any, collection: Any) -> None:
            import pytest
            from xdist.report import report_collection_diff

            first = next(iter(self.node2collection))
            text = report_collection_diff(self.collection, list(collection), first.gateway.id, node.gateway.id)
            self.log(text)
            self.config.hook.pytest_collectreport(report=pytest.CollectReport(
                nodeid=node.gateway.id, outcome="failed", longrepr=text, result=[]))

        def schedule(self) -> None:
            if self.collection is None:
                super().schedule()
                return
            for node in self.nodes:  # a worker that joins later: it gets tests, the others are not topped up
                if len(self.node2pending[node]) < 2:
                    self.check_schedule(node)

        def broker_wide_left(self) -> bool:
            """A broker-wide test is still to be sent, or sent and not done."""
            held = (index for pending in self.node2pending.values() for index in pending)
            return any(self.keys[index][0] == LAST for index in (*self.pending, *held))

        def check_schedule(self, node: Any, duration: float = 0) -> None:
            if node in self.node2collection:  # not one still collecting, nor one refused
                super().check_schedule(node, duration)

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            phase = bool(self.keys) and self.broker_wide_left()
            super().mark_test_complete(node, item_index, duration)
            if phase and not self.broker_wide_left():  # the first phase is over: every idle worker gets tests
                for other in self.nodes:
                    if other is not node and len(self.node2pending[other]) < 2:  # no test queued behind two
                        self.check_schedule(other)

        def _send_tests(self, node: Any, num: int) -> None:
            if node not in self.node2collection:  # xdist's first distribution goes to every worker
                return
            if not self.arranged and self.collection is not None:  # the first distribution
                pending = set(self.pending)
                ranks = read_ranks(lock_dir)
                self.keys = sort_keys(list(self.collection), ranks)
                order = first_phase(arrange(list(self.collection), self.numnodes, ranks), self.keys)
                self.pending[:] = [index for index in order if index in pending]
                self.arranged = True
            if self.keys and self.broker_wide_left():  # the first phase: broker-wide tests, and beside them
                chosen = phase_tests(self.pending, self.keys, self.node2pending[node], num)
                for index in chosen:
                    self.pending.remove(index)
                if chosen:
                    self.node2pending[node].extend(chosen)
                    node.send_runtest_some(chosen)
                return
            elif num == 1 and self.keys:  # later: one test at a time, never a long one behind another
                position = partner(list(self.node2pending.get(node, [])), self.pending, self.keys)
                if position:
                    self.pending.insert(0, self.pending.pop(position))
            super()._send_tests(node, num)

    return LongestFirst(config, log)


def wanted(config: Any) -> bool:
    """True when the run leaves the scheduling to the plugin (see the module's rules)."""
    return getattr(config.option, "dist", None) == "load" and getattr(config.option, "maxschedchunk", None) is None
