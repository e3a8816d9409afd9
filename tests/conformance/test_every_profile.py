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
broker is rabbitmq-4.3, which `make test` runs in-process (conformance/suite).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.catalogue.profiles import AUTO, COMPATIBLE, SPEC, choices
from conformance.catalogue.rules import CAPABILITIES, PROFILES
from conformance.results.records import read_table
from conformance.results.verdicts import Verdict
from tests.conformance.test_cli_run import cli

EVERY_CAPABILITY = f"{SPEC}+every capability"  # the spec base judging every extension by rabbitmq-4.3
RUNS: dict[str, list[str]] = {
    **{profile: ["--profile", profile] for profile in PROFILES},
    COMPATIBLE: ["--profile", COMPATIBLE],
    EVERY_CAPABILITY: ["--profile", SPEC, *(arg for c in CAPABILITIES for arg in ("--capability", c))],
}


def test_the_runs_cover_every_profile_choice() -> None:
    offered = {c for c in choices() if c != AUTO and not c.endswith(":VERSION")}
    assert offered <= set(RUNS), offered - set(RUNS)


@pytest.mark.gate
@pytest.mark.parametrize("name", list(RUNS))
def test_no_profile_leaves_a_test_without_a_verdict(name: str, tmp_path: Path) -> None:
    run = cli(tmp_path, *RUNS[name], "--run-id", "every-profile", timeout=900)
    assert run.status in (0, 1), run.out[-3000:] + run.err  # 2 would be a broken verdict, 3 a broker gone
    (record,) = read_table(run.dir / "results", "runs").to_pylist()
    tests = read_table(run.dir / "results", "tests").to_pylist()
    assert record["tests"] == len(tests) > 250, (record["tests"], len(tests))  # the whole suite ran
    assert {t["verdict"] for t in tests} <= {v.value for v in Verdict}
    broken = [f"{t['test_id']}: {t['message']}" for t in tests if t["verdict"] == Verdict.BROKEN]
    assert broken == [], "\n".join(broken)
