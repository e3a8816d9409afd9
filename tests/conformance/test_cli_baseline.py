"""Baselines (conformance/results/baseline.py): the file format, judging a run, writing one from results."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from conformance.plugin.evidence import TestEvidence
from conformance.results.baseline import (
    EXPECTED,
    XPASS,
    BaselineError,
    Deviation,
    covered_by,
    from_results,
    judge,
    load_baseline,
    matches,
    parse_baseline,
    render,
)
from conformance.results.parts import ResultsWriter
from conformance.results.records import RunRecord, TestRecord

REPO = Path(__file__).resolve().parents[2]


def evidence(name: str, verdict: str, *rules: str, area: str = "ack") -> TestEvidence:
    return TestEvidence(f"conformance/suite/ack/test_ack.py::{name}", verdict, area, rules or ("ACK-03",))


def test_baseline_minimal_and_full_entries_parse() -> None:
    baseline = parse_baseline('''
        [baseline]
        description = "a broker"

        [[deviation]]
        rule = "ACK-03"
        reason = "  known  "

        [[deviation]]
        rule = "S002-01"
        reason = "crash"
        link = "https://example.org/bug/1"
        tests = ["test_cancel.py::test_x", "test_y"]
        profiles = ["rabbitmq-3.10"]
    ''')
    assert baseline.description == "a broker"
    assert baseline.deviations == (
        Deviation("ACK-03", "known"),
        Deviation("S002-01", "crash", "https://example.org/bug/1", ("test_cancel.py::test_x", "test_y"),
                  ("rabbitmq-3.10",)))


@pytest.mark.parametrize(("text", "message"), [
    ("[[deviation]\nrule=", "not valid TOML"),
    ('rules = []', "unknown keys ['rules']"),
    ('[[deviation]]\nrule = "NOPE-1"\nreason = "x"', "deviation #1: rule 'NOPE-1' is not a rule ID"),
    ('[[deviation]]\nrule = "ACK-03"', "deviation #1 (ACK-03): 'reason' must be a non-empty string"),
    ('[[deviation]]\nrule = "ACK-03"\nreason = " "', "'reason' must be a non-empty string"),
    ('[[deviation]]\nrule = "ACK-03"\nreason = "x"\ncolour = 1', "unknown keys ['colour']"),
    ('[[deviation]]\nrule = "ACK-03"\nreason = "x"\nlink = "ftp://x"', "'link' must be an http(s):// URL"),
    ('[[deviation]]\nrule = "ACK-03"\nreason = "x"\ntests = "t"', "'tests' must be a list"),
    ('[[deviation]]\nrule = "ACK-03"\nreason = "x"\nprofiles = ["rabbitmq-9"]', "unknown profile 'rabbitmq-9'"),
    ('[[deviation]]\nrule = "ACK-03"\nreason = "x"\n[[deviation]]\nrule = "ACK-03"\nreason = "y"',
     "deviation #2 (ACK-03): duplicate entry"),
    ('deviation = 3', "must be an array of tables"),
])
def test_baseline_defects_are_named(text: str, message: str) -> None:
    with pytest.raises(BaselineError, match=r"^baseline b\.toml: ") as error:
        parse_baseline(text, "b.toml")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_baseline_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="cannot read it"):
        load_baseline(tmp_path / "missing.toml")
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(BaselineError, match="cannot read it"):
        load_baseline(tmp_path / "binary.toml")


def test_baseline_test_patterns() -> None:
    nodeid = "conformance/suite/qos/test_qos.py::test_limits[global]"
    for pattern in ("test_qos.py::test_limits[global]", "test_qos.py::test_limits", "test_limits", "test_limits[global]"):
        assert matches(pattern, nodeid) and matches(pattern, nodeid, exact=True), pattern
    for pattern in ("test_limits[per-consumer]", "test_lim"):
        assert not matches(pattern, nodeid), pattern
    for pattern in ("test_ack.py::test_limits", "qos/test_ack.py::test_limits"):  # the file is only a hint
        assert matches(pattern, nodeid) and not matches(pattern, nodeid, exact=True), pattern
    for pattern in ("conformance/suite/test_qos.py::test_limits", "suite/qos/test_qos.py::test_limits[global]"):
        assert matches(pattern, nodeid, exact=True), pattern  # the file by its name, wherever it was


def test_baseline_pattern_survives_a_file_move() -> None:
    """A user's baseline written before a suite file was split or moved still matches: the file is
    a hint, used only where the run has the test in that very file."""
    moved = [evidence("x", "passed"), TestEvidence("conformance/suite/timeout/test_sac.py::test_stall", "failed",
                                                   "timeout", ("TMO-4.3-7",))]
    assert covered_by("test_timeout_sac.py::test_stall", [t.nodeid for t in moved]) == {moved[1].nodeid}
    both = ["conformance/suite/confirms/test_confirms.py::test_t",
            "conformance/suite/through_clients/test_through_clients.py::test_t"]
    assert covered_by("test_confirms.py::test_t", both) == {both[0]}
    baseline = parse_baseline('[[deviation]]\nrule = "TMO-4.3-7"\nreason = "r"\n'
                              'tests = ["test_timeout_sac.py::test_stall"]')
    assert judge(moved, baseline, None).outcome(moved[1]) == EXPECTED


def test_judge_matches_the_failure_not_the_test() -> None:
    """A machine checks many rules: an entry for one of them accepts a failure of that rule only."""
    rules = ("TMO-03", "TMO-4.3-2", "TMO-4.3-5")
    of_5 = TestEvidence("conformance/suite/timeout/test_machine_timeout.py::test_m", "failed", "timeout", rules,
                        failures={"TMO-4.3-5": "ready messages not delivered: [a: 3 ready] (TMO-4.3-5)"})
    of_03 = TestEvidence(of_5.nodeid, "failed", "timeout", rules,
                         failures={"TMO-03": "basic.cancel for c1, whose timeout is not due (TMO-03)"})
    baseline = parse_baseline('[[deviation]]\nrule = "TMO-4.3-5"\nreason = "known bug"\n'
                              'tests = ["test_machine_timeout.py::test_m"]\nintermittent = true')
    assert judge([of_5], baseline, None).outcome(of_5) == EXPECTED
    judged = judge([of_03], baseline, None)
    assert judged.outcome(of_03) == "failed" and judged.reasons == {}
    assert judged.rule_outcome(of_03, "TMO-03") == "failed" and judged.rule_outcome(of_03, "TMO-4.3-5") == "unjudged"
    assert judged.intermittent_lines() == [
        "intermittent TMO-4.3-5 (test_machine_timeout.py::test_m): not seen in this run"]
    both = TestEvidence(of_5.nodeid, "failed", "timeout", rules, failures={**of_5.failures, **of_03.failures})
    assert judge([both], baseline, None).outcome(both) == "failed"  # one of its failures is new


def test_judge_message_pattern_narrows_an_entry() -> None:
    race = TestEvidence("conformance/suite/timeout/test_timeout_sac.py::test_stall", "failed", "timeout", ("TMO-4.3-7",),
                        failures={"TMO-4.3-7": "no basic.cancel for the second consumer within 3.2 s"})
    other = TestEvidence(race.nodeid, "failed", "timeout", ("TMO-4.3-7",),
                         failures={"TMO-4.3-7": "channel.close 406 instead of basic.cancel"})
    baseline = parse_baseline('[[deviation]]\nrule = "TMO-4.3-7"\nreason = "race"\nintermittent = true\n'
                              'message = "no basic\\\\.cancel for the second consumer"')
    assert baseline.deviations[0].message == "no basic\\.cancel for the second consumer"
    assert judge([race], baseline, None).outcome(race) == EXPECTED
    assert judge([other], baseline, None).outcome(other) == "failed"
    assert judge([race], baseline, None).intermittent_lines()[0].endswith("seen in this run (test_timeout_sac.py::test_stall)")
    with pytest.raises(BaselineError, match="'message' is not a valid regular expression"):
        parse_baseline('[[deviation]]\nrule = "ACK-03"\nreason = "r"\nmessage = "("')
    assert 'message = "no basic' in render(baseline.deviations)


def test_judge_expected_failures_and_xpass() -> None:
    tests = [evidence("a", "failed"), evidence("b", "passed"),  # ACK-03: observed, b is a plain pass
             evidence("c", "passed", "ACK-04"), evidence("d", "passed", "ACK-04"),  # ACK-04: XPASS
             evidence("e", "failed", "ACK-05"), evidence("f", "broken", "ACK-06"), evidence("g", "failed", "ACK-07")]
    baseline = parse_baseline('''
        [[deviation]]
        rule = "ACK-03"
        reason = "r3"
        [[deviation]]
        rule = "ACK-04"
        reason = "r4"
        [[deviation]]
        rule = "ACK-05"
        reason = "only on 3.10"
        profiles = ["rabbitmq-3.10"]
        [[deviation]]
        rule = "ACK-06"
        reason = "a baseline never hides a broken test"
        [[deviation]]
        rule = "ACK-08"
        reason = "not in this run"
    ''')
    judged = judge(tests, baseline, "rabbitmq-4.3")
    assert {t.nodeid.split("::")[1]: judged.outcome(t) for t in tests} == {
        "a": EXPECTED, "b": "passed", "c": XPASS, "d": XPASS, "e": "failed", "f": "broken", "g": "failed"}
    assert judged.reasons[tests[0].nodeid].reason == "r3"
    [(deviation, pattern, nodeids)] = judged.xpasses
    assert (deviation.rule, pattern, len(nodeids)) == ("ACK-04", None, 2)
    assert [d.rule for d in judged.unexercised] == ["ACK-08"]
    assert judge(tests, baseline, "rabbitmq-3.10").outcome(tests[4]) == EXPECTED
    assert judge(tests, None, None).outcomes == {t.nodeid: t.verdict for t in tests}


def test_judge_per_test_patterns() -> None:
    tests = [evidence("t[x]", "failed"), evidence("t[y]", "passed"), evidence("u", "passed")]
    baseline = parse_baseline('[[deviation]]\nrule = "ACK-03"\nreason = "r"\ntests = ["t[x]", "u"]')
    judged = judge(tests, baseline, None)
    assert [judged.outcome(t) for t in tests] == [EXPECTED, "passed", XPASS]
    assert [(d.rule, p) for d, p, _ in judged.xpasses] == [("ACK-03", "u")]


def test_judge_a_failure_of_another_rule_neither_matches_nor_saves_an_entry() -> None:
    """A machine whose failure names ACK-09 (basic.recover answered 540) neither matches an ACK-01 entry
    nor keeps it from being an XPASS when a test of ACK-01 passed: failures name their rules."""
    machine = TestEvidence("conformance/suite/ack/test_machine_ack.py::test_m", "failed", "ack", ("ACK-01", "ACK-09"),
                           failures={"ACK-09": "basic.recover requeue=True: broker gave ConnectionClosed(540, 60, 110)"})
    tags = evidence("tags", "passed", "ACK-01")
    baseline = parse_baseline('[[deviation]]\nrule = "ACK-01"\nreason = "machines stop at basic.recover"\n')
    judged = judge([machine, tags], baseline, None)
    assert [judged.outcome(t) for t in (machine, tags)] == ["failed", XPASS]
    assert judged.rule_outcome(machine, "ACK-01") == "unjudged" and judged.seen[baseline.deviations[0]] == ()
    both = parse_baseline('[[deviation]]\nrule = "ACK-01"\nreason = "r"\n[[deviation]]\nrule = "ACK-09"\nreason = "540"\n')
    assert judge([machine, tags], both, None).outcome(machine) == EXPECTED


def test_judge_intermittent_deviation_is_never_an_xpass() -> None:
    tests = [evidence("a", "passed"), evidence("b", "failed", "ACK-04")]
    baseline = parse_baseline('[[deviation]]\nrule = "ACK-03"\nreason = "race"\nintermittent = true\n'
                              '[[deviation]]\nrule = "ACK-04"\nreason = "race"\nintermittent = true\n')
    judged = judge(tests, baseline, None)
    assert [judged.outcome(t) for t in tests] == ["passed", EXPECTED] and judged.xpasses == []
    with pytest.raises(BaselineError, match="'intermittent' must be true or false"):
        parse_baseline('[[deviation]]\nrule = "ACK-03"\nreason = "r"\nintermittent = "sometimes"')


def _record(run_id: str, name: str, verdict: str, rules: list[str], message: str | None = None) -> TestRecord:
    return TestRecord(run_id, f"conformance/suite/test_x.py::{name}", rules, "ack", verdict, "passed", "call",
                      datetime.now(UTC), message=message)


def _results(root: Path, run_id: str, records: list[TestRecord], started: datetime) -> None:
    writer = ResultsWriter(root, run_id)
    writer.write_run(RunRecord(run_id, "amqp://guest@h:5672/", "raw", "0", 1.0, started, product="RabbitMQ",
                               version="3.10.8", profile="rabbitmq-3.10"))
    for record in records:
        writer.add_test(record)
    writer.close()


def test_baseline_from_results_latest_run(tmp_path: Path) -> None:
    _results(tmp_path, "old", [_record("old", "t", "failed", ["ACK-01"])], datetime(2020, 1, 1, tzinfo=UTC))
    _results(tmp_path, "new", [
        _record("new", "a", "failed", ["ACK-03"], 'channel closed 406 "quoted"\nsecond line'),
        _record("new", "b", "passed", ["ACK-03"]),
        _record("new", "c", "failed", ["S002-01", "CCN-03"], "541"),
        _record("new", "d", "non-strict", ["ACK-04"]),
    ], datetime(2024, 1, 1, tzinfo=UTC))
    text, run_id, entries = from_results(tmp_path)
    assert (run_id, entries) == ("new", 2)
    baseline = parse_baseline(text)  # what it writes, it reads
    by_rule = {d.rule: d for d in baseline.deviations}
    assert set(by_rule) == {"ACK-03", "S002-01"}
    assert by_rule["ACK-03"].tests == ("test_x.py::a",)  # b passed: only the failing test is listed
    assert by_rule["S002-01"].tests == ("test_x.py::c",)  # every test of the rule failed: still named
    assert by_rule["ACK-03"].message == 'channel closed 406 "quoted"'  # the failure's text, its code kept
    assert by_rule["S002-01"].message == "541"
    assert by_rule["ACK-03"].profiles == ("rabbitmq-3.10",)
    assert 'channel closed 406 "quoted"' in by_rule["ACK-03"].reason and "second line" not in by_rule["ACK-03"].reason
    assert "RabbitMQ 3.10.8" in text and text.startswith("# amqp-conformance baseline")
    assert from_results(tmp_path, "old")[1:] == ("old", 1)
    with pytest.raises(ValueError, match="--run nope: no such run"):
        from_results(tmp_path, "nope")
    with pytest.raises(ValueError, match="no results there"):
        from_results(tmp_path / "empty")


def test_render_round_trips_awkward_text() -> None:
    deviation = Deviation("ACK-03", 'tab\tquote" backslash\\ newline\n del\x7f é', "https://x/y", ("t[a\"b]",),
                          ("rabbitmq-3.10",), True)
    assert parse_baseline(render([deviation], "# header\n", "desc")).deviations == (deviation,)


@pytest.mark.parametrize("path", sorted((REPO / "baselines").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_baselines_are_valid(path: Path) -> None:
    baseline = load_baseline(path)  # loading refuses an entry accepting its rule's generic wording
    assert baseline.deviations and all(d.reason and not d.reason.startswith("TODO") for d in baseline.deviations)
    assert all(d.tests and d.message for d in baseline.deviations), [d.rule for d in baseline.deviations
                                                                    if not (d.tests and d.message)]
    assert baseline.warnings == []


def test_baseline_todo_reasons_are_warned_about() -> None:
    narrow = 'tests = ["t"]\nmessage = "x"\n'
    baseline = parse_baseline('[[deviation]]\nrule = "ACK-03"\nreason = "TODO: why this is accepted. Seen in run r"\n'
                              + narrow + '[[deviation]]\nrule = "QOS-01"\nreason = "a known bug (upstream #12)"\n' + narrow
                              + '[[deviation]]\nrule = "ACK-04"\nreason = "tracked, see todos.md"\n' + narrow, "b.toml")
    assert baseline.warnings == ["baseline b.toml: deviation #1 (ACK-03): the reason still says TODO; "
                                 "write why this deviation is accepted"]


def test_an_entry_wider_than_a_reason_is_warned_about() -> None:
    baseline = parse_baseline('[[deviation]]\nrule = "ACK-03"\nreason = "r"\n'
                              '[[deviation]]\nrule = "ACK-04"\nreason = "r"\ntests = ["t"]\n', "b.toml")
    assert baseline.warnings == [
        "baseline b.toml: deviation #1 (ACK-03): no tests and no message: it accepts any failure of ACK-03 in any test; "
        "name the tests and the failure's text",
        "baseline b.toml: deviation #2 (ACK-04): no message: it accepts any failure of ACK-04; name the tests and "
        "the failure's text"]


def test_an_entry_accepting_the_models_generic_wording_is_refused() -> None:
    """RQ-01's generic wording ("not a message at the head of") covers every requeue-order failure."""
    with pytest.raises(BaselineError, match=r"deviation #1 \(RQ-01\): 'message' /RQ-01: not a message at the head "
                                            r"of/ would accept the model's generic wording for RQ-01"):
        parse_baseline('[[deviation]]\nrule = "RQ-01"\nreason = "r"\ntests = ["t"]\n'
                       'message = "RQ-01: not a message at the head of"\n', "b.toml")
    with pytest.raises(BaselineError, match="generic wording for QOS-02"):
        parse_baseline('[[deviation]]\nrule = "QOS-02"\nreason = "r"\ntests = ["t"]\nmessage = "did not arrive"\n')
    parse_baseline('[[deviation]]\nrule = "RQ-01"\nreason = "r"\ntests = ["t"]\n'
                   'message = "never delivered before overtook the requeued ones"\n')


