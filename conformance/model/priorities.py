"""Priority queues: the order in which a queue serves ready messages of given priorities.

Responsibility: pure functions from the published priorities (None = no priority property), in
publish order, to the delivery order (indexes into that list) of a queue that serves them one by
one (basic.get) from a fresh state.
Rules:
- PRI-01 (classic, x-max-priority = M): level = min(priority or 0, M); the highest level first,
  publish order within a level (rabbit_priority_queue). Without M every message is level 0; M = 0
  is one level up to 3.13.3 and two (0 and 1, as M = 1) from 3.13.4.
- PRI-02 (quorum) by version:
  * 4.3: level = min(priority, 31), no priority = 4; strict, highest first (rabbit_fifo_pq);
  * 4.0-4.2: two levels, high when priority > 4; every third dequeue (its counter at 2) takes
    the older of the two heads, the others the high head when there is one (rabbit_fifo_q);
  * before 4.0: no priorities, publish order.
"""

from __future__ import annotations

from collections.abc import Sequence

QUORUM_MAX_PRIORITY = 31
QUORUM_DEFAULT_PRIORITY = 4
QUORUM_HIGH_ABOVE = 4  # 4.0: priority > 4 is the high queue
QUORUM_WEIGHT = 2  # 4.0: rabbit_fifo_q ?WEIGHT


def strict_order(levels: Sequence[int]) -> list[int]:
    """Highest level first, publish order within a level."""
    return sorted(range(len(levels)), key=lambda i: (-levels[i], i))


def classic_order(priorities: Sequence[int | None], max_priority: int | None, two_levels_at_zero: bool = False) -> list[int]:
    """PRI-01; `two_levels_at_zero`: x-max-priority 0 has levels 0 and 1, as 1 does (from 3.13.4:
    rabbit_priority_queue:priorities/1 takes max(1, M)); before, one level (publish order)."""
    if max_priority is None or (max_priority == 0 and not two_levels_at_zero):
        return list(range(len(priorities)))
    top = max(1, max_priority)
    return strict_order([min(p or 0, top) for p in priorities])


def quorum_order(priorities: Sequence[int | None], version: tuple[int, int]) -> list[int]:
    if version >= (4, 3):
        return strict_order([QUORUM_DEFAULT_PRIORITY if p is None else min(p, QUORUM_MAX_PRIORITY)
                             for p in priorities])
    if version >= (4, 0):
        return _two_level_order(priorities)
    return list(range(len(priorities)))


def _two_level_order(priorities: Sequence[int | None]) -> list[int]:
    high = [i for i, p in enumerate(priorities) if p is not None and p > QUORUM_HIGH_ABOVE]
    normal = [i for i, p in enumerate(priorities) if not (p is not None and p > QUORUM_HIGH_ABOVE)]
    order: list[int] = []
    counter = 0
    while high or normal:
        if high and normal and counter == QUORUM_WEIGHT:
            take = high if high[0] < normal[0] else normal
        else:
            take = high or normal
        order.append(take.pop(0))
        counter = 0 if counter == QUORUM_WEIGHT else counter + 1
    return order
