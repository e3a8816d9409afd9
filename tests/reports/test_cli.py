"""`reports.cli.report_main`: usage errors are one line on stderr and exit status 4 (no JVM)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from reports.cli import EXIT_USAGE, report_main, summary_line


@pytest.mark.parametrize("argv, fragment", [
    ([], "the following arguments are required: RESULTS_DIR, --out"),
    (["results"], "the following arguments are required: --out"),
    (["--out", "x", "/nonexistent/results"], "not a directory"),
    (["{lake}", "--out", "x", "--max-failure-pages", "-1"], "--max-failure-pages must be >= 0"),
    (["{lake}", "--out", "x", "--audit-plan", "fast"], "invalid choice: 'fast'"),
    (["{empty}", "--out", "x"], "no runs found"),
])
def test_report_usage_errors_exit_4_with_one_line(argv: list[str], fragment: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    lake = tmp_path / "lake"
    (lake / "runs" / "run=r1").mkdir(parents=True)
    (lake / "runs" / "run=r1" / "run.parquet").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    argv = [a.format(lake=lake, empty=tmp_path / "empty") for a in argv]
    assert report_main(argv) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("amqp-conformance report: error: ") and fragment in lines[0]


def test_report_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert report_main(["--help"]) == 0
    assert "--spark-master" in capsys.readouterr().out


def test_summary_line_counts_unjudged_traffic_apart_from_findings() -> None:
    from reports.model import ReportData, Violation

    def violation(severity: str) -> Violation:
        return Violation("t", "r", "x.py::t", 1, 1, 5, "kind", "QOS-03", severity, "detail")

    data = ReportData(datetime.now(UTC), "results", 1, 3, [], [], [], {}, [], [], [], [], [], [])
    data.violations = [violation("unjudged"), violation("unjudged"), violation("error")]
    line = summary_line(Path("out/index.html"), data, 1.25, "local[*]")
    assert line == ("report: out/index.html (1 run, 0 targets, 0 failing tests, 1 audit finding, 2 not judged; "
                    "1.2 s on local[*])")
    data.violations = [violation("unjudged")]
    assert "0 audit findings, 1 not judged;" in summary_line(Path("i"), data, 0.0, "local[*]")