@pytest.mark.gate  # the timeout machine end to end, about a minute: `make test-gates`
def test_an_entry_for_one_rule_of_a_machine_does_not_accept_a_failure_of_another(tmp_path: Path) -> None:
    """The 4.3.6 baseline's TMO-4.3-5 entry covers the timeout machine; a broker that takes the larger
    of the queue's and the policy's timeout (fault timeout_max_of_queue_and_policy) fails the same
    machine as TMO-03: the gate exits 1 and the machine's failure is not `expected`."""
    import os
    import shutil
    import subprocess
    import sys

    from conformance.results.parts import read_table
    from conformance.suite.timeout import test_machine_timeout

    suite = tmp_path / "suite"  # the timeout machine alone
    suite.mkdir()
    shutil.copy(Path(test_machine_timeout.__file__), suite / "test_machine_timeout.py")
    (entry,) = [d for d in load_baseline(REPO / "baselines" / "rabbitmq-4.3.6.toml").deviations
                if d.rule == "TMO-4.3-5" and any("test_machine_timeout" in t for t in d.tests)]
    baseline = tmp_path / "baseline.toml"
    baseline.write_text(f'[[deviation]]\nrule = "TMO-4.3-5"\nreason = "known bug"\nintermittent = true\n'
                        f'tests = {list(entry.tests)!r}\n'.replace("'", '"'))
    # the embedded broker with its management API (the machine sets policies), the fault switched on
    run = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--suite", str(suite),
                          "--baseline", str(baseline), "--out", str(tmp_path / "out")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "AMQPC_BROKER_FAULTS": "timeout_max_of_queue_and_policy"})
    assert run.returncode == 1, run.stdout + run.stderr
    (machine,) = read_table(tmp_path / "out" / "results", "tests").to_pylist()
    assert machine["verdict"] == "failed" and "TMO-03" in machine["failed_rules"], machine["message"]
    assert "TMO-4.3-5" not in machine["failed_rules"] and "0 expected failures" in run.stdout
    assert "intermittent TMO-4.3-5 (test_machine_timeout.py::" in run.stdout and "not seen in this run" in run.stdout


