"""x-death, the record of a message's deaths, and dead-letter cycles (DLX-02, DLX-04, DLX-06, DLX-07).

Rules:
- Pure functions over plain values: the entries are dicts as the codec decodes a field table,
  newest first; nothing here knows queues or connections.
- Two ways of reading what a message died of before, as RabbitMQ's versions do:
  `legacy` (3.x, rabbit_dead_letter update_x_death_header): the message's own x-death header, as
  a publisher may have set it; entries grouped per (queue, reason) first, in the order that
  grouping leaves them (reversed), each without a count given the number of its repeats; the
  x-first-death-* headers are set only when the message had no x-death header at all.
  From 3.13 (mc deaths annotations): only the deaths the broker recorded; an x-death header the
  publisher set is replaced, and x-first-death-* name the first recorded death.
- A cycle (rabbit_dead_letter detect_cycles, mc is_death_cycle): a message that did not die by
  rejection is not dead-lettered into a queue it already died in unless a death from the newest
  through that queue's latest one is a rejection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Death = dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """How a dead-lettered message is routed: its reason, the keys besides its routing key, the
    deaths a cycle is judged on (newest first) and those the broker keeps recording (4.x)."""
    reason: str
    extra_keys: tuple[str, ...]
    deaths: list[Death]
    recorded: list[Death] | None


def _key(entry: Mapping[str, Any]) -> tuple[Any, Any]:
    return entry.get("queue"), entry.get("reason")


def legacy_grouped(entries: Sequence[Death]) -> list[Death]:
    """3.x group_by_queue_and_reason: one entry per (queue, reason), the first of each, with
    `count` set to the number of its repeats when it had none; the fold prepends, so the groups
    come out in the reverse order of their first appearance. One entry is left as it is."""
    if len(entries) <= 1:
        return list(entries)
    grouped: list[Death] = []
    seen: set[tuple[Any, Any]] = set()
    for entry in entries:
        key = _key(entry)
        if key in seen:
            continue
        seen.add(key)
        repeats = sum(1 for e in entries if _key(e) == key)
        grouped.insert(0, entry if "count" in entry else {"count": repeats, **entry})
    return grouped


def recorded(before: list[Death] | None, entry: Death, merged: bool = True) -> list[Death]:
    """The deaths after `entry` (count 1): the (queue, reason) entry already there counts one more
    and moves to the front, keeping its other fields; else `entry` goes in front."""
    deaths = list(before or [])
    same = next((d for d in deaths if _key(d) == _key(entry)), None) if merged else None
    if same is None:
        return [entry, *deaths]
    deaths.remove(same)
    count = same.get("count")
    return [{**same, "count": (count if isinstance(count, int) else 0) + 1}, *deaths]


def legacy_recorded(header: Any, entry: Death, merged: bool = True) -> tuple[list[Death], bool]:
    """3.x: the x-death header after `entry`, and whether x-first-death-* are to be set (only
    when there was no x-death header). A header that is no array is replaced by `entry` alone."""
    if header is None:
        return [entry], True
    if not isinstance(header, list):
        return [entry], False
    return recorded(legacy_grouped([d for d in header if isinstance(d, dict)]), entry, merged), False


def is_cycle(target: str, deaths: Sequence[Mapping[str, Any]], rejections_break: bool = True) -> bool:
    """Whether dead-lettering into `target` closes a cycle with no rejection in it: `deaths`
    newest first, the death being recorded included."""
    for i, death in enumerate(deaths):
        if death.get("queue") == target:
            return not rejections_break or all(d.get("reason") != "rejected" for d in deaths[: i + 1])
    return False


def death_routing_keys(routing_key: str, headers: Mapping[str, Any]) -> list[str]:
    """x-death routing-keys: the key it was published with, then its CC keys (BCC is gone by then)."""
    cc = headers.get("CC")
    return [routing_key, *(k for k in cc if isinstance(k, str))] if isinstance(cc, list) else [routing_key]
