"""JUnit XML for a run: one testcase per rule x client, the verdict as the result.

Responsibility: turn a run's test evidence, judged against its baseline, into one JUnit XML
document that CI systems (GitHub Actions, GitLab, Jenkins) display.

Rules:
- One `<testsuite>` per run (a run has one client); one `<testcase>` per rule the run
  checked, named "<RULE> [<client>]" with classname "amqp-conformance.<area>". A test that
  checks several rules appears under each of them.
- A rule's result is the worst gate outcome of its tests for that rule, in the order of
  `PRECEDENCE`: a failed test counts as failed (or `expected`, when a baseline entry matches
  that failure) only under the rules its failure saw broken (`TestEvidence.failed_rules`),
  which get a testcase even when the test was written for other rules; under its other rules
  it is `unjudged`. Unexpected `failed` → `<failure>` with what the failure said about that
  rule; `broken` → `<error>`; `expected` and `unjudged`, `non-strict`, `unimplemented`,
  `needs-admin`, `needs-cluster`, `not-applicable` → `<skipped>` with the outcome as its type; `xpass` → a pass,
  or a `<failure type="xpass">` with a strict baseline; `passed` → no child.
- The verdict is also the property `verdict` of the testcase; `<system-out>` holds, per
  test, its node id, verdict, message, the broker's close (reply), a model machine's minimal
  example (its shrunk steps and the frames of that run) and the test's frame log.
- Text that XML 1.0 cannot carry (control characters) is replaced, never dropped silently.
- A `message` attribute is the first line of what the failure said, whole: never cut inside a value.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.catalogue.rules import rule
from conformance.results.baseline import EXPECTED, XPASS, Judgement
from conformance.results.evidence import TestEvidence
from conformance.results.verdicts import UNJUDGED

# worst first: the first outcome present among a rule's tests is the rule's result
PRECEDENCE = ("failed", "broken", EXPECTED, XPASS, "non-strict", "unimplemented", "needs-admin", "needs-cluster",
              UNJUDGED, "passed", "not-applicable", "not-claimed")
_SKIPPED = {EXPECTED, UNJUDGED, "non-strict", "unimplemented", "needs-admin", "needs-cluster", "not-applicable",
            "not-claimed"}
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    client: str
    broker: str  # URL without the password, or "embedded ..."
    product: str | None = None
    version: str | None = None
    profile: str | None = None
    baseline: str | None = None
    strict_baseline: bool = False
    started: str | None = None  # ISO timestamp


def rule_outcome(outcomes: Sequence[str]) -> str:
    present = set(outcomes)
    return next((o for o in PRECEDENCE if o in present), "passed")


def _clean(text: object) -> str:
    return _NOT_XML.sub("\N{REPLACEMENT CHARACTER}", str(text))


def _system_out(tests: Sequence[TestEvidence], judgement: Judgement) -> str:
    parts = []
    for test in tests:
        lines = [f"== {test.nodeid}: {judgement.outcome(test)} ({test.duration:.3f} s)"]
        deviation = judgement.reasons.get(test.nodeid)
        if deviation is not None:
            lines.append(f"baseline: {deviation.reason}" + (f" <{deviation.link}>" if deviation.link else ""))
        if test.message:
            lines.append(f"message: {test.message}")
        if test.reply:
            lines.append(f"reply: {test.reply}")
        if test.extra.get("minimal_example"):
            lines += ["minimal example (Hypothesis):", str(test.extra["minimal_example"])]
        lines += ["frames:", test.frames or "(no frames recorded)", ""]
        parts.append("\n".join(lines))
    return "\n".join(parts)


def _testcase(suite: ET.Element, rule_id: str, tests: Sequence[TestEvidence], judgement: Judgement,
              info: RunInfo) -> str:
    outcome = rule_outcome([judgement.rule_outcome(t, rule_id) for t in tests])
    area = _area_of(rule_id, tests[0].area)
    case = ET.SubElement(suite, "testcase", classname=f"amqp-conformance.{area}", name=f"{rule_id} [{info.client}]",
                         time=f"{sum(t.duration for t in tests):.3f}")
    properties = ET.SubElement(case, "properties")
    for name, value in (("rule", rule_id), ("client", info.client), ("verdict", outcome), ("tests", str(len(tests)))):
        ET.SubElement(properties, "property", name=name, value=value)
    worst = next((t for t in tests if judgement.rule_outcome(t, rule_id) == outcome), tests[0])
    said = worst.failure_text(rule_id) if outcome in ("failed", EXPECTED) else (worst.message or "")
    message = _clean((said or outcome).splitlines()[0])
    if outcome == UNJUDGED:
        message = f"not judged: {worst.test_key} failed on {', '.join(worst.failed_rules)} first"
    if outcome == "failed" or (outcome == XPASS and info.strict_baseline):
        text = "listed in the baseline but passed" if outcome == XPASS else message
        ET.SubElement(case, "failure", type=outcome, message=text).text = _clean(said or text)
    elif outcome == "broken":
        ET.SubElement(case, "error", type="broken", message=message).text = _clean(worst.message or "")
    elif outcome in _SKIPPED:
        deviation = judgement.matched.get((worst.nodeid, rule_id))
        text = f"known deviation (baseline): {deviation.reason}" if outcome == EXPECTED and deviation else message
        ET.SubElement(case, "skipped", type=outcome, message=_clean(text))
    ET.SubElement(case, "system-out").text = _clean(_system_out(tests, judgement))
    return outcome


def _area_of(rule_id: str, default: str) -> str:
    try:
        return rule(rule_id).area
    except KeyError:
        return default


def junit_xml(tests: Sequence[TestEvidence], judgement: Judgement, info: RunInfo) -> ET.ElementTree[ET.Element]:
    """The JUnit document for a run (see the module rules)."""
    by_rule: dict[str, list[TestEvidence]] = {}
    for test in tests:
        for rule_id in dict.fromkeys((*test.rule_ids, *test.failed_rules)) or ("unknown",):
            by_rule.setdefault(rule_id, []).append(test)
    root = ET.Element("testsuites", name="amqp-conformance")
    suite = ET.SubElement(root, "testsuite", name=f"amqp-conformance [{info.client}]", hostname="",
                          timestamp=info.started or "")
    properties = ET.SubElement(suite, "properties")
    for name, value in (("run_id", info.run_id), ("broker", info.broker), ("product", info.product),
                        ("version", info.version), ("profile", info.profile), ("client", info.client),
                        ("baseline", info.baseline), ("strict_baseline", str(info.strict_baseline).lower())):
        if value is not None:
            ET.SubElement(properties, "property", name=name, value=_clean(value))
    outcomes = [_testcase(suite, rule_id, group, judgement, info) for rule_id, group in sorted(by_rule.items())]
    counts = {
        "tests": len(outcomes),
        "failures": sum(o == "failed" or (o == XPASS and info.strict_baseline) for o in outcomes),
        "errors": outcomes.count("broken"),
        "skipped": sum(o in _SKIPPED for o in outcomes),
    }
    duration = f"{sum(t.duration for t in tests):.3f}"
    for element in (root, suite):
        for key, count in counts.items():
            element.set(key, str(count))
        element.set("time", duration)
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(path: Path, tests: Sequence[TestEvidence], judgement: Judgement, info: RunInfo) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    junit_xml(tests, judgement, info).write(path, encoding="utf-8", xml_declaration=True)
    return path
