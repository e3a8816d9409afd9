"""The pytest side of a selection: `pytest --select qos ACK-03` (the plugin registers this module).

Responsibility: keep only the tests that check a selected rule or a rule of
a selected area (`conformance.catalogue.selection`); `--select` itself is one of the run's options
(`conformance.run.options`), which the plugin declares. The plugin registers it in every
process of a run (pytest-xdist workers too).

Rules:
- An unknown selector is a usage error, found where the run's configuration is built
  (`conformance.run.config`).
- Tests without a `rules` marker are dropped while a selection is active; dropped tests are
  reported to pytest as deselected.
"""

from __future__ import annotations

import pytest

from conformance.plugin.session import harness


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selection = harness(config).config.selection
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
