"""The mutation score: a fault is killed only by a failure naming its own rule,
after a clean control; the fast subset (one fault per area) runs here, in `make test`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conformance import mutation
from reference_broker.faults import BY_NAME

EXAMPLE = "state = AckMachine()\nstate.start(ch=1)\nstate.settle(delivery=pick(0))\nstate.teardown()\n"


def _write_run(out: Path, run_id: str, rows: list[dict[str, Any]]) -> None:
    """A run's tests records as the plugin writes them (only the columns the judgement reads)."""
    path = out / "tests" / f"run={run_id}"
    path.mkdir(parents=True)
    schema = pa.schema([("test_id", pa.string()), ("verdict", pa.string()),
                        ("failed_rules", pa.list_(pa.string())), ("minimal_example", pa.string())])
    rows = [{"failed_rules": None, "minimal_example": None, **row} for row in rows]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path / "part-0.parquet")


def _judged(tmp_path: Path, rules: list[str], rows: list[dict[str, Any]], exit_code: int = 1) -> mutation.Outcome:
    _write_run(tmp_path, "r", rows)
    return mutation.judge(mutation.Outcome("a_fault", "ack", rules, exit_code, 10.0, 600.0), tmp_path, "r")


def test_a_failure_naming_only_another_rule_does_not_kill(tmp_path: Path) -> None:
    outcome = _judged(tmp_path, ["ACK-05"], [
        {"test_id": "test_ack.py::test_a", "verdict": "failed", "failed_rules": ["ACK-01", "QOS-02"]},
        {"test_id": "test_machines.py::test_ack_machine", "verdict": "failed", "failed_rules": ["ACK-06"],
         "minimal_example": EXAMPLE},
        {"test_id": "test_ack.py::test_b", "verdict": "passed"}])
    assert not outcome.killed and outcome.failed_rules == ["ACK-01", "ACK-06", "QOS-02"]
    assert outcome.why_not == "failed as ACK-01, ACK-06, QOS-02, not its own rule ACK-05", outcome.why_not
    assert outcome.machine is None and not outcome.own_rule_killers  # a machine failing as another rule found nothing


def test_a_failure_naming_its_own_rule_kills_and_names_its_machine(tmp_path: Path) -> None:
    outcome = _judged(tmp_path, ["CCN-01", "CCN-02"], [  # a deviation with two rules: either kills
        {"test_id": "test_ack.py::test_a", "verdict": "failed", "failed_rules": ["ACK-01"]},
        {"test_id": "test_machine_cancel.py::test_cancel_machine", "verdict": "failed",
         "failed_rules": ["CCN-05", "CCN-02"], "minimal_example": EXAMPLE}])
    assert outcome.killed and outcome.own_rule_killers == ["test_machine_cancel.py::test_cancel_machine"]
    assert (outcome.machine, outcome.shrunk_steps) == ("test_cancel_machine", 2)


def test_a_reduced_failure_counts_the_steps_it_reports_not_its_cause(tmp_path: Path) -> None:
    """A machine's failure reduced by replaying reports its short program first and, after it, the
    longer example Hypothesis reported (the cause): the steps counted are the first case's."""
    reduced = ("Failing test case: <state machine>\nstate = ConfirmMachine()\nstate.select(ch=2)\n"
               "state.publish(ch=2, count=1, to='nowhere')\nstate.teardown()\n(reduced by replaying: 2 of the "
               "9 steps Hypothesis reported still fail as PC-06; this is that replay)\n  m.select(ch=2)\n\n"
               "Failing test case: <state machine>\nstate = ConfirmMachine()\n"
               + "".join(f"state.select(ch={i})\n" for i in range(9)) + "state.teardown()\n")
    assert mutation.shrunk_steps(reduced) == 2 and mutation.shrunk_steps(EXAMPLE) == 2
    assert mutation.shrunk_steps("no program here") == 0
    outcome = _judged(tmp_path, ["PC-06"], [{"test_id": "test_machine_confirms.py::test_m", "verdict": "failed",
                                             "failed_rules": ["PC-06"], "minimal_example": reduced}])
    assert (outcome.machine, outcome.shrunk_steps) == ("test_m", 2)


