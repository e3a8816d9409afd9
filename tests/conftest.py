"""Shared test helpers.

`require(condition, reason)`: a test that needs an external resource (the amqp-specs XML, a
RabbitMQ broker, ...) skips when it is absent, except under `AMQPC_STRICT=1` (set by
`.ci/run`), where a missing resource is a failure: CI must never pass by skipping.

Default selection: the project's own tests (under tests/) marked `slow`, `rabbitmq43` or
`rabbitmq40` are deselected unless `-m` chooses (`pytest -m slow tests/reliability`). The
filter is here, not in pyproject's addopts, so that it never touches the shipped suite
(conformance/suite): `pytest --pyargs conformance.suite` from the repository root runs the
same tests as `amqp-conformance run`.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

STRICT_ENV = "AMQPC_STRICT"
NOT_BY_DEFAULT = ("slow", "rabbitmq43", "rabbitmq40")  # markers of project tests that need `-m` to run
TESTS_DIR = Path(__file__).resolve().parent


# pytest-xdist (`make test` runs `-n 3 --dist loadgroup`: measured 538 s of pytest on a quiet 2-core machine, 612 s with -n 4): tests sharing one costly resource run in
# one worker, one after another: the Spark session (and the report site built on it); the cluster
# tests (tests/reports/test_cluster.py) in a group of their own. The tests on
# the shared RabbitMQ 3.10.8 need no group: each uses its own queues, and the one test that changes
# a global setting (test_admin.py) changes it by a millisecond and restores it.
XDIST_GROUPS = {"spark": "spark", "browser": "spark"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = next((g for marker, g in XDIST_GROUPS.items() if item.get_closest_marker(marker)), None)
        if group is not None and not item.get_closest_marker("xdist_group"):  # a module may name its own
            item.add_marker(pytest.mark.xdist_group(group))
    if config.option.markexpr:  # an explicit -m selects for itself
        return
    keep, drop = [], []
    for item in items:
        ours = Path(str(item.path)).resolve().is_relative_to(TESTS_DIR)
        (drop if ours and any(item.get_closest_marker(m) for m in NOT_BY_DEFAULT) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# CLI runs whose subject is the command (exit statuses, reports, profiles, client selection), not
# the depth of the model machines, run each machine for this many examples: the machines' depth
# is judged in-process (conformance/suite, tests/conformance/test_deviations.py, test_mutation.py).
CLI_MACHINE_EXAMPLES = "10"


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of an `amqp-conformance run` subprocess of the project's tests."""
    return {**os.environ, "AMQPC_MACHINE_EXAMPLES": CLI_MACHINE_EXAMPLES, **extra}


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
