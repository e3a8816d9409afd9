"""Selecting suite tests by area or rule ID: `pytest -p conformance.catalogue.selection --select qos ACK-03`.

Responsibility: parse and validate a selection against the catalogue (`parse_selection`) and,
as a pytest plugin loaded with `-p conformance.catalogue.selection`, keep only the tests that check a
selected rule or a rule of a selected area. `amqp-conformance run --select` uses it; being a
`-p` plugin, it is active in pytest-xdist workers too (they get the same command line).

Rules:
- A selector is an area name (`qos`) or a rule ID (`ACK-03`), matched exactly; several may be
  given, space- or comma-separated. Anything else is a usage error naming the selector and
  what is known.
- A test is kept when any rule of its `rules` marker is selected, or belongs to a selected
  area. Tests without a `rules` marker are dropped while a selection is active.
- Dropped tests are reported to pytest as deselected.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pytest

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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("amqp-conformance").addoption(
        "--select", action="append", default=[], metavar="AREA|RULE",
        help="run only the tests of these areas or rule IDs (repeatable, comma-separated)")


def pytest_configure(config: pytest.Config) -> None:
    try:
        parse_selection(config.getoption("--select"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selection = parse_selection(config.getoption("--select"))
    if not selection:
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("rules")
        (kept if marker is not None and selection.keeps(str(r) for r in marker.args) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