def test_the_other_conditions_still_hold_when_the_own_rule_failed(tmp_path: Path) -> None:
    own = {"test_id": "t::own", "verdict": "failed", "failed_rules": ["ACK-05"]}
    assert _judged(tmp_path / "a", ["ACK-05"], [own, {"test_id": "t::b", "verdict": "broken"}]).why_not \
        == "1 test(s) broken"
    assert _judged(tmp_path / "b", ["ACK-05"], [own], exit_code=3).why_not == "exit status 3, not 1"
    assert _judged(tmp_path / "c", ["ACK-05"], [own], exit_code=-1).why_not == "over its time limit (600 s)"
    nameless = _judged(tmp_path / "d", ["ACK-05"], [{"test_id": "t::n", "verdict": "failed"}])
    assert nameless.why_not == "no failure named a rule, not its own rule ACK-05"


def test_an_unexpected_exit_status_keeps_what_the_run_said_last(tmp_path: Path) -> None:
    """Exit 2 without a broken record (pytest's collection error, say): the report quotes the run's last line."""
    script = "print('collecting'); print('Interrupted: 1 error during collection'); raise SystemExit(2)"
    outcome = mutation.run_judged(mutation.Outcome("a_fault", "ack", ["ACK-05"], 0, 0.0, 60.0),
                                  [sys.executable, "-c", script], {}, tmp_path, "none")
    assert outcome.why_not == "exit status 2, not 1 (it said: Interrupted: 1 error during collection)"


def test_a_control_is_clean_only_when_nothing_failed_or_broke(tmp_path: Path) -> None:
    passed = {"test_id": "t::ok", "verdict": "passed"}
    clean = _judged(tmp_path / "a", [], [passed], exit_code=0)
    failed = _judged(tmp_path / "b", [], [passed, {"test_id": "t::f", "verdict": "failed", "failed_rules": ["RQ-01"]}])
    assert clean.why_unclean == "" and failed.why_unclean == "1 test(s) failed (RQ-01): t::f"
    assert _judged(tmp_path / "c", [], [passed], exit_code=2).why_unclean == "exit status 2, not 0"
    control = mutation.Control([clean, failed], 3.0)
    assert control.why_not == "ack: 1 test(s) failed (RQ-01): t::f" and not control.summary()["clean"]
    assert mutation.control_groups(["ack", "qos", "ack", "timeout"], 2) == [["ack", "timeout"], ["qos"]]
    assert mutation.area_marker(["ack", "qos"]) == "(area_ack or area_qos) and not slow"


def test_a_failing_control_stops_the_campaign_with_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str | None] = []

    def run_suite(outcome: mutation.Outcome, fault: str | None, *_args: Any, **_kwargs: Any) -> mutation.Outcome:
        ran.append(fault)
        outcome.failed, outcome.failed_rules = ["t::f"], ["QOS-02"]
        return outcome

    monkeypatch.setattr(mutation, "run_suite", run_suite)
    assert mutation.main(["--faults", "prefetch_off_by_one", "--out", str(tmp_path)]) == 2
    assert ran == [None]  # the control ran, clean broker; no fault after it
    summary = json.loads((tmp_path / "mutation.json").read_text())
    assert summary["control"]["why_not"] == "qos: 1 test(s) failed (QOS-02): t::f" and summary["faults"] == []
    assert summary["commit"] and summary["date"]


def test_fast_subset_has_one_fault_per_area() -> None:
    areas = [BY_NAME[name].area for name in mutation.FAST_SUBSET]
    assert sorted(areas) == sorted(set(areas)) and len(areas) == 8


# Both campaigns are `gate` runs (`make test-gates`, which .ci/run runs right after `make test`), as the
# whole campaigns are `make mutation`: three faults in quick areas (about 25 CPU-seconds, their control
# included: out of `make test`'s five minutes since the suite grew), and the fast subset of eight (one
# per area, the timeout area's control alone takes about 50 s). The campaign's parts are unit-tested above.
QUICK = ("multi_ack_only_named", "confirm_duplicated", "frame_max_not_enforced")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("selection", [pytest.param(["--faults", *QUICK], id="quick", marks=pytest.mark.gate),
                                       pytest.param(["--fast"], id="fast", marks=pytest.mark.gate)])
