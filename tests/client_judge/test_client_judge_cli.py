"""`amqp-conformance clients`: usage errors, a hanging client, results in the lake, the adapter protocol."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from codec import BasicProperties
from conformance.cli import main
from conformance.client_judge import runner
from conformance.drivers import interface as di
from conformance.drivers import wire_json
from conformance.drivers.registry import REGISTRY, ClientSpec
from conformance.results.parts import read_table
from conformance.results.verdicts import Verdict
from tests.conftest import require

HANG = Path(__file__).with_name("hanging_adapter.py")


@pytest.mark.parametrize(("argv", "says"), [
    (["clients", "--client", "nope"], "unknown client 'nope'; known clients: pika"),
    (["clients", "--scenario", "nope"], "unknown scenario(s): nope"),
])
def test_clients_usage_errors_are_one_line_and_exit_4(argv: list[str], says: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and says in captured.err


def test_a_client_that_is_not_installed_is_one_line_and_exit_4(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(REGISTRY, "ghost", ClientSpec("ghost", "python", "no-such-distribution-xyz", "pip install x"))
    assert main(["clients", "--client", "ghost"]) == 4
    assert capsys.readouterr().err == ("amqp-conformance: error: client 'ghost' is not installed "
                                       "(pip install x)\n")


class _Hanging(ClientSpec):
    def installed_version(self) -> str | None:
        return "0"

    def command(self) -> list[str]:
        return [sys.executable, str(HANG)]


def test_a_hanging_client_gets_a_verdict_in_bounded_time() -> None:
    spec = _Hanging("hang", "python", "hang", "")
    t0 = time.monotonic()
    results = runner.run_client(spec, runner.select(["capabilities-advertised", "server-cancel"]), scale=0.2)
    assert time.monotonic() - t0 < 20  # the adapter is restarted for the second scenario
    assert [r.verdict for r in results] == [Verdict.FAILED, Verdict.FAILED]
    assert all("the client hung" in r.message and "connect" in r.message for r in results)


def test_clients_run_writes_one_run_per_client_with_its_version(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    require(REGISTRY["amqp"].installed_version(), "py-amqp")
    status = main(["clients", "--client", "amqp", "--scenario", "server-cancel", "--scenario", "blocked-unblocked",
                   "--out", str(tmp_path), "--run-id", "t1"])
    assert status == 1  # py-amqp replaces the blocked reason (docs/findings-clients.md)
    out = capsys.readouterr().out
    assert "amqp" in out and "blocked-unblocked" in out
    runs = read_table(tmp_path / "results", "runs").to_pylist()
    assert [(r["run_id"], r["client"], r["client_version"], r["profile"]) for r in runs] == [
        ("t1-amqp", "amqp", REGISTRY["amqp"].installed_version(), "client-side")]
    tests = {t["test_id"]: t for t in read_table(tmp_path / "results", "tests").to_pylist()}
    assert tests["clients/amqp::server-cancel"]["verdict"] == "passed"
    assert tests["clients/amqp::blocked-unblocked"]["verdict"] == "failed"
    assert tests["clients/amqp::blocked-unblocked"]["rule_ids"] == ["CL-FLOW-01"]
    frames = read_table(tmp_path / "results", "frames").to_pylist()
    sent = [f for f in frames if f["test_id"] == "clients/amqp::server-cancel" and f["method"] == "basic.cancel"]
    assert [f["direction"] for f in sent] == ["in"]  # seen from the client: the broker's cancel came in


def test_adapter_protocol_round_trips_events_and_errors() -> None:
    delivery = di.Delivery(1, 7, True, "ex", "rk", b"\x00body", BasicProperties(headers={"b": b"\x01", "n": {"x": 1}},
                                                                                 message_type="t"), "ctag")
    events: list[di.Event] = [di.Delivered(delivery), di.BrokerCancelled(1, "ctag"), di.Confirmed(2, 3, False, True),
                              di.Returned(1, None, "", "", "q", b"r"), di.ConnectionClosedEvent(320, "forced")]
    for event in events:
        assert wire_json.event_from_json(wire_json.loads(wire_json.dumps(wire_json.event_to_json(event)))) == event
    closed = wire_json.error_from_json(wire_json.loads(wire_json.dumps(wire_json.error_to_json(
        di.ChannelClosed("channel", 404, "NOT_FOUND - no queue", 50, 10)))))
    assert isinstance(closed, di.ChannelClosed) and (closed.code, closed.class_id) == (404, 50)
    other = wire_json.error_from_json({"kind": "exception", "type": "KeyError", "text": "'ctag'"})
    assert isinstance(other, wire_json.LibraryError) and other.library_error == "KeyError"
    assert isinstance(wire_json.event_from_json({"event": "nonsense"}), di.ClientFailure)


def test_results_record_every_scenario_with_its_rules(tmp_path: Path) -> None:
    from conformance.client_judge.record import write_client_run
    from conformance.client_judge.scenario import SCENARIOS
    from conformance.results.client_runs import language_of

    sc = SCENARIOS["redelivered"]
    result = runner.ScenarioResult("x", "1.0", sc, Verdict.NOT_APPLICABLE, "why", datetime.now(UTC), 0.0)
    run_id = write_client_run(tmp_path, "b", "x", [result], datetime.now(UTC), 1.0, 0, "rust")
    tests = read_table(tmp_path, "tests", run_id).to_pylist()
    assert [(t["rule_ids"], t["verdict"], t["outcome"], t["area"]) for t in tests] == [
        (["CL-DLV-01"], "not-applicable", "skipped", "client")]
    [run] = read_table(tmp_path, "runs", run_id).to_pylist()
    assert language_of(run["profile_detail"]) == "rust"  # the report groups clients by it


def test_the_pytest_entry_point_runs_scenarios_as_tests(tmp_path: Path) -> None:
    require(REGISTRY["amqp"].installed_version(), "py-amqp")
    import subprocess

    done = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "conformance.client_suite.test_clients", "-q",
                           "-p", "no:cacheprovider", "-k", "amqp-server-cancel or amqp-blocked-unblocked"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert "1 failed, 1 passed" in done.stdout, done.stdout[-2000:]
    assert "CL-FLOW-01" in done.stdout and "connection blocked, see broker logs" in done.stdout
