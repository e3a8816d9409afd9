"""`amqp-conformance clients` as a CI gate: `--adapter` for an unregistered adapter, JUnit, baselines, exit statuses.

The unregistered adapter is the faulty py-amqp of tests/client_judge/faulty_adapter.py, started by
its command line as a library's maintainers would start theirs; its name comes from its hello.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.cli import main

FAULTY = Path(__file__).with_name("faulty_adapter.py")
ADAPTER = f"{sys.executable} {FAULTY} no-redelivered"
SCENARIOS = ["--scenario", "redelivered", "--scenario", "server-cancel"]


def _cases(junit: Path) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in ET.parse(junit).getroot().iter("testcase")}


def test_an_unregistered_adapter_is_judged_with_junit_per_client_and_scenario(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["clients", "--adapter", ADAPTER, *SCENARIOS, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 1, out  # the faulty client drops the redelivered flag: an unexpected failure
    assert "faulty" in out and "redelivered=False" in out and "exit status 1" in out
    cases = _cases(tmp_path / "junit.xml")
    assert set(cases) == {"redelivered [faulty]", "server-cancel [faulty]"}
    failure = cases["redelivered [faulty]"].find("failure")
    assert failure is not None and "redelivered=False" in (failure.get("message") or "")
    assert cases["server-cancel [faulty]"].find("failure") is None
    system_out = cases["redelivered [faulty]"].findtext("system-out") or ""
    assert "basic.reject" in system_out and "out = sent by the client" in system_out


def _baseline(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "clients-baseline.toml"
    path.write_text(body, encoding="utf-8")
    return path


def test_a_baseline_entry_accepts_the_failure_and_a_passing_entry_is_an_xpass(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    baseline = _baseline(tmp_path, '[[deviation]]\nrule = "CL-DLV-01"\nreason = "the faulty client drops it"\n'
                                   'tests = ["redelivered[faulty]"]\n\n'
                                   '[[deviation]]\nrule = "CL-CCN-02"\nreason = "passes: an XPASS"\n'
                                   'tests = ["server-cancel"]\n')
    args = ["clients", "--adapter", ADAPTER, *SCENARIOS, "--out", str(tmp_path), "--baseline", str(baseline)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "XPASS CL-CCN-02 (server-cancel)" in out and "1 expected failure(s), 1 XPASS" in out
    cases = _cases(tmp_path / "junit.xml")
    skipped = cases["redelivered [faulty]"].find("skipped")
    assert skipped is not None and skipped.get("type") == "expected"
    assert main([*args, "--strict-baseline"]) == 1
    strict = _cases(tmp_path / "junit.xml")["server-cancel [faulty]"].find("failure")
    assert strict is not None and strict.get("type") == "xpass"


def test_a_baseline_entry_for_another_rule_or_client_does_not_accept_the_failure(tmp_path: Path) -> None:
    other_rule = _baseline(tmp_path, '[[deviation]]\nrule = "CL-DLV-02"\nreason = "another rule"\n')
    assert main(["clients", "--adapter", ADAPTER, "--scenario", "redelivered", "--out", str(tmp_path),
                 "--baseline", str(other_rule)]) == 1
    other_client = _baseline(tmp_path, '[[deviation]]\nrule = "CL-DLV-01"\nreason = "x"\ntests = ["redelivered[pika]"]\n')
    assert main(["clients", "--adapter", ADAPTER, "--scenario", "redelivered", "--out", str(tmp_path),
                 "--baseline", str(other_client)]) == 1


@pytest.mark.parametrize(("argv", "says"), [
    (["clients", "--adapter", f"{sys.executable} -c pass"], "did not start"),
    (["clients", "--adapter", "/no/such/adapter"], "cannot start /no/such/adapter"),
    (["clients", "--strict-baseline", "--adapter", ADAPTER], "--strict-baseline needs --baseline FILE"),
])
def test_clients_gate_usage_errors_are_one_line_and_exit_4(argv: list[str], says: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
