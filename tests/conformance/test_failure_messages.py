"""Failure messages say, whole, what the rule required and what the broker did.

The explanation of a suite assertion (`conformance.plugin.explain`) and of a close that never
came (`classify.did_not_raise`) in isolation, then a run of suite tests through the pytest plugin
against a reference broker with named faults (reference_broker/faults.py): no message of the
run, in the records or on the console, holds pytest's truncation ("deli...ultiple", "Use -v
to get more diff") or pytest's diff of two values, and each names the expectation and the
broker's answer.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from codec import BasicAck, ChannelOpenOk, MethodFrame, QueueDeclareOk
from codec.constants import ClassId, ReplyCode
from conformance.drivers.raw import FrameRecord
from conformance.plugin.classify import did_not_raise, exception_text, rule_failures
from conformance.plugin.explain import explain_comparison
from conformance.suite import SUITE_DIR
from reference_broker.server import EmbeddedBroker

# pytest's cuts: a repr shortened in its middle ("BasicAck(deli...ultiple=False)"), a shortened
# explanation ("...Full output truncated (3 lines hidden), use '-vv' to show", "Use -v to get more
# diff"), and its line diff of two values ("Full diff:"), which our explanation replaces
TRUNCATION = re.compile(r"\w\.\.\.\w|\w\.\.\.[)\]}'\"]|Use -v to get|use '-vv' to show|lines? hidden\)|Full diff:")


def test_truncation_pattern_finds_pytests_cuts() -> None:
    for cut in ("assert BasicAck(deli...ultiple=False) == x", "...Full output truncated (2 lines hidden), use '-vv' to show",
                "Use -v to get more diff", "assert 'amqpc.test_a...' == 'b'", "  Full diff: (-: missing in left side"):
        assert TRUNCATION.search(cut), cut
    for whole in ("got basic.ack delivery-tag=2 multiple=False, expected basic.ack delivery-tag=1 multiple=False",
                  "no channel.close from the broker where the rule requires one (DID NOT RAISE ChannelClosed)",
                  "RQ-01..RQ-03 broken", "an ellipsis alone... is prose"):
        assert not TRUNCATION.search(whole), whole


def test_a_comparison_reads_got_then_expected_in_full() -> None:
    tag = "amqpc." + "q" * 300
    got = explain_comparison("==", ("connection", 501, 0, 0), ("connection", ReplyCode.COMMAND_INVALID, ClassId.BASIC, 60),
                             rule_test=True)
    assert got == ["got ('connection', 501, 0, 0), expected ('connection', 503 COMMAND_INVALID, 60 BASIC, 60)",
                   "at index 1: got 501, expected 503 COMMAND_INVALID", "at index 2: got 0, expected 60 BASIC",
                   "at index 3: got 0, expected 60"]
    assert explain_comparison("==", set(), {2, 5, 6}, rule_test=True) == ["got set(), expected {2, 5, 6}",
                                                                          "missing: {2, 5, 6}"]
    assert explain_comparison("==", {tag: 0}, {tag: 1}, rule_test=True) == [
        f"got {{'{tag}': 0}}, expected {{'{tag}': 1}}", f"'{tag}': got 0, expected 1"]
    assert explain_comparison("==", BasicAck(delivery_tag=2), BasicAck(delivery_tag=1)) == [
        "got basic.ack delivery-tag=2 multiple=False, expected basic.ack delivery-tag=1 multiple=False"]


def test_a_comparison_that_holds_is_written_as_it_is_and_other_tests_keep_pytests() -> None:
    assert explain_comparison("==", b"m1", b"m1", rule_test=True) == ["b'm1' == b'm1'"]  # one operand of an `and`
    assert explain_comparison("==", [1, 2], [1, 3]) is None  # the project's own tests: pytest's explanation
    assert explain_comparison("<", 1, 2, rule_test=True) is None
    assert explain_comparison("==", object(), 1, rule_test=True) is None  # not plain data


def test_a_close_that_never_came_names_what_the_broker_sent_instead() -> None:
    frames = [FrameRecord(0.0, 1, "in", 1, MethodFrame(1, ChannelOpenOk())),
              FrameRecord(0.1, 1, "out", 1, MethodFrame(1, BasicAck(delivery_tag=5))),
              FrameRecord(0.2, 1, "in", 1, MethodFrame(1, QueueDeclareOk(queue="q", message_count=1, consumer_count=0)))]
    assert did_not_raise("DID NOT RAISE ChannelClosed", frames) == (
        "no channel.close from the broker where the rule requires one (DID NOT RAISE ChannelClosed); its last "
        "replies in this test: ch1 channel.open-ok channel-id=b''; ch1 queue.declare-ok queue='q' message-count=1 "
        "consumer-count=0")
    assert did_not_raise("DID NOT RAISE any of (ChannelClosed, ConnectionClosed)", []).startswith(
        "no channel.close or connection.close from the broker")
    assert did_not_raise("something else", frames) == "something else"


PROGRESS = re.compile(r"^[.FEsxX]+\s*(\[\s*\d+%\])?$")  # pytest -q's progress line: dots, not cuts
FAULTS = ["double_ack_accepted", "soft_errors_close_connection", "redelivered_not_set"]
NODES = {  # test -> what its failure must say
    "ack/test_ack.py::test_double_ack_is_an_unknown_tag[plain]":
        ("ACK-04", "no channel.close from the broker where the rule requires one", "queue.declare-ok"),
    "errors/test_errors.py::test_soft_errors_close_only_their_channel[404]":
        ("ERR-02", "got ('connection', 404, 50, 10), expected ('channel', 404 NOT_FOUND, 50 QUEUE, 10)",
         "at index 0: got 'connection', expected 'channel'"),
    "requeue/test_requeue.py::test_classic_requeue_restores_the_original_position[channel-close]":
        ("RQ-01", "the redelivered flag of each message", "b'm1': got False, expected True"),
    "requeue/test_requeue.py::test_redelivered_is_false_first_and_true_after_a_return[reject-classic]":
        ("RQ-04", "came back with redelivered=false", "must come back with redelivered=true"),
    "ack/test_ack_settle.py::test_nack_multiple_requeue_puts_every_message_back[up-to-3]":
        ("ACK-07", "b'm1' (tag 4), b'm2' (tag 5), b'm3' (tag 6) came back with redelivered=false", "ACK-06 broken"),
}


@pytest.mark.timeout(300)
def test_failures_through_the_plugin_are_whole_and_say_what_happened(tmp_path: Path) -> None:
    from conformance.results.parts import read_table

    with EmbeddedBroker(faults=FAULTS) as broker:
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                              "-o", "addopts=", "-rfE", "--tb=short", "--broker-url", broker.url,
                              "--results-dir", str(tmp_path), "--run-id", "messages",
                              *(f"{SUITE_DIR}/{node}" for node in NODES)],
                             capture_output=True, text=True, timeout=240, check=False)
    assert run.returncode == 1, run.stdout[-3000:]
    tests = {row["test_id"].split("/")[-1]: row for row in read_table(tmp_path, "tests", "messages").to_pylist()}
    assert set(tests) == {node.split("/")[-1] for node in NODES}, sorted(tests)
    for node, (rule_id, *said) in NODES.items():
        row = tests[node.split("/")[-1]]
        message = row["message"] or ""
        assert row["verdict"] == "failed" and rule_id in row["failed_rules"], (node, row["verdict"], message)
        assert not TRUNCATION.search(message), (node, message)
        assert all(part in message for part in said), (node, message)
    console = "\n".join(line for line in run.stdout.splitlines() if not PROGRESS.match(line))
    assert not TRUNCATION.search(console), console[-3000:]


def test_a_rule_quoted_by_an_asserts_condition_is_not_a_broken_rule() -> None:
    """`assert cond, message`: pytest appends its introspection of `cond`; a rule id in the condition's
    source (`profile.expect('FRM-01')`) is not what the failure names (the FRM-02 test named FRM-01,
    so the 4.3.6 baseline's FRM-02 entry did not accept RabbitMQ's silent tune-ok refusal)."""
    rewritten = AssertionError("the broker ended the socket (reset) without connection.close 530\n"
                               "assert (False or False)\n +  where 'required' = expect('FRM-01')")
    failures = rule_failures(rewritten, exception_text(rewritten), ["FRM-02"])  # as the plugin calls it
    assert list(failures) == ["FRM-02"]
    assert "without connection.close 530" in failures["FRM-02"]
    bare = AssertionError("assert BasicAck(delivery_tag=2) == BasicAck(delivery_tag=1)")  # no message: kept whole
    assert rule_failures(bare, exception_text(bare), ["PC-13"])["PC-13"].endswith("== BasicAck(delivery_tag=1)")
