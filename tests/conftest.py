"""Shared test helpers.

`require(condition, reason)`: a test that needs an external resource (the amqp-specs XML, a
RabbitMQ broker, ...) skips when it is absent, except under `AMQPC_STRICT=1` (set by
`.ci/run`), where a missing resource is a failure: CI must never pass by skipping.

Default selection: the project's own tests (under tests/) marked `slow`, `rabbitmq43`,
`rabbitmq40`, `cluster`, `gate`, `broker_cluster`, `rabbitmq43cluster`, `rabbitmq310cluster`, `grid`,
`end_to_end`, `spark` or `browser` are deselected unless `-m` chooses (`pytest -m slow
tests/reliability`). The last three are `make test-end-to-end` (the Spark session, Chromium and the
whole-command subprocesses: half of `make test`'s CPU before, docs/benchmarks.md). The
filter is here, not in pyproject's addopts, so that it never touches the shipped suite
(conformance/suite) when it is named: `pytest conformance/suite` or `pytest --pyargs
conformance.suite` from the repository root runs the same tests as `amqp-conformance run`. A bare
`pytest` (`make test`, which must end within 5 minutes) leaves the shipped suite's long tests
(`long_suite_test`: the model machines, waits of 10 s or more on the broker's clock, `slow`) to
`make test-gates`, whose whole-suite runs against the reference broker require exit 0.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from conformance.plugin.schedule import FIRST, rank, rank_of

STRICT_ENV = "AMQPC_STRICT"
# `amqp-conformance run` defaults to several pytest-xdist workers against any broker
# (conformance.gate.options.default_jobs); the project's tests run it serially, as before, unless a
# test passes --jobs: `make test` already runs five workers of its own.
os.environ.setdefault("AMQPC_JOBS", "1")
NOT_BY_DEFAULT = ("slow", "rabbitmq43", "rabbitmq40", "cluster", "gate", "broker_cluster", "rabbitmq43cluster",
                  "rabbitmq310cluster", "grid", "end_to_end", "spark", "browser")  # project tests that need `-m` to run
TESTS_DIR = Path(__file__).resolve().parent
SUITE_LONG = 10.0  # seconds: the shipped suite's tests this long run in `make test-gates`, not `make test`


# pytest-xdist (`make test` runs `-n 5 --dist loadgroup`, Makefile PYTEST_WORKERS): tests sharing one costly
# resource run in one worker, one after another: the Spark session (and the report site built on it). (The cluster
# tests, tests/reports/test_cluster.py, are `make test-cluster`, a group of their own.) The tests on
# the shared RabbitMQ 3.10.8 need no group: each uses its own queues, and the one test that changes
# a global setting (test_admin.py) changes it by a millisecond and restores it.
XDIST_GROUPS = {"spark": "spark", "browser": "spark"}
# Module-scoped fixtures that cost tens of seconds (every client playing the smoke subset, every
# faulty client, a failing `amqp-conformance run`): the tests that use one run in one worker, so the
# fixture is made once, not once in each worker that happens to draw one of its tests.
SHARED_MODULE_FIXTURES = ("played", "verdicts", "failing_run")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = next((g for marker, g in XDIST_GROUPS.items() if item.get_closest_marker(marker)), None)
        if group is not None and not item.get_closest_marker("xdist_group"):  # a module may name its own
            item.add_marker(pytest.mark.xdist_group(group))
        shared = [name for name in SHARED_MODULE_FIXTURES if name in getattr(item, "fixturenames", ())]
        if shared and group is None and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(f"{Path(str(item.path)).stem}-{shared[0]}"))
    if config.option.markexpr:  # an explicit -m selects for itself
        return
    bare = config.args_source is pytest.Config.ArgsSource.TESTPATHS  # `make test`: no paths given
    keep, drop = [], []
    for item in items:
        ours = Path(str(item.path)).resolve().is_relative_to(TESTS_DIR)
        mine = ours and any(item.get_closest_marker(m) for m in NOT_BY_DEFAULT)
        (drop if mine or (bare and not ours and long_suite_test(item)) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def long_suite_test(item: pytest.Item) -> bool:
    """A test of the shipped suite that a bare `pytest` (`make test`) leaves to `make test-gates`:
    one expected to take SUITE_LONG seconds or more on a conforming broker (the model machines, the
    long waits on the broker's clock, conformance.plugin.schedule) or marked `slow`. The gates run
    the whole suite against the reference broker, these tests included, and require exit 0
    (tests/conformance/test_every_profile.py); `pytest conformance/suite` or `--pyargs
    conformance.suite` runs them all, as `amqp-conformance run` does."""
    return (item.get_closest_marker("slow") is not None or rank(item.nodeid) == FIRST  # a machine, broker-wide too
            or rank_of(item)[1] >= SUITE_LONG)


class XdistGroupIds:
    """pytest-xdist's `loadgroup` sends the tests of one `xdist_group` to one worker by renaming
    their node ids `ID@group`, which the controller reads. xdist 3.8 renames by assigning
    `item._nodeid`, which pytest 9.2 no longer reads (`Item.nodeid` comes from `item._id`): the
    groups were silently ignored and every worker started its own Spark session. This plugin
    makes the rename after xdist's own hook, where it did not take (a no-op where it did)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):
            return
        for item in items:
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")})
            if names and "@" not in item.nodeid and hasattr(item, "_id"):
                from _pytest.nodeid import NodeId  # pytest >= 9.2, where the rename needs it

                item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(XdistGroupIds(), "amqpc-xdist-group-ids")


# CLI runs whose subject is the command (exit statuses, reports, profiles, client selection), not
# the depth of the model machines, run each machine for this many examples, and a failing machine
# reports the failure it found without shrinking it: the machines' depth and their minimal
# examples are judged in-process (conformance/suite, tests/conformance/test_deviations.py,
# test_mutation.py).
CLI_MACHINE_EXAMPLES = "10"


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of an `amqp-conformance run` subprocess of the project's tests."""
    return {**os.environ, "AMQPC_MACHINE_EXAMPLES": CLI_MACHINE_EXAMPLES, "AMQPC_MACHINE_SHRINK": "0", **extra}


def strict() -> bool:
    """True when missing resources must fail the run instead of skipping (CI)."""
    return os.environ.get(STRICT_ENV) == "1"


def require(condition: object, reason: str) -> None:
    """Skip the calling test (fail it under AMQPC_STRICT=1) unless `condition` is truthy."""
    if condition:
        return
    if strict():
        pytest.fail(f"{reason} ({STRICT_ENV}=1: a missing resource is a failure)", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
