"""Every client check fails against a client that deviates from its rule, and passes without the fault.

The faulty client is py-amqp with one named fault (tests/client_judge/faulty_adapter.py), played
through the adapter protocol like any client; the same scenario passes on the unchanged
py-amqp (the smoke test and `amqp-conformance clients` show that), so each fault is caught by
exactly the check of its rule. Checks that some real library already fails (pika's missing
close-ok, the flow-ok, channel_max, ...) are shown failing in docs/findings-clients.md.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from conformance.client_judge import runner
from conformance.drivers.registry import ClientSpec
from conformance.results.verdicts import Verdict
from tests.client_judge.faulty_adapter import FAULTS


class FaultySpec(ClientSpec):
    def installed_version(self) -> str | None:
        return "faulty"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "tests.client_judge.faulty_adapter", self.package]


@pytest.fixture(scope="module")
def verdicts() -> dict[str, runner.ScenarioResult]:
    """Each faulty client plays its scenario, the clean one plays them all."""
    plays = {fault: (FaultySpec(fault, "python", fault, ""), [scenario]) for fault, scenario in FAULTS.items()}
    plays["clean"] = (FaultySpec("clean", "python", "", ""), sorted(set(FAULTS.values())))
    results: dict[str, runner.ScenarioResult] = {}
    with ThreadPoolExecutor(max_workers=8) as pool:  # the adapters mostly wait: cheap to run side by side
        # a fault is mostly seen as a wait that runs out: half the waits are plenty for it
        futures = {name: pool.submit(runner.run_client, spec, runner.select(scenarios),
                                     scale=1.0 if name == "clean" else 0.5)
                   for name, (spec, scenarios) in plays.items()}
        for name, future in futures.items():
            for result in future.result():
                results[f"{name}:{result.scenario.id}"] = result
    return results


@pytest.mark.parametrize(("fault", "scenario"), sorted(FAULTS.items()))
def test_the_check_fails_against_the_faulty_client(fault: str, scenario: str,
                                                    verdicts: dict[str, runner.ScenarioResult]) -> None:
    result = verdicts[f"{fault}:{scenario}"]
    assert result.verdict == Verdict.FAILED, f"{fault}: {scenario} {result.verdict} {result.message}"
    assert set(result.scenario.rules) & set(runner.select([scenario])[0].rules)


@pytest.mark.parametrize("scenario", sorted(set(FAULTS.values())))
def test_the_check_passes_without_the_fault(scenario: str, verdicts: dict[str, runner.ScenarioResult]) -> None:
    result = verdicts[f"clean:{scenario}"]
    assert result.verdict == Verdict.PASSED, f"{scenario}: {result.message}"
