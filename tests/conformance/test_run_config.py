"""A run handed its configuration by `amqp-conformance run` (conformance/run/config.py, `GivenRun`):
the plugin, and each pytest-xdist worker through the controller, parses and probes nothing again."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

PROFILE_OF_THE_TARGET = """
import pytest

@pytest.mark.rules("ACK-03")
def test_profile(target):
    assert target.base_profile.base == "rabbitmq-4.0" and target.url.endswith(":1/")
"""


@pytest.mark.parametrize("workers", [[], ["-p", "xdist", "-n", "2"]], ids=["one-process", "two-workers"])
def test_a_run_handed_its_configuration_parses_and_probes_nothing_again(pytester: pytest.Pytester,
                                                                       workers: list[str]) -> None:
    """`amqp-conformance run` probes the broker once and hands the plugin its `RunConfig`: the plugin
    (and each pytest-xdist worker, through the controller) takes the URL and server-properties from
    it. Nothing listens at port 1: a second probe would end the run as unreachable (exit 3)."""
    from conformance.plugin.session import GivenRun
    from conformance.run.config import from_values
    from conformance.run.options import RUN_OPTIONS

    defaults = {o.flag[2:].replace("-", "_"): o.kwargs()["default"] for o in RUN_OPTIONS}
    config = from_values(lambda dest: "amqp://guest:guest@127.0.0.1:1/" if dest == "broker_url" else defaults[dest])
    config = config.probed({"product": "RabbitMQ", "version": "4.0.5"})
    pytester.makepyfile(test_profile=PROFILE_OF_THE_TARGET)
    run = pytester.runpytest_inprocess(*workers, "-p", "no:randomly", plugins=[GivenRun(config)])
    assert run.ret == 0, run.stdout.str()
    run.assert_outcomes(passed=1)
