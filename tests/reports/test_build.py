"""The whole pipeline on a synthetic lake: Spark jobs, audit, collection and the written site."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conformance.catalogue.rules import all_rules
from reports.synthetic import TARGETS
from tests.reports.conftest import SMALL_LAKE, Lake, Site

pytestmark = pytest.mark.spark


def test_build_summary_matches_the_lake(site: Site, lake: Lake) -> None:
    summary = json.loads((site.root / "summary.json").read_text())
    assert summary["runs"] == SMALL_LAKE.runs and summary["tests"] == lake.stats.tests
    assert len(summary["targets"]) == len(TARGETS)
    assert {t["run_id"] for t in summary["targets"]} == {f"run-{i:04d}" for i in range(4, 8)}  # the latest runs
    expected = lake.stats.expected
    assert summary["violations"]["warnings"] == expected["confirm-missing"]
    assert summary["violations"]["errors"] == sum(expected.values()) - expected["confirm-missing"]
    shown = [v for v in site.data.violations if v.severity == "error"]
    assert shown and all(any(f.seq == v.seq for f in v.window) for v in shown)  # evidence: the frame window
    assert (site.root / "audit.html").read_text().count('<details class="evidence">') == len(site.data.violations)
    for target in summary["targets"]:
        assert ET.parse(site.root / target["badge"]).getroot().tag.endswith("svg")


def test_build_matrix_and_rule_pages(site: Site) -> None:
    data = site.data
    assert len(data.matrix) == len(all_rules())
    assert all(len(cells) == len(TARGETS) for cells in data.matrix.values())
    html = (site.root / "matrix.html").read_text()
    assert html.count("<tr data-rule=") == len(all_rules())
    for rule in all_rules():
        assert (site.root / "rules" / f"{rule.id}.html").is_file()
    regression = [c for c in data.regressions if c.rule_id == "ACK-01"]  # injected into a target's last run
    assert regression and regression[0].verdict_b == "failed"


def test_build_failing_tests_have_pages_and_frame_logs(site: Site) -> None:
    failing = site.data.failing
    assert failing and all(t.verdict in ("failed", "broken") for t in failing)
    with_frames = [t for t in failing if t.frames]
    assert with_frames, "the synthetic lake should give some failing test a frame log"
    for test in failing:
        assert (site.root / "tests" / f"{test.page}.html").is_file()
    for test in with_frames:
        script = (site.root / "frames" / f"{test.page}.js").read_text()
        payload = json.loads(re.search(r"amqpcFrameLog\((.*)\);", script).group(1))  # type: ignore[union-attr]
        assert len(payload["rows"]) == test.frames
        assert [row[0] for row in payload["rows"]] == list(range(test.frames))  # seq order


def test_build_audit_findings_point_at_test_pages(site: Site, lake: Lake) -> None:
    kinds = Counter(v.kind for v in site.data.violations)
    assert kinds == lake.stats.expected
    paged = [v for v in site.data.violations if v.page]
    assert all((site.root / "tests" / f"{v.page}.html").is_file() for v in paged)


def test_build_a_lake_with_runs_only(spark: Any, lake: Lake, tmp_path: Path) -> None:
    from reports.build import build_report

    shutil.copytree(lake.root / "runs", tmp_path / "lake" / "runs")  # runs that wrote no test or frame yet
    data = build_report(spark, tmp_path / "lake", tmp_path / "site")
    assert len(data.targets) == len(TARGETS) and all(t.score is None for t in data.targets)
    assert not data.failing and not data.violations
    summary = json.loads((tmp_path / "site" / "summary.json").read_text())
    assert summary["targets"][0]["started"].endswith("+00:00")


def test_build_shows_each_rules_clauses_with_their_tests(site: Site) -> None:
    """Synthetic tests name their rule's first clause: it shows its tests; the others show "no test"
    (or their untestable reason), and the overview counts and lists the clauses without a test."""
    claused = [r for r in all_rules() if r.clauses]
    assert claused
    for rule in claused[:3]:
        page = (site.root / "rules" / f"{rule.id}.html").read_text()
        rows = re.findall(r'<tr id="([^"]+)">(.*?)</tr>', page, re.S)
        assert [clause_id for clause_id, _ in rows] == [c.id for c in rule.clauses]
        first = rows[0][1]
        assert "test_rule[" in first and "no test" not in first
        for (_, row), c in zip(rows[1:], rule.clauses[1:], strict=True):
            assert ("untestable over the wire" if c.untestable else "no test") in row
    without = [c.id for r in claused for c in r.clauses[1:] if not c.untestable]
    summary = json.loads((site.root / "summary.json").read_text())
    assert summary["clauses"]["without_test"] == without
    overview = (site.root / "index.html").read_text()
    assert f"{len(without)} without a test" in overview and f'href="rules/{claused[0].id}.html#' in overview
