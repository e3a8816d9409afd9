"""Selecting suite tests by area or rule ID (`--select qos ACK-03`): what a selection keeps.

Responsibility: parse and validate a selection against the catalogue (`parse_selection`) and say
whether a test's rules are selected (`Selection.keeps`). The pytest side (the `--select` option,
dropping the other tests) is `conformance.plugin.selection`; nothing here imports pytest.

Rules:
- A selector is an area name (`qos`) or a rule ID (`ACK-03`), matched exactly; several may be
  given, space- or comma-separated. Anything else is a usage error naming the selector and
  what is known.
- A test is kept when any rule of its `rules` marker is selected, or belongs to a selected
  area. Tests without a `rules` marker are dropped while a selection is active.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from conformance.catalogue.rules import AREAS, all_rules, rule


@dataclass(frozen=True)
class Selection:
    areas: frozenset[str]
    rules: frozenset[str]

    def __bool__(self) -> bool:
        return bool(self.areas or self.rules)

    def keeps(self, rule_ids: Iterable[str]) -> bool:
        for rule_id in rule_ids:
            if rule_id in self.rules:
                return True
            try:
                if rule(rule_id).area in self.areas:
                    return True
            except KeyError:
                continue
        return False

    def describe(self) -> str:
        return " ".join([*sorted(self.areas), *sorted(self.rules)])


def parse_selection(selectors: Iterable[str]) -> Selection:
    """The selection named by `selectors`; ValueError (a usage error) for an unknown one."""
    known = {r.id for r in all_rules()}
    areas: set[str] = set()
    rules: set[str] = set()
    for text in selectors:
        for selector in (s for s in text.replace(",", " ").split() if s):
            if selector in AREAS:
                areas.add(selector)
            elif selector in known:
                rules.add(selector)
            else:
                raise ValueError(f"--select {selector!r}: neither an area ({', '.join(AREAS)}) nor a rule ID of the "
                                 f"catalogue (see `amqp-conformance rules`)")
    return Selection(frozenset(areas), frozenset(rules))
