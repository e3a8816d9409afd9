"""`amqp-conformance clients` as a CI gate: its results judged against a baseline, JUnit XML, the exit status.

Responsibility: turn each `ScenarioResult` into the gate's `TestEvidence` (test id
``clients::<scenario>[<client>]``: the client is the scenario's parameter, so baseline patterns
keep their meaning; the scenario's rules; a failed scenario saw every one of its rules
broken, with its message as the failure text), judge them with the run's baseline
(`conformance.results.baseline.judge`, the same semantics as `run`), write JUnit XML with one
testcase per (client, scenario), and give the exit status.

Rules:
- A baseline entry matches a failure, not a scenario: its `rule` must be one of the failed
  scenario's rules, its `tests` patterns name ``scenario[client]`` (or ``scenario`` for every
  client), its `message` regex must be found in the failure text. A covered scenario that
  passes is an XPASS (never for an `intermittent` entry); `--strict-baseline` fails on it.
- Exit status as for `run` (docs/design.md decision 8): 2 when a scenario is `broken` (the harness or
  an adapter that would not start or build), else 1 for an unexpected failure (or an XPASS with
  a strict baseline), else 0.
- JUnit: one `<testsuite>` per client (its version and language as properties), one
  `<testcase name="<scenario> [<client>]" classname="amqp-conformance.clients.<client>">`;
  unexpected `failed` → `<failure>`, `broken` → `<error>`, `expected` and `not-applicable` →
  `<skipped>` with the outcome as type, `xpass` → a pass (a `<failure type="xpass">` when
  strict). `<system-out>` holds the rules, message, adapter stderr and the frame log (directions
  as the client sees them: out = sent by the client).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from conformance.client_judge.runner import ScenarioResult
from conformance.results.baseline import EXPECTED, XPASS, Baseline, Judgement, judge
from conformance.results.evidence import TestEvidence, frame_log
from conformance.results.junit import _clean as xml_text  # one definition of what XML 1.0 cannot carry
from conformance.results.records import CLIENT_PROFILE
from conformance.results.verdicts import Verdict
from conformance.results.verdicts import exit_status as kernel_exit_status

FRAME_LINES = 400
_SKIPPED = {EXPECTED, "not-applicable"}


def test_id(client: str, scenario: str) -> str:
    """A client scenario's id for baseline patterns and JUnit: "clients::scenario[client]"."""
    return f"clients::{scenario}[{client}]"


def evidence(result: ScenarioResult) -> TestEvidence:
    failed = result.verdict == Verdict.FAILED
    frames = [replace(f, direction="in" if f.direction == "out" else "out") for f in result.frames]
    return TestEvidence(test_id(result.client, result.scenario.id), str(result.verdict), "client",
                        tuple(result.scenario.rules), result.message or None, None,
                        frame_log(frames, FRAME_LINES) if frames else "", result.duration,
                        {"stderr": result.stderr, "client_version": result.client_version, "client": result.client,
                         "scenario": result.scenario.id},
                        {rule: result.message for rule in result.scenario.rules} if failed else {})


def judge_results(found: dict[str, list[ScenarioResult]], baseline: Baseline | None) -> tuple[list[TestEvidence], Judgement]:
    tests = [evidence(r) for results in found.values() for r in results]
    return tests, judge(tests, baseline, CLIENT_PROFILE)


def exit_status(tests: Sequence[TestEvidence], judged: Judgement, strict: bool) -> int:
    return kernel_exit_status(outcomes={judged.outcome(t) for t in tests}, strict=strict, xpasses=bool(judged.xpasses))[0]


def _system_out(test: TestEvidence, judged: Judgement) -> str:
    lines = [f"== {test.nodeid}: {judged.outcome(test)} ({test.duration:.3f} s)", f"rules: {' '.join(test.rule_ids)}"]
    deviation = judged.reasons.get(test.nodeid)
    if deviation is not None:
        lines.append(f"baseline: {deviation.reason}" + (f" <{deviation.link}>" if deviation.link else ""))
    if test.message:
        lines.append(f"message: {test.message}")
    stderr = test.extra.get("stderr")
    if stderr and test.verdict != "passed":
        lines.append(f"adapter stderr: {stderr}")
    lines += ["frames (out = sent by the client):", test.frames or "(no frames recorded)"]
    return "\n".join(lines)


