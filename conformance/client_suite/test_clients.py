"""The pytest entry point of the client-side scenarios: every client x every scenario as a test.

Run: ``pytest --pyargs conformance.client_suite.test_clients`` (``-k pika``, ``-k "amqplib and
cancel"`` select; ids are ``<client>-<scenario>``). A passed scenario passes, a failed one fails
with the judge's message and the adapter's stderr, a not-applicable one skips with its reason,
a client that is not installed skips, and a broken one (the harness's fault) errors.
`amqp-conformance clients` runs the same scenarios and also writes the results lake and report.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conformance.client_judge import runner
from conformance.client_judge.scenario import SCENARIOS
from conformance.drivers.registry import REGISTRY
from conformance.results.verdicts import SKIP_PREFIX, HarnessError, Verdict


@pytest.fixture(scope="module")
def client_sessions() -> Iterator[dict[str, runner.ClientSession]]:
    sessions: dict[str, runner.ClientSession] = {}
    yield sessions
    for session in sessions.values():
        session.stop()


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("client", list(REGISTRY))
def test_client_scenario(client: str, scenario: str, client_sessions: dict[str, runner.ClientSession]) -> None:
    spec = REGISTRY[client]
    if spec.installed_version() is None:
        pytest.skip(f"client {client} is not installed ({spec.install_hint})")
    session = client_sessions.setdefault(client, runner.ClientSession(spec))
    result = session.play(SCENARIOS[scenario])
    if result.verdict == Verdict.NOT_APPLICABLE:
        pytest.skip(SKIP_PREFIX[Verdict.NOT_APPLICABLE] + result.message)
    if result.verdict == Verdict.BROKEN:
        raise HarnessError(result.message)
    if result.verdict == Verdict.FAILED:
        pytest.fail(f"{client} {result.client_version}, {scenario} ({', '.join(result.scenario.rules)}): "
                    f"{result.message}\nadapter stderr: {result.stderr}", pytrace=False)
