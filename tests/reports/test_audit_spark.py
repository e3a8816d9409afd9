"""The trace audit on Spark: every plan finds exactly the violations injected into the lake."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from reports.audit.lake import audit_lake
from reports.audit.plan import audit_by_run, audit_grouped, tag_sequence_findings
from reports.spark import read_results
from tests.reports.conftest import Lake

pytestmark = pytest.mark.spark

Key = tuple[str, str, int, int, int, str]


def keys(rows: Any) -> Counter[Key]:
    return Counter((r["run_id"], r["test_id"], r["connection"], r["channel"], r["seq"], r["kind"]) for r in rows)


def test_audit_plans_agree_with_the_injected_violations(spark: Any, lake: Lake) -> None:
    single = keys(audit_lake(lake.root).to_pylist())
    assert Counter(k[-1] for k in single.elements()) == lake.stats.expected
    by_run = keys(r.asDict() for r in audit_by_run(spark, str(lake.root), tasks=3).collect())
    grouped = keys(r.asDict() for r in audit_grouped(read_results(spark, lake.root, "frames")).collect())
    assert by_run == single
    assert grouped == single


def test_audit_tag_check_in_sql_matches_the_checker(spark: Any, lake: Lake) -> None:
    sql = tag_sequence_findings(read_results(spark, lake.root, "frames")).collect()
    checker = [r for r in audit_lake(lake.root).to_pylist() if r["kind"] == "tag-sequence"]
    assert keys(r.asDict() for r in sql) == keys(checker)
    assert sorted(r.detail for r in sql) == sorted(r["detail"] for r in checker)


def test_audit_by_run_of_an_empty_lake(spark: Any, tmp_path: Any) -> None:
    assert audit_by_run(spark, str(tmp_path)).count() == 0
