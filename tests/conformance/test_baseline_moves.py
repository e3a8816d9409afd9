"""Baselines survive moves of the suite's files (the suite split by area).

A baseline names tests by their name and rule, the file a hint only (conformance/results/baseline.py).
The data directory keeps the shipped baselines as they were before the suite was split into
areas (`data/baselines-before-suite-split/`), and a user's baseline written then with full node
ids (`conformance/suite/test_*.py::...`, below): judged against today's suite they accept the
same failures as the migrated shipped baselines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from collections import Counter
from pathlib import Path

import pytest

from conformance.plugin.evidence import TestEvidence
from conformance.plugin.evidence import test_key as key_of
from conformance.results.baseline import (
    EXPECTED,
    Baseline,
    Deviation,
    covered_by,
    judge,
    load_baseline,
    parse_baseline,
)
from conformance.suite import SUITE_DIR

REPO = Path(__file__).resolve().parents[2]
BEFORE = Path(__file__).resolve().parent / "data" / "baselines-before-suite-split"

# A user's baseline written before the split, with the node ids of the flat suite; what each entry
# names now (test keys: file name and test), whatever the file's new directory.
USER_BASELINE = '''
[[deviation]]
rule = "TMO-4.3-5"
reason = "moved from test_timeout.py (which still exists) to test_timeout_quorum.py"
tests = ["conformance/suite/test_timeout.py::test_late_settle_is_accepted_and_the_consumer_resumes[reject]"]

[[deviation]]
rule = "ERR-04"
reason = "test_errors.py split: the ERR-04 texts are in test_error_texts.py"
tests = ["conformance/suite/test_errors.py::test_channel_max_exceeded_is_530"]

[[deviation]]
rule = "RQ-01"
reason = "test_machines.py is gone: its requeue machine is requeue/test_machine_requeue.py"
tests = ["conformance/suite/test_machines.py::test_requeue_order_and_redelivered_match_the_model"]

[[deviation]]
rule = "PC-03"
reason = "a name two files have (the suite through clients too): the file decides"
tests = ["conformance/suite/test_confirms.py::test_confirm_select_on_a_tx_channel_is_406"]

[[deviation]]
rule = "ACK-07"
reason = "every parametrisation, from test_ack.py to test_ack_settle.py"
tests = ["conformance/suite/test_ack.py::test_reject_and_nack_requeue_or_discard_without_reply"]
'''
USER_NAMES_NOW = [
    {"test_timeout_quorum.py::test_late_settle_is_accepted_and_the_consumer_resumes[reject]"},
    {"test_error_texts.py::test_channel_max_exceeded_is_530"},
    {"test_machine_requeue.py::test_requeue_order_and_redelivered_match_the_model"},
    {"test_confirms.py::test_confirm_select_on_a_tx_channel_is_406"},
    {f"test_ack_settle.py::test_reject_and_nack_requeue_or_discard_without_reply[{p}]"
     for p in ("requeue-reject", "requeue-nack", "discard-reject", "discard-nack")},
]


class _Rules:
    """A pytest plugin object: each collected test's rule ids."""

    def __init__(self) -> None:
        self.tests: dict[str, tuple[str, ...]] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            marker = item.get_closest_marker("rules")
            if marker is not None:
                self.tests[item.nodeid] = tuple(str(a) for a in marker.args)


@pytest.fixture(scope="module")
def suite() -> dict[str, tuple[str, ...]]:
    """The shipped suite's tests (the client-library ones too) and their rules, as pytest collects them."""
    rules = _Rules()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = pytest.main([str(SUITE_DIR), "--collect-only", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                            "--client", "pika", "-m", ""], plugins=[rules])
    assert code == pytest.ExitCode.OK
    return rules.tests


def named(deviation: Deviation, suite: dict[str, tuple[str, ...]]) -> list[set[str]]:
    """Per test pattern of the entry: the test keys it names among the suite's tests of its rule."""
    checking = [nodeid for nodeid, rules in suite.items() if deviation.rule in rules]
    return [{key_of(n) for n in covered_by(pattern, checking)} for pattern in deviation.tests]


def failing(suite: dict[str, tuple[str, ...]], keys: set[str], rule: str) -> list[TestEvidence]:
    """The tests of these keys, failed on `rule`."""
    return [TestEvidence(nodeid, "failed", "unknown", rules, failures={rule: "seen"})
            for nodeid, rules in suite.items() if key_of(nodeid) in keys]


def plain(baseline: Baseline) -> Baseline:
    """The entries without their message and profile conditions (this test is about the tests they name)."""
    return dataclasses.replace(baseline, deviations=tuple(
        dataclasses.replace(d, message=None, profiles=()) for d in baseline.deviations))


def accepted(deviation: Deviation, suite: dict[str, tuple[str, ...]]) -> set[str]:
    """The test keys whose failure of the entry's rule it accepts, every test of the suite failing it."""
    tests = [TestEvidence(nodeid, "failed", "unknown", rules, failures={deviation.rule: "seen"})
             for nodeid, rules in suite.items()]
    judged = judge(tests, plain(Baseline("b", (deviation,))), None)
    return {key_of(t.nodeid) for t in tests if judged.outcome(t) == EXPECTED}


@pytest.mark.parametrize("name", ["rabbitmq-3.10.8.toml", "rabbitmq-4.3.6.toml"])
def test_a_baseline_from_before_the_split_accepts_what_the_migrated_one_accepts(
        name: str, suite: dict[str, tuple[str, ...]]) -> None:
    old, new = load_baseline(BEFORE / name), load_baseline(REPO / "baselines" / name)
    kept = new.deviations[:len(old.deviations)]  # the entries added since (new rules' bugs) come after
    assert [d.rule for d in old.deviations] == [d.rule for d in kept]
    moved = 0
    for before, now in zip(old.deviations, kept, strict=True):
        then = accepted(before, suite)
        assert then == accepted(now, suite), before.describe(", ".join(before.tests))
        assert then or not before.tests, f"{before.describe()}: its tests are not in today's suite"
        moved += before.tests != now.tests
    assert moved == (1 if name == "rabbitmq-4.3.6.toml" else 0)  # test_timeout.py::test_late_settle_... moved


def test_a_users_baseline_with_the_old_node_ids_still_matches(suite: dict[str, tuple[str, ...]]) -> None:
    baseline = parse_baseline(USER_BASELINE, "user.toml")
    for deviation, now in zip(baseline.deviations, USER_NAMES_NOW, strict=True):
        assert named(deviation, suite) == [now], deviation.reason
        tests = failing(suite, now, deviation.rule)
        assert {judge(tests, Baseline("user.toml", (deviation,)), None).outcome(t) for t in tests} == {EXPECTED}
    twin = [n for n in suite if n.endswith("::test_confirm_select_on_a_tx_channel_is_406")]
    assert len(twin) == 2  # the name is ambiguous: the file of the entry decided above


def test_suite_file_names_are_unique(suite: dict[str, tuple[str, ...]]) -> None:
    """Baselines and reports name a test by its file's name, not its directory (`evidence.test_key`)."""
    files = Counter(p.name for p in SUITE_DIR.rglob("test_*.py"))
    assert [name for name, count in files.items() if count > 1] == []
    assert {n.partition("::")[0].rsplit("/", 1)[-1] for n in suite} <= set(files)