def test_the_3_10_8_rq01_entry_accepts_only_the_recover_race() -> None:
    """The shipped entry accepts the prefetch machine's failure only where a message never delivered
    before overtook what basic.recover requeued (3.10.8's limiter race); another requeue-order failure
    of the same machine (the model's generic wording, or an overtaking after a reject) fails the gate."""
    from conformance.model import wording

    root = Path(__file__).resolve().parents[2]
    baseline = load_baseline(root / "baselines" / "rabbitmq-3.10.8.toml")
    nodeid = "conformance/suite/qos/test_machine_prefetch.py::test_prefetch_limits_match_the_model"
    rules = ("QOS-02", "RQ-01")

    def failure(clause: str) -> TestEvidence:
        text = (f"Violation: unexpected Deliver(consumer_tag='c1', delivery_tag=4, redelivered=False, body=b'm9') "
                f"on channel 1 ({wording.head_of_queue('RQ-01', 'classic')}{clause}); allowed now: [...]")
        return TestEvidence(nodeid, "failed", "qos", rules, failures={"RQ-01": text})

    race = failure(f": {wording.overtook('basic.recover')}")
    assert judge([race], baseline, "rabbitmq-3.10").outcome(race) == "expected"
    for other in (failure(""), failure(f": {wording.overtook('')}")):
        assert judge([other], baseline, "rabbitmq-3.10").outcome(other) == "failed", other.failures


