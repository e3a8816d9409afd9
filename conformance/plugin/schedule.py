"""Which worker runs which test first, when pytest-xdist spreads the suite.

Responsibility: against a broker that deviates, the model machines run for tens of seconds
each (they explore, then shrink their failure) while an example test takes a fraction of one;
with xdist's plain `load` distribution two machines could land one after the other on the
same worker while the others idled (measured: one worker 91 s, three 21-28 s, with
`multi_ack_only_named`). The plugin's scheduler starts the long tests first, each on its own
worker, and hands the rest out one test at a time to whichever worker is free.

Rules:
- In xdist's `load` mode (what `-n N` means, and what `amqp-conformance run --jobs N` runs)
  without `--maxschedchunk`, the controller's scheduler is `LongestFirst`: xdist's load
  scheduling with a chunk of one (a worker holds the test it runs and the next one, as xdist
  needs) and the pending tests in the order `arrange` gives. With `--maxschedchunk` or another
  `--dist` mode, xdist schedules as it always does; without pytest-xdist nothing changes.
- `arrange` is pure: from the collected node ids and the number of workers it returns the
  order of the tests, by rank: the model machines outside the timeout area first (each
  worker's first two tests are one of them and a short test, so no machine waits behind
  another on one worker), then the other tests, then the timeout machine, then the rest of
  the timeout area; collection order within a rank.
- Why the timeout area comes last: its tests change broker-wide settings (the global consumer
  timeout, through the `admin` fixture), so across workers each of them runs alone
  (`distributed.BrokerLock`); one started while a machine runs makes every worker wait for
  that machine (measured: 24 s stalls against a deviating broker). For the same reason a
  worker's collection puts every test that uses `admin` last within its rank
  (`admin_last`), so those outside the timeout area come after the short ones.
- The verdicts do not depend on the order: every test sets up its own queues and connections.
"""

from __future__ import annotations

from typing import Any

MACHINE, PLAIN, TIMEOUT_MACHINE, TIMERS = 0, 1, 2, 3  # ranks, in the order they are handed out


def rank(nodeid: str) -> int:
    path = nodeid.split("::", 1)[0]
    machine = path.rsplit("/", 1)[-1].startswith("test_machine_")
    if "/timeout/" in path:
        return TIMEOUT_MACHINE if machine else TIMERS
    return MACHINE if machine else PLAIN


def arrange(nodeids: list[str], workers: int) -> list[int]:
    """The collection indices in the order to hand out (see the module's rules)."""
    by_rank = sorted(range(len(nodeids)), key=lambda i: rank(nodeids[i]))  # stable
    machines = [i for i in by_rank if rank(nodeids[i]) == MACHINE][:workers]
    short = [i for i in by_rank if rank(nodeids[i]) == PLAIN][:len(machines)]
    if workers < 2 or len(short) < len(machines):
        return by_rank
    first = [index for pair in zip(machines, short, strict=True) for index in pair]
    taken = set(first)
    return first + [index for index in by_rank if index not in taken]


def admin_last(items: list[Any]) -> None:
    """A worker's collection, in place: the tests that use the `admin` fixture after the others
    (stable; the same on every worker, as xdist requires)."""
    items.sort(key=lambda item: "admin" in getattr(item, "fixturenames", ()))


def make_scheduler(config: Any, log: Any) -> Any:
    """xdist's load scheduler, one test at a time, in the order of `arrange`."""
    from xdist.scheduler import LoadScheduling

    class LongestFirst(LoadScheduling):  # type: ignore[misc]
        arranged = False

        def __init__(self, config: Any, log: Any) -> None:
            super().__init__(config, log)
            self.maxschedchunk = 1  # only when the user chose none (`wanted`)

        def _send_tests(self, node: Any, num: int) -> None:
            if not self.arranged and self.collection is not None:  # the first distribution
                pending = set(self.pending)
                self.pending[:] = [index for index in arrange(list(self.collection), len(self.nodes))
                                   if index in pending]
                self.arranged = True
            super()._send_tests(node, num)

    return LongestFirst(config, log)


def wanted(config: Any) -> bool:
    """True when the run leaves the scheduling to the plugin (see the module's rules)."""
    return getattr(config.option, "dist", None) == "load" and getattr(config.option, "maxschedchunk", None) is None
