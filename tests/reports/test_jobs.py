"""The Spark jobs (matrix, scores, history, flakes) on small hand-made runs: one local session."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reports import jobs
from reports.schema import struct_type

pytestmark = pytest.mark.spark

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run_row(run_id: str, hour: int, product: str = "RabbitMQ", client: str = "raw") -> dict[str, Any]:
    return {"run_id": run_id, "broker_url": "amqp://guest@h/", "product": product, "version": "3.10.8",
            "profile": "rabbitmq-3.10", "client": client, "harness_version": "0.1.0", "admin": "none",
            "timeout_scale": 1.0, "started": T0 + timedelta(hours=hour), "finished": None, "exit_status": 0,
            "tests": 0, "run": run_id}


def result_row(run_id: str, test_id: str, rules: list[str], verdict: str, area: str = "ack") -> dict[str, Any]:
    return {"run_id": run_id, "test_id": test_id, "rule_ids": rules, "area": area, "verdict": verdict,
            "outcome": "passed", "phase": "call", "started": T0, "duration": 0.1, "duration_total": 0.1,
            "reply_scope": None, "reply_code": None, "reply_text": None, "reply_class_id": None,
            "reply_method_id": None, "hypothesis_seed": None, "minimal_example": None, "message": None,
            "frames": 0, "run": run_id}


@pytest.fixture(scope="module")
def hand_lake(spark: Any) -> dict[str, Any]:
    runs = [run_row("a1", 1), run_row("a2", 2), run_row("a3", 3), run_row("a4", 4), run_row("b1", 1, product="GarageMQ")]
    tests = [
        # ACK-01: two tests; the worst decides (failed in a2 only -> a regression a1->a2, a fix a2->a3)
        result_row("a1", "t1", ["ACK-01"], "passed"), result_row("a1", "t2", ["ACK-01"], "passed"),
        result_row("a2", "t1", ["ACK-01"], "passed"), result_row("a2", "t2", ["ACK-01"], "failed"),
        result_row("a3", "t1", ["ACK-01"], "passed"), result_row("a4", "t1", ["ACK-01"], "failed"),
        # PC-01: passed everywhere but missing from a3 (removed, then added back)
        result_row("a1", "p", ["PC-01"], "passed", "confirms"), result_row("a2", "p", ["PC-01"], "passed", "confirms"),
        result_row("a4", "p", ["PC-01"], "passed", "confirms"),
        # QOS-01 not applicable, ERR-01 broken: both left out of the score
        result_row("a4", "q", ["QOS-01"], "not-applicable", "qos"), result_row("a4", "e", ["ERR-01"], "broken", "errors"),
        # TMO-01: one check passed, one needed --broker-admin: not run as a whole, left out of the score
        result_row("a4", "m1", ["TMO-01"], "passed", "timeout"), result_row("a4", "m2", ["TMO-01"], "needs-admin", "timeout"),
        result_row("b1", "t1", ["ACK-01", "ACK-02"], "unimplemented"),
    ]
    runs_df = spark.createDataFrame(runs, struct_type("runs"))
    tests_df = spark.createDataFrame(tests, struct_type("tests"))
    verdicts = jobs.rule_verdicts(tests_df, runs_df, jobs.catalogue_frame(spark)).cache()
    return {"runs": runs_df, "tests": tests_df, "verdicts": verdicts}


def test_jobs_rule_verdict_is_the_worst_test_verdict(hand_lake: dict[str, Any]) -> None:
    rows = {(r.run_id, r.rule_id): r for r in hand_lake["verdicts"].collect()}
    assert rows["a2", "ACK-01"].verdict == "failed" and rows["a2", "ACK-01"].tests == 2
    assert rows["a2", "ACK-01"].failing_tests == 1
    assert rows["a4", "TMO-01"].verdict == "needs-admin" and rows["a4", "TMO-01"].tests == 2
    assert rows["b1", "ACK-02"].verdict == "unimplemented" and rows["b1", "ACK-02"].area == "ack"
    assert rows["a1", "ACK-01"].target == "RabbitMQ 3.10.8 · rabbitmq-3.10 · raw"


def test_jobs_matrix_shows_each_targets_latest_run(hand_lake: dict[str, Any]) -> None:
    cells = {(r.rule_id, r.target): (r.run_id, r.verdict) for r in jobs.matrix(hand_lake["verdicts"]).collect()}
    rabbit = "RabbitMQ 3.10.8 · rabbitmq-3.10 · raw"
    assert cells["ACK-01", rabbit] == ("a4", "failed")
    assert cells["ACK-01", "GarageMQ 3.10.8 · rabbitmq-3.10 · raw"] == ("b1", "unimplemented")
    assert {run for run, _ in cells.values()} == {"a4", "b1"}


def test_jobs_scores_leave_out_not_applicable_needs_admin_and_broken(hand_lake: dict[str, Any]) -> None:
    scores = {r.run_id: r for r in jobs.run_scores(hand_lake["verdicts"]).collect()}
    assert scores["a4"].score == pytest.approx(0.5)  # ACK-01 failed, PC-01 passed; QOS-01, ERR-01, TMO-01 left out
    assert scores["a4"].rules == 5 and scores["a4"].broken == 1 and scores["a4"]["needs-admin"] == 1
    assert scores["b1"].score == 0.0
    areas = {(r.run_id, r.area): r.score for r in jobs.area_scores(hand_lake["verdicts"]).collect()}
    assert areas["a4", "confirms"] == 1.0 and areas["a4", "qos"] is None and areas["a4", "timeout"] is None


def test_jobs_history_finds_added_removed_changed_and_regressions(hand_lake: dict[str, Any]) -> None:
    changes = {(r.run_a, r.run_b, r.rule_id): (r.change, r.regression)
               for r in jobs.history(hand_lake["verdicts"], hand_lake["runs"]).collect()}
    assert changes == {
        ("a1", "a2", "ACK-01"): ("changed", True),
        ("a2", "a3", "ACK-01"): ("changed", False),
        ("a2", "a3", "PC-01"): ("removed", False),
        ("a3", "a4", "PC-01"): ("added", False),
        ("a3", "a4", "ACK-01"): ("changed", True),
        ("a3", "a4", "QOS-01"): ("added", False),
        ("a3", "a4", "ERR-01"): ("added", False),
        ("a3", "a4", "TMO-01"): ("added", False),
    }


def test_jobs_diff_between_any_two_runs(spark: Any, hand_lake: dict[str, Any]) -> None:
    rows = jobs.diff_runs(spark, hand_lake["verdicts"], "a1", "b1").collect()
    assert {(r.rule_id, r.change, r.verdict_a, r.verdict_b) for r in rows} == {
        ("ACK-01", "changed", "passed", "unimplemented"), ("ACK-02", "added", None, "unimplemented"),
        ("PC-01", "removed", "passed", None)}


def test_jobs_flakes_need_two_flips(hand_lake: dict[str, Any]) -> None:
    flaky = jobs.flakes(hand_lake["verdicts"]).collect()
    assert [(r.rule_id, r.flips, r.sequence, r.last) for r in flaky] == [("ACK-01", 3, "PFPF", "failed")]
    assert jobs.flakes(hand_lake["verdicts"], min_flips=4).count() == 0


def test_a_run_against_a_cluster_is_a_target_of_its_own(spark: Any) -> None:
    """A grid runs the same broker version alone and as a cluster: two rows, never compared."""
    alone, clustered = run_row("s1", 1), run_row("c1", 2)
    clustered["cluster_nodes"] = ["amqp://guest@h:5751/", "amqp://guest@h:5752/", "amqp://guest@h:5753/"]  # all
    runs = jobs.runs_with_targets(spark.createDataFrame([alone, clustered], struct_type("runs")))
    labels = {r["run_id"]: (r["target"], r["ordinal"]) for r in runs.collect()}
    assert labels == {"s1": ("RabbitMQ 3.10.8 · rabbitmq-3.10 · raw", 1),
                      "c1": ("RabbitMQ 3.10.8 (cluster of 3) · rabbitmq-3.10 · raw", 1)}