def test_a_written_baseline_rejects_a_new_failure_of_the_same_rule_in_the_same_test(tmp_path: Path) -> None:
    """`amqp-conformance baseline` names the failing test and what its failure said: the same failure
    in a later run is expected, another failure of the same rule in the same test is not."""
    said = ("ACK-03 broken: unknown delivery tag closes the channel\n"
            "AssertionError: got channel closed 404 (60/80) NOT_FOUND - no queue 'amqpc.test_a.q.5f3a9c21'; "
            "expected channel 406 PRECONDITION_FAILED")
    record = _record("r1", "test_a", "failed", ["ACK-03"], said)
    record.failed_rules = ["ACK-03"]
    _results(tmp_path, "r1", [record], datetime(2024, 1, 1, tzinfo=UTC))
    baseline = parse_baseline(from_results(tmp_path)[0])
    (entry,) = baseline.deviations
    assert entry.tests == ("test_x.py::test_a",) and entry.message, entry
    nodeid = "conformance/suite/test_x.py::test_a"

    def failure(text: str) -> TestEvidence:
        return TestEvidence(nodeid, "failed", "ack", ("ACK-03",), failures={"ACK-03": text})

    same = failure(said.splitlines()[1].replace("5f3a9c21", "0b1c2d3e"))  # the next run's own queue name
    new = failure("AssertionError: got connection closed 504 (60/80) CHANNEL_ERROR; expected channel 406")
    assert judge([same], baseline, "rabbitmq-3.10").outcome(same) == "expected"
    assert judge([new], baseline, "rabbitmq-3.10").outcome(new) == "failed"
