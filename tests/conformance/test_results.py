"""Tests of the results records (conformance/plugin/results.py): schema, frame fields, Parquet layout."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from codec import (
    BasicAck,
    BasicConsume,
    BasicDeliver,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BodyFrame,
    ChannelClose,
    Command,
    ConnectionStart,
    ConnectionStartOk,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
)
from conformance.drivers.raw import FrameRecord
from conformance.results.parts import ResultsWriter, publish_staged, read_table
from conformance.results.records import (
    COLUMNS,
    PARTITION_KEY,
    SCHEMAS,
    RunRecord,
    TestRecord,
    body_digest,
    frame_fields,
    frame_rows,
    redact_url,
    spark_ddl,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _run(run_id: str = "r1") -> RunRecord:
    return RunRecord(run_id, "amqp://guest@127.0.0.1:5672/", "raw", "0.1.0", 1.0, NOW, product="RabbitMQ",
                     version="3.10.8", profile="rabbitmq-3.10")


def _test(test_id: str, run_id: str = "r1", verdict: str = "passed") -> TestRecord:
    return TestRecord(run_id, test_id, ["ACK-03"], "ack", verdict, "passed", "call", NOW, 0.01, 0.02)


def _frames() -> list[FrameRecord]:
    return [
        FrameRecord(10.0, 1, "out", -1, b"AMQP\x00\x00\x09\x01"),
        FrameRecord(10.1, 1, "out", 1, Command(1, BasicAck(delivery_tag=3, multiple=True))),
        FrameRecord(10.2, 1, "in", 1, MethodFrame(1, ChannelClose(406, "PRECONDITION_FAILED - unknown delivery tag 3", 60, 80))),
    ]


def test_record_dataclasses_match_the_declared_columns() -> None:
    assert {f.name for f in dataclasses.fields(RunRecord)} == {c.name for c in COLUMNS["runs"]}
    assert {f.name for f in dataclasses.fields(TestRecord)} == {c.name for c in COLUMNS["tests"]}
    produced = set().union(*(frame_rows("r", "t", [f], 0.0).__next__().keys() for f in _frames()))
    assert produced <= {c.name for c in COLUMNS["frames"]}
    assert SCHEMAS["tests"].field("rule_ids").type.value_type == SCHEMAS["runs"].field("run_id").type


def test_schema_spark_ddl_is_derived_from_the_columns() -> None:
    ddl = spark_ddl("frames")
    assert ddl.startswith("run_id STRING NOT NULL, test_id STRING NOT NULL, connection INT NOT NULL")
    assert "delivery_tag BIGINT," in ddl and "multiple BOOLEAN," in ddl
    assert "rule_ids ARRAY<STRING> NOT NULL" in spark_ddl("tests")
    assert len(ddl.split(", ")) == len(COLUMNS["frames"])


def test_redact_url_drops_only_the_password() -> None:
    assert redact_url("amqp://guest:secret@host:5672/v") == "amqp://guest@host:5672/v"
    assert redact_url("http://admin:pw@h:15672") == "http://admin@h:15672"
    assert redact_url("amqp://host/") == "amqp://host/"
    assert redact_url("rabbitmqctl") == "rabbitmqctl"


def test_frame_fields_per_frame_kind() -> None:
    ack = frame_fields(Command(1, BasicAck(delivery_tag=7, multiple=True)))
    assert ack == {"frame_type": "method", "class_id": 60, "method_id": 80, "method": "basic.ack",
                   "delivery_tag": 7, "multiple": True}
    nack = frame_fields(MethodFrame(1, BasicNack(delivery_tag=2, multiple=False, requeue=True)))
    assert (nack["method"], nack["requeue"]) == ("basic.nack", True)
    deliver = frame_fields(MethodFrame(1, BasicDeliver("ctag", 4, True, "", "q")))
    assert (deliver["consumer_tag"], deliver["delivery_tag"], deliver["redelivered"]) == ("ctag", 4, True)
    publish = frame_fields(Command(1, BasicPublish(exchange="", routing_key="q"), None, b"12345"))
    assert (publish["method"], publish["body_size"]) == ("basic.publish", 5)
    assert frame_fields(HeaderFrame(1, 60, 0, 99, None)) == {"frame_type": "header", "class_id": 60, "body_size": 99}
    assert frame_fields(HeaderFrame(1, 60, 0, 9, BasicProperties(priority=3)))["priority"] == 3  # RQ-01 order
    assert frame_fields(BodyFrame(1, b"abc")) == {"frame_type": "body", "body_size": 3,
                                                  "body_digest": body_digest(b"abc")}
    assert publish["body_digest"] == body_digest(b"12345") != body_digest(b"12346")
    assert frame_fields(HeartbeatFrame(0)) == {"frame_type": "heartbeat"}
    assert frame_fields(b"AMQP\x00\x00\x09\x01") == {"frame_type": "protocol-header"}
    assert frame_fields(b"\x01\x00") == {"frame_type": "raw", "body_size": 2}
    close = frame_fields(MethodFrame(0, ChannelClose(406, "PRECONDITION_FAILED - x", 60, 80)))
    assert (close["reply_code"], close["reply_text"]) == (406, "PRECONDITION_FAILED - x")


def test_frame_fields_for_the_audit() -> None:
    qos = frame_fields(Command(1, BasicQos(prefetch_count=3, global_=True)))
    assert (qos["prefetch_count"], qos["global_qos"]) == (3, True)
    consume = frame_fields(Command(1, BasicConsume(queue="q1", consumer_tag="c", no_ack=True)))
    assert (consume["queue"], consume["no_ack"]) == ("q1", True)
    start = frame_fields(MethodFrame(0, ConnectionStart(0, 9, {"product": "RabbitMQ", "version": "3.10.8",
                                                             "capabilities": {"basic.nack": True, "x": False}})))
    assert (start["product"], start["version"], start["capabilities"]) == ("RabbitMQ", "3.10.8", ["basic.nack"])
    start_ok = frame_fields(Command(0, ConnectionStartOk({"capabilities": {"consumer_cancel_notify": True}})))
    assert start_ok["capabilities"] == ["consumer_cancel_notify"] and start_ok["product"] is None


def test_writer_partitions_by_run_and_runs_accumulate(tmp_path: Path) -> None:
    for run_id in ("r1", "r2"):
        writer = ResultsWriter(tmp_path, run_id)
        writer.write_run(_run(run_id))
        writer.add_test(_test("t::a", run_id), _frames())
        writer.add_test(_test("t::b", run_id, "failed"))
        writer.close()
    assert len(list((tmp_path / "tests" / f"{PARTITION_KEY}=r1").glob("part-00000-*.parquet"))) == 1
    tests = read_table(tmp_path, "tests")
    assert tests.num_rows == 4
    assert sorted(set(tests.column("run").to_pylist())) == ["r1", "r2"]
    one = read_table(tmp_path, "tests", "r2").to_pylist()
    assert {(r["test_id"], r["verdict"], r["frames"]) for r in one} == {("t::a", "passed", 3), ("t::b", "failed", 0)}
    assert read_table(tmp_path, "runs").num_rows == 2


def test_written_files_carry_the_declared_schema(tmp_path: Path) -> None:
    writer = ResultsWriter(tmp_path, "r1")
    writer.write_run(_run())
    writer.add_test(_test("t::a"), _frames())
    writer.close()
    for table in ("runs", "tests", "frames"):
        (path,) = (tmp_path / table / "run=r1").glob("*.parquet")
        assert pq.read_schema(path).remove_metadata() == SCHEMAS[table]
    frames = read_table(tmp_path, "frames", "r1").to_pylist()
    assert [f["seq"] for f in frames] == [0, 1, 2]
    assert [f["frame_type"] for f in frames] == ["protocol-header", "method", "method"]
    assert frames[2]["reply_code"] == 406 and frames[1]["multiple"] is True
    assert (frames[1]["ts"] - frames[0]["ts"]).total_seconds() == pytest.approx(0.1, abs=1e-5)


def test_writer_flushes_in_bounded_batches_and_rewrites_the_run_record(tmp_path: Path) -> None:
    writer = ResultsWriter(tmp_path, "r1", batch_rows=4)
    run = _run()
    writer.write_run(run)
    for n in range(5):
        writer.add_test(_test(f"t::{n}"), _frames())
    parts = tmp_path / "frames" / "run=r1"
    assert len(list(parts.glob("part-*.parquet"))) == 2  # 6 + 6 rows flushed, 3 pending
    writer.close()
    assert len(list(parts.glob("part-*.parquet"))) == 3
    run.finished, run.exit_status, run.tests = NOW, 0, writer.tests_written
    writer.write_run(run)
    assert read_table(tmp_path, "frames").num_rows == 15
    assert read_table(tmp_path, "tests").num_rows == 5
    (record,) = read_table(tmp_path, "runs").to_pylist()
    assert (record["exit_status"], record["tests"], record["finished"]) == (0, 5, NOW)
    assert not list(tmp_path.rglob(".*.tmp"))


def test_staged_writers_rows_are_published_whole_and_a_cut_line_is_left_out(tmp_path: Path) -> None:
    writers = [ResultsWriter(tmp_path, "r1", staged=True, batch_rows=4) for _ in range(2)]
    for n, writer in enumerate(writers):
        for m in range(3):
            writer.add_test(_test(f"t::{n}.{m}"), _frames())  # a batch of frames staged on the way
        writer.close()
    staged = sorted((tmp_path / "frames" / "run=r1").glob(".part-*.jsonl"))
    assert len(staged) == 2 and not list(tmp_path.rglob("*.parquet"))  # nothing readable yet
    with open(staged[1], "ab") as cut:
        cut.write(b'{"run_id": "r1", "test_id": "t::cut"')  # a worker killed while it wrote
    assert publish_staged(tmp_path, "r1") == 6 + 18
    assert not list(tmp_path.rglob(".part-*"))
    assert sorted(r["test_id"] for r in read_table(tmp_path, "tests", "r1").to_pylist()) == \
        ["t::0.0", "t::0.1", "t::0.2", "t::1.0", "t::1.1", "t::1.2"]
    frames = read_table(tmp_path, "frames", "r1").to_pylist()
    assert len(frames) == 18 and {f["test_id"] for f in frames} == {f"t::{n}.{m}" for n in (0, 1) for m in range(3)}
    assert publish_staged(tmp_path, "r1") == 0  # published once


def test_a_staged_writer_never_imports_arrow(tmp_path: Path) -> None:
    code = ("import sys; from datetime import UTC, datetime; from conformance.results.parts import ResultsWriter; "
            "from conformance.results.records import TestRecord; from conformance.drivers.raw import FrameRecord; "
            f"w = ResultsWriter({str(tmp_path)!r}, 'r1', staged=True); "
            "w.add_test(TestRecord('r1', 't::a', ['ACK-03'], 'ack', 'passed', 'passed', 'call', datetime.now(UTC)), "
            "[FrameRecord(10.0, 1, 'out', -1, b'AMQP\\x00\\x00\\x09\\x01')]); w.close(); "
            "print(sorted(m for m in ('pyarrow', 'numpy', 'pandas') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    assert len(list(tmp_path.rglob(".part-*.jsonl"))) == 2  # its tests and its frames, staged


def test_read_table_rejects_an_unknown_table(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown results table"):
        read_table(tmp_path, "nope")


def test_one_exit_status_for_every_run() -> None:
    """The kernel's exit status: the highest-priority condition wins (4, 3, 2, 1, 0)."""
    from conformance.results.verdicts import exit_status

    assert exit_status() == (0, None)
    assert exit_status(outcomes={"passed", "expected", "xpass"}) == (0, None)
    assert exit_status(outcomes={"xpass"}, strict=True, xpasses=True) == (1, None)
    assert exit_status(outcomes={"failed", "passed"}) == (1, None)
    assert exit_status(outcomes={"failed", "broken"}) == (2, None)
    assert exit_status(harness_error="interrupted", outcomes={"failed"}) == (2, "interrupted")
    assert exit_status(broker_down="broker down: x", harness_error="y", outcomes={"broken"}) == (3, "broker down: x")
    assert exit_status(usage_error="bad", broker_down="down") == (4, "bad")


def test_a_delivery_tag_over_its_whole_range_is_stored_and_shown_as_sent() -> None:
    """ACK-03's tags reach 2^64-1; the frames table's bigint holds them in two's complement, and
    the report shows the tag that was sent."""
    from codec import BasicAck, Command
    from conformance.results.records import frame_fields, stored_tag, tag_from_column
    from reports.render import _field

    for tag in (0, 1, 2**63 - 1, 2**63, 2**64 - 1):
        stored = frame_fields(Command(1, BasicAck(delivery_tag=tag), None, b""))["delivery_tag"]
        assert stored == stored_tag(tag) and -(2**63) <= stored < 2**63
        assert tag_from_column(stored) == tag
        assert _field("delivery_tag", stored) == f"delivery_tag={tag}"
