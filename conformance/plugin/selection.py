"""The pytest side of a selection: `pytest -p conformance.plugin.selection --select qos ACK-03`.

Responsibility: declare `--select` and keep only the tests that check a selected rule or a rule of
a selected area (`conformance.catalogue.selection`). `amqp-conformance run --select` loads it;
being a `-p` plugin, it is active in pytest-xdist workers too (they get the same command line).

Rules:
- An unknown selector is a usage error (pytest's), naming it and what is known.
- Tests without a `rules` marker are dropped while a selection is active; dropped tests are
  reported to pytest as deselected.
"""

from __future__ import annotations

import pytest

from conformance.catalogue.selection import parse_selection


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
