"""docs/coverage.md, the Java client's broker tests mapped to the catalogue: every rule it names is
in the catalogue and has a test in the shipped suite, and its figures are its table's."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.catalogue.rules import all_rules
from conformance.gate.collect import suite_coverage

DOC = Path(__file__).resolve().parents[2] / "docs" / "coverage.md"
TOPOLOGY = {"exchanges", "queues", "lease", "exclusivity", "e2e-bindings", "cc-bcc", "routing", "default-exchange",
            "bindings", "alternate-exchange", "direct-reply-to", "user-id", "fairness", "consumer-priorities",
            "internal-exchange"}
RULE_ID = re.compile(r"\b(?:[A-Z]+-)+[0-9][0-9A-Za-z.-]*\b")


def _rows() -> list[list[str]]:
    lines = [line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    rows = [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    return [r for r in rows if r[0] not in ("method", "---")]


def test_every_rule_the_mapping_names_exists_and_has_a_test() -> None:
    known = {r.id for r in all_rules()}
    tested = {c.rule.id for c in suite_coverage().rules if c.covered}
    named = {rule for row in _rows() if not row[3].startswith("none:") for rule in RULE_ID.findall(row[3])}
    assert named, "docs/coverage.md names no rule"
    assert sorted(named - known) == [], "rules named in docs/coverage.md that the catalogue does not have"
    assert sorted(named - tested) == [], "rules named in docs/coverage.md without a test in the suite"


def test_the_figures_are_the_tables() -> None:
    rows = _rows()
    text = DOC.read_text(encoding="utf-8")
    assert len({r[0] for r in rows}) == len(rows), "a method is listed twice"
    kinds = {k: sum(r[1] == k for r in rows) for k in ("broker", "config", "library")}
    assert f"- Test methods: {len(rows)} ({kinds['broker']} broker, {kinds['config']} config, {kinds['library']} library)." in text
    behaviour = [r for r in rows if r[1] != "library"]
    judged = [r for r in behaviour if not r[3].startswith("none:")]
    assert f"{len(judged)} of {len(behaviour)} judged by a rule" in text
    topology = [r for r in behaviour if r[2] in TOPOLOGY]
    topology_judged = [r for r in topology if not r[3].startswith("none:")]
    assert f"{len(topology_judged)} of {len(topology)} judged" in text
    assert all(r[3].startswith("none:") for r in rows if r[1] == "library"), "a library-only method mapped to a rule"
