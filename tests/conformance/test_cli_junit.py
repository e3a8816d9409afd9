"""JUnit XML (conformance/results/junit.py): one testcase per rule x client, the verdict as the result."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from conformance.plugin.evidence import TestEvidence
from conformance.results.baseline import judge as judge_run
from conformance.results.baseline import parse_baseline
from conformance.results.junit import RunInfo, rule_outcome, write_junit

BASELINE = parse_baseline('''
[[deviation]]
rule = "ACK-04"
reason = "known: double ack is ignored"
link = "https://example.org/bug/4"
[[deviation]]
rule = "QOS-01"
reason = "fixed since"
''')


def sample_run() -> list[TestEvidence]:
    def make(name: str, verdict: str, rules: tuple[str, ...], area: str, **extra: object) -> TestEvidence:
        return TestEvidence(f"conformance/suite/test_{area}.py::{name}", verdict, area, rules, duration=0.5,
                            **extra)  # type: ignore[arg-type]

    return [
        make("t_pass", "passed", ("ACK-03",), "ack", frames="+   0.000s c1 out connection.start-ok"),
        make("t_fail", "failed", ("ACK-03", "ACK-05"), "ack", message="AssertionError: got 406\nmore",
             reply="channel 406 (60/80) PRECONDITION_FAILED - unknown delivery tag 5", frames="+0.0 c1 in channel.close"),
        make("t_expected", "failed", ("ACK-04",), "ack", message="ignored"),
        make("t_broken", "broken", ("CCN-01",), "cancel", message="HarnessError: \x00boom"),
        make("t_na", "not-applicable", ("TMO-3x-1",), "timeout", message="TMO-3x-1 on rabbitmq-4.3"),
        make("t_xpass", "passed", ("QOS-01",), "qos"),
    ]


def run_info(strict: bool = False) -> RunInfo:
    return RunInfo("run-1", "raw", "amqp://guest@h:5672/", "RabbitMQ", "3.10.8", "rabbitmq-3.10", "b.toml", strict,
                   "2026-01-01T00:00:00")


def parse(path: Path) -> ET.Element:
    return ET.parse(path).getroot()


def cases(root: ET.Element) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in root.iter("testcase")}


def test_junit_one_testcase_per_rule_and_client(tmp_path: Path) -> None:
    run = sample_run()
    root = parse(write_junit(tmp_path / "j" / "junit.xml", run, judge_run(run, BASELINE, "rabbitmq-3.10"), run_info()))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    found = cases(root)
    assert sorted(found) == ["ACK-03 [raw]", "ACK-04 [raw]", "ACK-05 [raw]", "CCN-01 [raw]", "QOS-01 [raw]",
                             "TMO-3x-1 [raw]"]
    assert found["ACK-03 [raw]"].get("classname") == "amqp-conformance.ack"
    assert found["CCN-01 [raw]"].get("classname") == "amqp-conformance.cancel"
    verdicts = {name: case.find("properties/property[@name='verdict']").get("value")  # type: ignore[union-attr]
                for name, case in found.items()}
    assert verdicts == {"ACK-03 [raw]": "failed", "ACK-04 [raw]": "expected", "ACK-05 [raw]": "failed",
                        "CCN-01 [raw]": "broken", "QOS-01 [raw]": "xpass", "TMO-3x-1 [raw]": "not-applicable"}
    counts = {key: suite.get(key) for key in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": "6", "failures": "2", "errors": "1", "skipped": "2"}
    assert {key: root.get(key) for key in counts} == counts
    properties = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert properties["run_id"] == "run-1" and properties["profile"] == "rabbitmq-3.10"
    assert properties["version"] == "3.10.8" and properties["baseline"] == "b.toml"


def test_junit_results_and_evidence(tmp_path: Path) -> None:
    run = sample_run()
    found = cases(parse(write_junit(tmp_path / "junit.xml", run, judge_run(run, BASELINE, None), run_info())))
    failure = found["ACK-03 [raw]"].find("failure")
    assert failure is not None and failure.get("type") == "failed"
    assert failure.get("message") == "AssertionError: got 406"
    out = found["ACK-03 [raw]"].findtext("system-out") or ""
    assert "t_pass: passed" in out and "t_fail: failed" in out  # both tests of the rule, with evidence
    assert "reply: channel 406 (60/80) PRECONDITION_FAILED" in out and "connection.start-ok" in out
    skipped = found["ACK-04 [raw]"].find("skipped")
    assert skipped is not None and skipped.get("type") == "expected"
    assert skipped.get("message") == "known deviation (baseline): known: double ack is ignored"
    assert "baseline: known: double ack is ignored <https://example.org/bug/4>" in (
        found["ACK-04 [raw]"].findtext("system-out") or "")
    error = found["CCN-01 [raw]"].find("error")
    assert error is not None and error.get("type") == "broken" and "\ufffdboom" in (error.text or "")
    assert found["QOS-01 [raw]"].find("failure") is None  # XPASS passes without --strict-baseline
    assert found["TMO-3x-1 [raw]"].find("skipped") is not None


def test_junit_strict_baseline_fails_an_xpass(tmp_path: Path) -> None:
    run = sample_run()
    found = cases(parse(write_junit(tmp_path / "junit.xml", run, judge_run(run, BASELINE, None), run_info(True))))
    failure = found["QOS-01 [raw]"].find("failure")
    assert failure is not None and failure.get("type") == "xpass"


def test_rule_outcome_precedence() -> None:
    assert rule_outcome(["passed", "failed", "broken"]) == "failed"
    assert rule_outcome(["passed", "not-applicable"]) == "passed"
    assert rule_outcome(["not-applicable"]) == "not-applicable"
    assert rule_outcome(["expected", "passed"]) == "expected"
    # a rule passes only when all its checks ran: one that needs --broker-admin leaves it not run
    assert rule_outcome(["passed", "needs-admin"]) == "needs-admin"
    assert rule_outcome(["needs-admin", "failed"]) == "failed"
