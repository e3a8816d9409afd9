"""No profile leaves a test without a verdict: the whole suite against the reference broker,
under every profile `--profile` offers, ends with no `broken` verdict.

The reference broker follows RabbitMQ 4.3, so under the other profiles some tests fail (the rules
differ: that is their verdict); what must never happen is a test the profile leaves with no verdict
(`broken`: a skip without a verdict prefix, a harness error), which would end every run of such a
broker in exit status 2. Each run is `amqp-conformance run` with the CLI tests' short machines
(tests/conftest.py `cli_env`). Measured on the 2-core machine: one run 41-85 s wall and about 16 s
of CPU alone; the six `slow` runs 652 s wall and 117 s of CPU under a load of 7. So only the spec
base `amqp-0-9-1` (the profile of every broker that is not RabbitMQ, and the one whose tests skip
the most; 89 s wall, 25 s CPU under that load) ran in `make test`, the others as `slow`. All of them
are now `gate` runs (`make test-gates`, which .ci/run runs after `make test`, three at a time), so
`make test` keeps its 5-minute goal and CI still judges every profile. `auto` on the reference
broker is rabbitmq-4.3, the profile it follows: under it the run must exit 0. `make test` runs
the shipped suite in-process (conformance/suite) but for its long tests (the model machines, long
waits on the broker's clock: tests/conftest.py `long_suite_test`); the last test here runs the whole
suite as `make run` does, machines at full depth, and requires exit 0.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.catalogue.profiles import AUTO, COMPATIBLE, SPEC, choices
from conformance.catalogue.rules import CAPABILITIES, PROFILES
from conformance.results.parts import read_table
from conformance.results.verdicts import Verdict
from tests.conformance.test_cli_run import cli

FOLLOWED = "rabbitmq-4.3"  # the profile the reference broker follows (`auto` picks it)
EVERY_CAPABILITY = f"{SPEC}+every capability"  # the spec base judging every extension by rabbitmq-4.3
RUNS: dict[str, list[str]] = {
    **{profile: ["--profile", profile] for profile in PROFILES},
    COMPATIBLE: ["--profile", COMPATIBLE],
    EVERY_CAPABILITY: ["--profile", SPEC, *(arg for c in CAPABILITIES for arg in ("--capability", c))],
}


def test_the_runs_cover_every_profile_choice() -> None:
    assert FOLLOWED in RUNS
    offered = {c for c in choices() if c != AUTO and not c.endswith(":VERSION")}
    assert offered <= set(RUNS), offered - set(RUNS)


@pytest.mark.gate
@pytest.mark.parametrize("name", list(RUNS))
def test_no_profile_leaves_a_test_without_a_verdict(name: str, tmp_path: Path) -> None:
    run = cli(tmp_path, *RUNS[name], "--run-id", "every-profile", timeout=900)
    if name == FOLLOWED:  # the reference broker's own rules: nothing may fail
        assert run.status == 0, run.out[-6000:] + run.err
    assert run.status in (0, 1), run.out[-3000:] + run.err  # 2 would be a broken verdict, 3 a broker gone
    (record,) = read_table(run.dir / "results", "runs").to_pylist()
    tests = read_table(run.dir / "results", "tests").to_pylist()
    assert record["tests"] == len(tests) > 250, (record["tests"], len(tests))  # the whole suite ran
    assert {t["verdict"] for t in tests} <= {v.value for v in Verdict}
    broken = [f"{t['test_id']}: {t['message']}" for t in tests if t["verdict"] == Verdict.BROKEN]
    assert broken == [], "\n".join(broken)


@pytest.mark.gate
def test_the_whole_suite_passes_the_reference_broker_at_full_depth(tmp_path: Path) -> None:
    """`make run`'s suite as a user runs it: the model machines at their full depth, shrinking on,
    several workers, and every test that a bare `pytest` (`make test`) leaves out
    (tests/conftest.py `long_suite_test`) among them; exit 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMQPC_MACHINE_")}
    run = cli(tmp_path, "--jobs", "4", "--run-id", "full-depth", env=env, timeout=900)
    assert run.status == 0, run.out[-6000:] + run.err
    tests = {t["test_id"]: t["verdict"] for t in read_table(run.dir / "results", "tests").to_pylist()}
    long = [t for t in tests if "test_machine_" in t or "ends_after_30_s" in t]
    assert len(long) >= 9 and {tests[t] for t in long} == {Verdict.PASSED.value}, long
