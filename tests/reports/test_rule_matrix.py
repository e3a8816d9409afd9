"""The rule matrix counts a failed test as failed only under the rules its failure names.

A results lake written by the plugin's own writer holds one run with a failed model machine whose
failure names ACK-09 (the machine checks ACK-01, ACK-03 and ACK-09), a passing test of ACK-03, a
failed test whose failure names PC-08, a rule it is not written for (a deviation met while the test
prepared), and a failed test of an older lake (no `failed_rules`). The report shows ACK-09 and
PC-08 failed, ACK-01 and ACK-03 not judged (as the JUnit XML's `unjudged`), and the older test
failed under its own rule; not judged rules are left out of the score.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conformance.results.parts import ResultsWriter
from conformance.results.records import RunRecord, TestRecord
from conformance.results.verdicts import UNJUDGED

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 23, 12, tzinfo=UTC)
RUN = "garagemq-unjudged"
MACHINE = "conformance/suite/test_machines.py::test_acknowledgements_match_the_model"


def _test(test_id: str, rules: list[str], verdict: str, failed: list[str] | None, second: int,
          message: str | None = None) -> TestRecord:
    area = "confirms" if rules[0].startswith("PC") else "ack"
    return TestRecord(RUN, test_id, rules, area, verdict, "failed" if verdict == "failed" else "passed", "call",
                      T0 + timedelta(seconds=second), 0.5, 0.5, message=message, failed_rules=failed)


def write_lake(root: Path) -> None:
    writer = ResultsWriter(root, RUN)
    writer.write_run(RunRecord(RUN, "amqp://guest@127.0.0.1:5673/", "raw", "0.1.0", 1.0, T0, product="garagemq",
                               version="0.1", profile="amqp-0-9-1", finished=T0 + timedelta(minutes=1),
                               exit_status=1, tests=4))
    for record in (
        _test(MACHINE, ["ACK-01", "ACK-03", "ACK-09"], "failed", ["ACK-09"], 1,
              "ACK-09 broken: `basic.recover`\nAssertionError: basic.recover requeue=True: broker gave "
              "ConnectionClosed(540, 60, 110), the rules say Ok() (ACK-09)"),
        _test("conformance/suite/test_ack.py::test_unknown_tag_closes_the_channel_406[never-issued-ack]",
              ["ACK-03"], "passed", None, 2),
        _test("conformance/suite/test_ack.py::test_tags_are_64_bit_without_wrap_or_truncation[2^63-1]",
              ["ACK-02"], "failed", ["PC-08"], 3, "PC-08 broken: when the broker nacks\nnacked publish 1"),
        _test("conformance/suite/test_ack.py::test_double_ack_is_an_unknown_tag[plain]", ["ACK-04"], "failed",
              None, 4, "DID NOT RAISE ChannelClosed"),  # an older lake: no failed_rules
    ):
        writer.add_test(record)
    writer.close()


@pytest.fixture(scope="module")
def built(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    from reports.build import build_report

    root = tmp_path_factory.mktemp("lake")
    write_lake(root)
    out = tmp_path_factory.mktemp("site")
    return out, build_report(spark, root, out)


def test_rule_verdicts_fail_only_the_rules_a_failure_names(built: tuple[Path, Any]) -> None:
    _, data = built
    target = data.targets[0].label
    verdict = {rule_id: cells[target].verdict for rule_id, cells in data.matrix.items() if target in cells}
    assert verdict == {"ACK-09": "failed", "PC-08": "failed", "ACK-04": "failed", "ACK-01": UNJUDGED,
                       "ACK-03": UNJUDGED, "ACK-02": UNJUDGED}
    cells = data.matrix
    assert (cells["ACK-09"][target].failing_tests, cells["ACK-03"][target].failing_tests) == (1, 0)
    assert cells["ACK-03"][target].tests == 2  # the machine and the passing test
    counts = data.targets[0].counts
    assert (counts["failed"], counts[UNJUDGED], counts["passed"]) == (3, 3, 0)
    assert data.targets[0].score == 0.0  # 3 failed rules; the not judged ones are not scored


def test_the_matrix_page_says_not_judged(built: tuple[Path, Any]) -> None:
    out, _ = built
    html = (out / "matrix.html").read_text()
    row = html.split('<tr data-rule="ACK-01"', 1)[1].split("</tr>", 1)[0]
    assert 'class="cell v-unjudged"' in row and "not judged" in row, row
    assert "failed" not in row.split("</th>", 1)[1].replace("v-failed", ""), row
    failed = html.split('<tr data-rule="ACK-09"', 1)[1].split("</tr>", 1)[0]
    assert 'class="cell v-failed"' in failed, failed
    failures = (out / "failures.html").read_text()
    assert "<b>ACK-09</b>" in failures and 'title="not judged: the test failed on ACK-09 first">ACK-01<' in failures