def _testcase(suite: ET.Element, client: str, test: TestEvidence, judged: Judgement, strict: bool) -> str:
    outcome = judged.outcome(test)
    scenario = str(test.extra["scenario"])
    case = ET.SubElement(suite, "testcase", classname=f"amqp-conformance.clients.{client}",
                         name=f"{scenario} [{client}]", time=f"{test.duration:.3f}")
    properties = ET.SubElement(case, "properties")
    for name, value in (("rules", " ".join(test.rule_ids)), ("client", client), ("verdict", outcome)):
        ET.SubElement(properties, "property", name=name, value=value)
    first = xml_text((test.message or outcome).splitlines()[0] if (test.message or outcome) else outcome)
    if outcome == "failed" or (outcome == XPASS and strict):
        text = "listed in the baseline but passed" if outcome == XPASS else first
        ET.SubElement(case, "failure", type=outcome, message=text[:500]).text = xml_text(test.message or text)
    elif outcome == "broken":
        ET.SubElement(case, "error", type="broken", message=first[:500]).text = xml_text(test.message or "")
    elif outcome in _SKIPPED:
        deviation = judged.reasons.get(test.nodeid)
        text = f"known deviation (baseline): {deviation.reason}" if outcome == EXPECTED and deviation else first
        ET.SubElement(case, "skipped", type=outcome, message=xml_text(text)[:500])
    ET.SubElement(case, "system-out").text = xml_text(_system_out(test, judged))
    return outcome


def junit_xml(tests: Sequence[TestEvidence], judged: Judgement, *, run_id: str, baseline: str | None,
              strict: bool, started: str, languages: dict[str, str]) -> ET.ElementTree[ET.Element]:
    root = ET.Element("testsuites", name="amqp-conformance clients")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    by_client: dict[str, list[TestEvidence]] = {}
    for test in tests:
        by_client.setdefault(str(test.extra["client"]), []).append(test)
    for client, group in by_client.items():
        suite = ET.SubElement(root, "testsuite", name=f"amqp-conformance clients [{client}]", hostname="",
                              timestamp=started)
        properties = ET.SubElement(suite, "properties")
        for name, value in (("run_id", f"{run_id}-{client}"), ("client", client),
                            ("client_version", str(group[0].extra.get("client_version", ""))),
                            ("language", languages.get(client, "")), ("baseline", baseline),
                            ("strict_baseline", str(strict).lower())):
            if value is not None:
                ET.SubElement(properties, "property", name=name, value=xml_text(value))
        outcomes = [_testcase(suite, client, t, judged, strict) for t in group]
        counts = {"tests": len(outcomes), "failures": sum(o == "failed" or (o == XPASS and strict) for o in outcomes),
                  "errors": outcomes.count("broken"), "skipped": sum(o in _SKIPPED for o in outcomes)}
        for key, count in counts.items():
            suite.set(key, str(count))
            totals[key] += count
        suite.set("time", f"{sum(t.duration for t in group):.3f}")
    for key, count in totals.items():
        root.set(key, str(count))
    root.set("time", f"{sum(t.duration for t in tests):.3f}")
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(path: Path, tests: Sequence[TestEvidence], judged: Judgement, **info: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    junit_xml(tests, judged, **info).write(path, encoding="utf-8", xml_declaration=True)  # type: ignore[arg-type]
    return path


def baseline_lines(baseline: Baseline | None, judged: Judgement, tests: Sequence[TestEvidence]) -> list[str]:
    """The console's baseline lines: each XPASS, and the counts."""
    if baseline is None:
        return []
    lines = [f"XPASS {d.describe(pattern)}: listed in {baseline.source} but passed ({len(ids)} scenario(s)); "
             "remove the entry to tighten the baseline" for d, pattern, ids in judged.xpasses]
    expected = sum(judged.outcome(t) == EXPECTED for t in tests)
    lines.append(f"baseline {baseline.source}: {expected} expected failure(s), {len(judged.xpasses)} XPASS")
    return lines