def test_fast_mutation_subset_is_fully_killed(selection: list[str], tmp_path: Path) -> None:
    code = mutation.main([*selection, "--jobs", "2", "--no-machines", "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "mutation.json").read_text())
    assert summary["control"]["clean"], summary["control"]["why_not"]
    survivors = [(f["fault"], f["why_not"]) for f in summary["faults"] if not f["killed"]]
    assert code == 0 and not survivors, f"surviving faults: {survivors}"
    assert all(set(f["rules"]) & set(f["failed_rules"]) for f in summary["faults"]), "killed without its own rule"
    assert (tmp_path / "tests").is_dir()  # the runs were written in the results format


def test_mutation_usage_errors() -> None:
    assert mutation.main(["--faults", "no_such_fault"]) == 4
    assert mutation.main(["--bogus-option"]) == 4


def test_the_cluster_faults_and_their_control_run_on_the_embedded_cluster(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a cluster the cluster area's tests are needs-cluster and its faults cannot be killed:
    their runs, and the control group holding their area, get `--cluster-node embedded`."""
    commands: list[list[str]] = []

    def judged(outcome: mutation.Outcome, cmd: list[str], env: dict[str, str], out: Path,
               run_id: str) -> mutation.Outcome:
        commands.append(cmd)
        return outcome

    monkeypatch.setattr(mutation, "run_judged", judged)
    mutation.run_fault(BY_NAME["cluster_no_cancel_on_node_down"], tmp_path, "area", 60.0)
    mutation.run_fault(BY_NAME["multi_ack_only_named"], tmp_path, "area", 60.0)
    mutation.run_control(tmp_path, ["ack", "cluster"], 2, 60.0, True, 5.0)
    with_cluster = [" ".join(c) for c in commands if "--cluster-node" in c]
    assert [c[c.index("--cluster-node") + 1] for c in commands if "--cluster-node" in c] == ["embedded"] * 2
    assert "area_cluster" in with_cluster[0] and "area_cluster" in with_cluster[1], with_cluster
    assert len(commands) == 4 and sum("area_ack" in " ".join(c) and "--cluster-node" not in c for c in commands) == 2


def test_a_failure_naming_its_rule_only_as_one_of_several_is_not_a_kill(tmp_path: Path) -> None:
    """The model's "one of these" wordings (a delivery that did not arrive: QOS-02..08, RQ-01..03) and
    a failure whose text names no rule (credited to every rule of its test) do not kill the own rule."""
    from conformance.model import wording

    one_of = f"QOS-02 broken: t\nAssertionError: after 2.0 s: {wording.missing_delivery()}"
    outcome = _judged_with_messages(tmp_path / "a", ["QOS-02"], [
        {"test_id": "test_machine_prefetch.py::test_m", "verdict": "failed",
         "failed_rules": ["QOS-02", "QOS-03", "RQ-01"], "message": one_of},
        {"test_id": "test_qos.py::test_t", "verdict": "failed", "failed_rules": ["QOS-02", "QOS-07"],
         "message": "QOS-02 broken: t\nQOS-07 broken: u\nNoReply: no reply within 5.0 s (waiting for basic.get-ok)"}])
    assert not outcome.killed and not outcome.own_rule_killers and len(outcome.ambiguous) == 2
    assert "only among several rules the model could not tell apart" in outcome.why_not, outcome.why_not
    named = _judged_with_messages(tmp_path / "b", ["QOS-02"], [
        {"test_id": "test_qos.py::test_t", "verdict": "failed", "failed_rules": ["QOS-02"],
         "message": "QOS-02 broken: t\nAssertionError: QOS-02: a third delivery beyond prefetch 2"}])
    assert named.killed and named.own_rule_killers == ["test_qos.py::test_t"]


def _judged_with_messages(out: Path, rules: list[str], rows: list[dict[str, Any]]) -> mutation.Outcome:
    path = out / "tests" / "run=r"
    path.mkdir(parents=True)
    schema = pa.schema([("test_id", pa.string()), ("verdict", pa.string()), ("failed_rules", pa.list_(pa.string())),
                        ("minimal_example", pa.string()), ("message", pa.string())])
    pq.write_table(pa.Table.from_pylist([{"minimal_example": None, **r} for r in rows], schema=schema),
                   path / "part-0.parquet")
    return mutation.judge(mutation.Outcome("a_fault", "qos", rules, 1, 10.0, 600.0), out, "r")
