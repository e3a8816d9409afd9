"""Which worker runs which test first, when pytest-xdist spreads the suite (issue 31).

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
  order of the tests: each worker's first two are the next heaviest test and the lightest one
  left (so no heavy test waits behind another on one worker), then every other test, heaviest
  first, collection order within a weight. Weights: a model machine 3, a test of the timeout
  area (real timers) 2, any other 1.
- The verdicts do not depend on the order: every test sets up its own queues and connections.
"""

from __future__ import annotations

from typing import Any

MACHINE, TIMERS, PLAIN = 3, 2, 1


def weight(nodeid: str) -> int:
    path = nodeid.split("::", 1)[0]
    if path.rsplit("/", 1)[-1].startswith("test_machine_"):
        return MACHINE
    return TIMERS if "/timeout/" in path else PLAIN


def arrange(nodeids: list[str], workers: int) -> list[int]:
    """The collection indices in the order to hand out (see the module's rules)."""
    by_weight = sorted(range(len(nodeids)), key=lambda i: -weight(nodeids[i]))  # stable
    if workers < 2 or len(nodeids) < 2 * workers:
        return by_weight
    heads = by_weight[:workers]
    tails = by_weight[::-1][:workers]
    if set(heads) & set(tails):  # fewer tests than two per worker of distinct weight: no pairs to make
        return by_weight
    first = [index for pair in zip(heads, tails, strict=True) for index in pair]
    taken = set(first)
    return first + [index for index in by_weight if index not in taken]


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
                order = arrange(list(self.collection), len(self.nodes))
                self.pending[:] = [index for index in order if index in set(self.pending)]
                self.arranged = True
            super()._send_tests(node, num)

    return LongestFirst(config, log)


def wanted(config: Any) -> bool:
    """True when the run leaves the scheduling to the plugin (see the module's rules)."""
    return getattr(config.option, "dist", None) == "load" and getattr(config.option, "maxschedchunk", None) is None
