"""The Go and Java adapters: built on first use into the cache, and shown to report what their library saw.

Each adapter plays a scenario twice: against the scripted broker as it is (the library is right:
passed) and against the same broker with one named fault of the reference engine (the broker
deviates, the library passes the deviation on to its application, the check fails as its rule):
- redelivered + `redelivered_not_set`: the redelivery comes without the flag (CL-DLV-01);
- return-then-confirm + `return_after_ack`: the confirm overtakes the return (CL-PC-04), so the
  adapter keeps the library's order of events;
- server-cancel + `no_cancel_on_queue_delete`: no basic.cancel reaches the application (CL-CCN-02).
The adapters need their Debian packages (golang-go and golang-github-rabbitmq-amqp091-go-dev;
librabbitmq-client-java, libslf4j-java and a JDK): without them these tests skip, and fail under
AMQPC_STRICT=1 (CI installs them).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.client_judge import runner
from conformance.client_judge.scenario import SCENARIOS
from conformance.drivers import build
from conformance.drivers.registry import REGISTRY, ClientUnavailable
from conformance.results.verdicts import Verdict
from tests.conftest import require

COMPILED = ("amqp091-go", "rabbitmq-java")
PROOFS = {"redelivered": "redelivered_not_set", "return-then-confirm": "return_after_ack",
          "server-cancel": "no_cancel_on_queue_delete"}


def _available(client: str) -> str | None:
    """None when the client can be built and run here, else why not."""
    try:
        REGISTRY[client].check()
    except ClientUnavailable as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def proofs() -> dict[tuple[str, str, bool], runner.ScenarioResult]:
    """(client, scenario, faulty) -> result, for every compiled client that can run here."""
    found = {}
    for client in COMPILED:
        if _available(client) is not None:
            continue
        right = runner.ClientSession(REGISTRY[client], scale=2.0)  # loaded CI machines
        # a fault is mostly seen as a wait that runs out: half the waits are plenty for it
        deviating = runner.ClientSession(REGISTRY[client], scale=0.5)
        try:
            for scenario, fault in PROOFS.items():
                sc = SCENARIOS[scenario]
                found[client, scenario, False] = right.play(sc)
                found[client, scenario, True] = deviating.play(replace(sc, broker={**sc.broker, "faults": [fault]}))
        finally:
            right.stop()
            deviating.stop()
    return found


@pytest.mark.parametrize("scenario", sorted(PROOFS))
@pytest.mark.parametrize("client", COMPILED)
def test_the_adapter_passes_where_the_library_is_right(client: str, scenario: str, proofs: dict) -> None:
    require(_available(client) is None, _available(client) or "")
    result = proofs[client, scenario, False]
    assert result.verdict == Verdict.PASSED, f"{client} {scenario}: {result.message} | {result.stderr}"
    assert result.client_version == REGISTRY[client].installed_version()


@pytest.mark.parametrize("scenario", sorted(PROOFS))
@pytest.mark.parametrize("client", COMPILED)
def test_the_adapter_fails_against_a_deviating_broker(client: str, scenario: str, proofs: dict) -> None:
    require(_available(client) is None, _available(client) or "")
    result = proofs[client, scenario, True]
    assert result.verdict == Verdict.FAILED, f"{client} {scenario} with {PROOFS[scenario]}: {result.verdict}"
    assert not result.hung and WHY[scenario] in result.message, result.message


WHY = {"redelivered": "the redelivery arrived with redelivered=False",
       "return-then-confirm": "the application saw the confirm before the return",
       "server-cancel": "no cancel callback reached the application"}


def test_a_compiled_adapter_is_built_once_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require(_available("amqp091-go") is None, _available("amqp091-go") or "")
    monkeypatch.setenv("AMQPC_ADAPTER_CACHE", str(tmp_path / "cache"))
    first = REGISTRY["amqp091-go"].prepare()
    assert first.fresh and first.directory is not None and first.directory.parent == tmp_path / "cache"
    assert first.directory.name.startswith("amqp091-go-") and Path(first.command[0]).is_file()
    again = REGISTRY["amqp091-go"].prepare()
    assert not again.fresh and again.command == first.command
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.directory.name]  # no leftovers


def test_a_missing_toolchain_is_one_line_naming_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    which = shutil.which
    monkeypatch.setattr(build.shutil, "which", lambda tool, *a, **k: None if tool in ("go", "javac") else which(tool))
    spec = REGISTRY["amqp091-go"]
    require(spec.installed_version(), "golang-github-rabbitmq-amqp091-go-dev")
    with pytest.raises(ClientUnavailable, match=r"^client 'amqp091-go' needs go \(apt-get install golang-go\)$"):
        spec.check()
    from conformance.client_judge.clients import resolve

    chosen, left_out = resolve([])
    assert "amqp091-go" not in {s.name for s in chosen} and "pika" in {s.name for s in chosen}
    assert "client 'amqp091-go' needs go (apt-get install golang-go)" in left_out
