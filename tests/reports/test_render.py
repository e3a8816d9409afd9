"""The HTML renderer on hand-made report data (no JVM): pages, escaping, badges, frame logs."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

from reports.model import (
    Cell,
    Change,
    FailingTest,
    Flake,
    ReportData,
    Rule,
    RunPoint,
    Target,
    Violation,
    page_for_test,
)
from reports.render import frame_log_rows, frame_log_script, render_site

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVIL = "<script>alert(1)</script>"


def sample() -> tuple[ReportData, list[tuple[str, list[dict[str, object]]]]]:
    label = "RabbitMQ 3.10.8 · rabbitmq-3.10 · raw"
    target = Target(label, "r2", T0, "RabbitMQ", "3.10.8", "rabbitmq-3.10", "raw", "amqp://guest@h/", 2, 0.5,
                    {"passed": 1, "failed": 1}, {"ack": 0.5})
    page = page_for_test("r2", f"suite/test_ack.py::test_x[{EVIL}]")
    violation = Violation(label, "r2", f"suite/test_ack.py::test_x[{EVIL}]", 1, 1, 2, "tag-sequence", "ACK-01",
                          "error", "delivery tag 3, expected 2", page)
    failing = FailingTest("r2", f"suite/test_ack.py::test_x[{EVIL}]", ["ACK-01"], "ack", "failed", "failed", "call", T0,
                          0.25, reply_scope="channel", reply_code=406, reply_text=EVIL, reply_class_id=60,
                          reply_method_id=80, message=f"expected 406 {EVIL}", hypothesis_seed="123",
                          minimal_example="state.ack(tag=3)", frames=3, failed_rules=[], page=page, target=label,
                          profile="rabbitmq-3.10", expected=[("ACK-01", "rabbitmq-3.10", "required")],
                          violations=[violation])
    data = ReportData(
        generated=T0, results_dir="/r", runs=2, tests=2, areas=["ack"], targets=[target],
        rules=[Rule("ACK-01", "ack", "tags count", f"text {EVIL}", "RULES.md §1"),
               Rule("ACK-02", "ack", "max tag", "t", "RULES.md §1"),
               Rule("TMO-01", "timeout", "the global setting", "t", "RULES.md §6.1"),
               Rule("S002-01", "cancel", "cancel-ok", "t", "seeds/002_f7c750939f6db173.txt#L4")],
        matrix={"ACK-01": {label: Cell("failed", "r2", 1, 1, [page])}, "ACK-02": {label: Cell("passed", "r2", 1, 0)},
                "TMO-01": {label: Cell("needs-admin", "r2", 1, 0)}},
        trend=[RunPoint("r1", label, T0, 1, 1.0, {}), RunPoint("r2", label, T0, 2, 0.5, {})],
        changes=[Change(label, "r1", "r2", "ACK-01", "passed", "failed", "changed", True)],
        regressions=[Change(label, "r1", "r2", "ACK-01", "passed", "failed", "changed", True)],
        flakes=[Flake(label, "ACK-02", "ack", 5, 2, 1, "PPFPP", "passed", 0.5)],
        violations=[violation], failing=[failing],
        rule_history={"ACK-01": {label: [("r1", "passed"), ("r2", "failed")]}})
    frames = [{"seq": i, "ts": T0 + timedelta(milliseconds=i), "connection": 1, "channel": 1,
               "direction": "in" if i % 2 else "out", "frame_type": "method", "method": "basic.deliver",
               "delivery_tag": i + 1, "redelivered": False, "reply_text": EVIL} for i in range(3)]
    return data, [(page, frames)]


def test_render_writes_every_page(tmp_path: Path) -> None:
    data, logs = sample()
    index = render_site(data, tmp_path, logs)
    assert index == tmp_path / "index.html"
    page = data.failing[0].page
    for name in ("index.html", "matrix.html", "failures.html", "audit.html", "rules/ACK-01.html",
                 "rules/ACK-02.html", f"tests/{page}.html", f"frames/{page}.js", "static/report.css",
                 "static/report.js", "summary.json", f"badges/{data.targets[0].slug}.svg"):
        assert (tmp_path / name).is_file(), name


def test_render_escapes_everything_from_the_records(tmp_path: Path) -> None:
    data, logs = sample()
    render_site(data, tmp_path, logs)
    for path in tmp_path.rglob("*.html"):
        assert EVIL not in path.read_text(), path
    script = (tmp_path / "frames" / f"{data.failing[0].page}.js").read_text()
    assert "</script>" not in script and "<\\/script>" in script


def test_render_summary_and_badge(tmp_path: Path) -> None:
    data, logs = sample()
    render_site(data, tmp_path, logs)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["targets"][0]["score"] == 0.5 and summary["regressions"] == 1
    assert summary["violations"] == {"errors": 1, "warnings": 0, "unjudged": 0} and summary["failing_tests"] == 1
    badge = ET.parse(tmp_path / summary["targets"][0]["badge"]).getroot()
    assert badge.tag.endswith("svg") and "50% (1/2)" in "".join(badge.itertext())


def test_render_test_page_is_small_and_points_at_its_log(tmp_path: Path) -> None:
    data, logs = sample()
    render_site(data, tmp_path, logs)
    page = data.failing[0].page
    html = (tmp_path / "tests" / f"{page}.html").read_text()
    assert f'data-frame-log="../frames/{page}.js"' in html and 'data-flagged="1:1:2 "' in html
    assert "basic.deliver" not in html  # the log itself is only in the script


def test_frame_log_rows_are_compact() -> None:
    rows = frame_log_rows(sample()[1][0][1])
    assert rows[1][:6] == [1, 1.0, 1, 1, "in", "basic.deliver"]
    assert rows[1][6].startswith("delivery_tag=2 redelivered=false reply_text=")
    assert frame_log_script("p", []).startswith("window.amqpcFrameLog && window.amqpcFrameLog(")


def test_render_an_empty_lake(tmp_path: Path) -> None:
    data = ReportData(T0, "/r", 0, 0, [], [], [], {}, [], [], [], [], [], [])
    render_site(data, tmp_path)
    assert "No findings." in (tmp_path / "audit.html").read_text()


def test_render_shows_checks_that_did_not_run_as_such(tmp_path: Path) -> None:
    data, logs = sample()
    render_site(data, tmp_path, logs)
    matrix = (tmp_path / "matrix.html").read_text()
    assert '<td class="cell v-needs-admin" title="not run: needs admin · 1 test">' in matrix
    assert '<option value="needs-admin">not run: needs admin</option>' in matrix
    css = (tmp_path / "static" / "report.css").read_text()
    assert ".v-needs-admin { background: var(--needs-admin)" in css
    overview = (tmp_path / "index.html").read_text()
    assert "not run (needs <code>--broker-admin</code>)" in overview and "2 runs" in overview


def test_rule_pages_link_to_the_catalogue_entry_and_the_source(tmp_path: Path) -> None:
    data, logs = sample()
    render_site(data, tmp_path, logs)
    ack = (tmp_path / "rules" / "ACK-01.html").read_text()
    assert 'href="../catalogue.html#rules-md-1">RULES.md §1</a>' in ack
    assert 'href="../catalogue.html#ACK-01">catalogue entry</a>' in ack
    seed = (tmp_path / "rules" / "S002-01.html").read_text()
    assert 'href="../catalogue.html#seed-002-L4">seeds/002_f7c750939f6db173.txt#L4</a>' in seed
    assert "the server replies with a basic.cancel-ok" in seed  # the cited line, quoted
    catalogue = (tmp_path / "catalogue.html").read_text()
    for anchor in ("ACK-01", "S002-01", "rules-md-1", "seed-002-L4"):
        assert f'<a id="{anchor}"></a>' in catalogue
    assert "&lt;CONSTANT&gt;" in catalogue and "<CONSTANT>" not in catalogue


def test_render_shows_how_a_target_s_profile_was_chosen(tmp_path: Path) -> None:
    data, pages = sample()
    data.targets[0].profile_detail = f"base amqp-0-9-1: detected {EVIL}\n+ publisher_confirms: PC-01 judged as rabbitmq-4.3"
    render_site(data, tmp_path, pages)
    overview = (tmp_path / "index.html").read_text()
    assert "how it was chosen" in overview and "<li>+ publisher_confirms: PC-01 judged as rabbitmq-4.3</li>" in overview
    assert EVIL not in overview and "&lt;script&gt;" in overview


def test_rule_titles_render_their_markdown(tmp_path: Path) -> None:
    """Catalogue titles mark code (`basic.nack`): HTML shows it as code, <title> and attributes as plain
    text, never the backticks; a title's HTML is escaped like every record."""
    data, logs = sample()
    data.rules[1] = Rule("ACK-02", "ack", f"`basic.reject` and `basic.nack` {EVIL}", "t", "RULES.md §1")
    render_site(data, tmp_path, logs)
    page, matrix = (tmp_path / "rules" / "ACK-02.html").read_text(), (tmp_path / "matrix.html").read_text()
    assert "<code>basic.reject</code> and <code>basic.nack</code>" in page
    assert "<code>basic.reject</code> and <code>basic.nack</code>" in matrix
    assert "<title>ACK-02 — basic.reject and basic.nack" in page
    assert 'data-title="basic.reject and basic.nack' in matrix
    assert "`" not in page and "`basic" not in matrix and EVIL not in page + matrix


def test_the_nav_counts_audit_findings_not_traffic_left_unjudged(tmp_path: Path) -> None:
    """Requeue orders the audit could not judge are listed on its page, apart; the nav counts findings."""
    data, logs = sample()
    unjudged = dataclasses.replace(data.violations[0], kind="unjudged-requeue-order", severity="unjudged")
    data.violations.append(unjudged)
    render_site(data, tmp_path, logs)
    assert "Trace audit (1)</a>" in (tmp_path / "index.html").read_text()
