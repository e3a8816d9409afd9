"""The upgrade pre-flight: shapes, judging, the command, the live replay.

The offline tests read a recording shipped as a fixture: `tests.preflight.workload` recorded through
`amqp-conformance record` against RabbitMQ 3.10.8 (fixtures/lake-rabbitmq-3.10.8). The live tests
record the same program again and replay the findings against RabbitMQ 4.3.6 (marked `rabbitmq43`).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.preflight.behaviour import Behaviour, delivery_limit, returned_out
from conformance.preflight.judging import judge, kind_of
from conformance.preflight.replay import replay
from reports.audit.lake import run_partitions
from reports.preflight_cli import preflight_main
from reports.preflight_spark import aggregate, shape_rows, shapes_of_run
from reports.spark import spark_session

FIXTURE = Path(__file__).parent / "fixtures" / "lake-rabbitmq-3.10.8"
# the pre-flight's table for 3.10 -> 4.3, as measured live (docs/preflight.md): rule, what, kind
EXPECTED_4_3 = {
    ("DCL-03", "classic queue declared with x-queue-version", "breaks"),
    ("TMO-04", "classic queue declared with x-consumer-timeout", "breaks"),
    ("TMO-04", "basic.consume with x-consumer-timeout on a classic queue", "breaks"),
    ("DCL-02", "exchange.declare of an unknown type", "differs"),
    ("QOS-03", "basic.qos global=true", "differs"),  # 4.3.6 ignores global=true (global_qos denied)
    ("DCL-04", "transient non-exclusive queue declared", "deprecated"),
    ("DCL-05", "queue declared with x-queue-mode", "deprecated"),
    ("RQ-06", "quorum message returned to its queue more times than the target's delivery limit allows", "differs"),
}


def findings(out: Path) -> set[tuple[str, str, str]]:
    doc = json.loads((out / "preflight.json").read_text())
    return {(f["rule"], f["what"], f["kind"]) for f in doc["findings"]}


# -- pure parts ------------------------------------------------------------------------------
def test_kind_breaks_differs_deprecated() -> None:
    ok, refused = Behaviour(), Behaviour("channel.close", 406, "x")
    assert kind_of(ok, refused) == "breaks"
    assert kind_of(Behaviour("connection.close", 503), refused) == "differs"
    assert kind_of(Behaviour(text="channel-wide"), Behaviour(text="per consumer")) == "differs"
    assert kind_of(ok, Behaviour(deprecated="global_qos")) == "deprecated"
    assert kind_of(ok, ok) is None and kind_of(refused, refused) is None


def test_delivery_limit_by_version() -> None:
    assert delivery_limit("rabbitmq-3.10", None) is None and delivery_limit("rabbitmq-4.0", None) == 20
    assert returned_out("rabbitmq-4.3", None, 21, 0, 0) and not returned_out("rabbitmq-4.3", None, 20, 0, 0)
    assert not returned_out("rabbitmq-4.3", None, 0, 25, 0)  # 4.3: nack requeue does not count
    assert returned_out("rabbitmq-4.0", None, 0, 25, 0)  # 4.0: every return counts (live 4.0.5: gone after 21)
    assert not returned_out("rabbitmq-3.10", None, 25, 25, 25) and returned_out("rabbitmq-3.10", -1, 1, 0, 0)


def test_the_recording_reduces_to_its_shapes() -> None:
    [(_, directory)] = run_partitions(FIXTURE)
    rows = shapes_of_run(directory).to_pylist()
    requests = {(r["method"], r["arguments"], r["reply"]) for r in rows if r["row_kind"] == "request"}
    assert ("queue.declare", '{"x-queue-version":1}', "ok") in requests
    assert ("basic.consume", '{"x-consumer-timeout":"int"}', "ok") in requests  # the value's type only
    assert ("exchange.declare", "{}", "connection.close") in requests
    [returned] = [r for r in rows if r["row_kind"] == "returns"]
    assert (returned["queue_type"], returned["by_reject"], returned["by_nack"]) == ("quorum", 25, 0)


# -- the command over the fixture (Spark) ----------------------------------------------------
@pytest.mark.spark
def test_preflight_to_4_3_gives_one_finding_per_row_and_to_3_10_none(tmp_path: Path) -> None:
    assert preflight_main([str(FIXTURE), "--to", "rabbitmq-4.3", "--out", str(tmp_path / "43"),
                           "--spark-master", "local[2]"]) == 1  # breaks: exit 1
    assert findings(tmp_path / "43") == EXPECTED_4_3
    doc = json.loads((tmp_path / "43" / "preflight.json").read_text())
    assert doc["source"] == "rabbitmq-3.10"  # from the recorded connection.start
    assert all(f["frames"] and f["example"]["seq"] in [fr["seq"] for fr in f["frames"]] for f in doc["findings"])
    assert "DCL-03" in (tmp_path / "43" / "preflight.html").read_text()
    # the same shapes (one more Spark job, in the session the command left) judged for other pairs
    # of profiles: the command's exit status follows its findings (exit 0 without `breaks`)
    shapes = aggregate(shape_rows(spark_session("local[2]"), FIXTURE))

    def judged(source: str, target: str) -> set[str]:
        return {f.rule for f in judge(shapes["requests"], shapes["returns"], shapes["held"], source, target)}

    assert judged("rabbitmq-3.10", "rabbitmq-3.10") == set()
    assert judged("rabbitmq-4.0", "rabbitmq-4.3") == {"DCL-03", "TMO-04", "QOS-03"}  # DCL-02: same rule


@pytest.mark.parametrize(("argv", "says"), [
    (["/nonexistent", "--to", "rabbitmq-4.3"], "not a directory"),
    ([str(FIXTURE), "--to", "rabbitmq-9.9"], "unknown profile"),
    ([str(FIXTURE), "--to", "rabbitmq-4.3", "--from", "garagemq"], "unknown profile"),
    ([str(FIXTURE), "--to", "rabbitmq-4.3", "--replay", "http://x"], "--replay"),
])
def test_usage_errors_are_one_line_and_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               argv: list[str], says: str) -> None:
    assert preflight_main([*argv, "--out", str(tmp_path)]) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err


# -- a target that hangs ---------------------------------------------------------------------
@pytest.fixture
def silent_broker() -> Iterator[int]:
    """A TCP server that accepts and never answers (not even connection.start)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=2)
    for conn in held:
        conn.close()
    server.close()


def test_a_hanging_target_is_a_finding_not_a_hang(silent_broker: int) -> None:
    [(_, directory)] = run_partitions(FIXTURE)
    requests = [{**r, "count": 1, "connections": 1} for r in shapes_of_run(directory).to_pylist()
                if r["row_kind"] == "request"]
    started = time.monotonic()
    new, replayed = replay(f"amqp://guest:guest@127.0.0.1:{silent_broker}/", requests, [], rpc_timeout=1.0,
                           budget=10.0)
    assert time.monotonic() - started < 8.0
    assert replayed == 0
    assert [(f.kind, f.source) for f in new] == [("breaks", "live")] and "did not answer" in new[0].what


# -- live: record against 3.10.8, replay against 4.3.6 ---------------------------------------
@pytest.mark.rabbitmq43
@pytest.mark.spark
def test_recorded_on_3_10_8_and_confirmed_live_on_4_3_6(tmp_path: Path) -> None:
    from tests.preflight.workload import RETURNS, record

    lake = tmp_path / "lake"
    assert record(lake, "amqp://127.0.0.1:5672", f"amqpc-pf-{uuid.uuid4().hex[:6]}-") == RETURNS
    out = tmp_path / "out"
    status = preflight_main([str(lake), "--to", "rabbitmq-4.3", "--replay", "amqp://guest:guest@127.0.0.1:5743/",
                             "--out", str(out), "--spark-master", "local[2]"])
    assert status == 1
    doc = json.loads((out / "preflight.json").read_text())
    assert {(f["rule"], f["what"], f["kind"]) for f in doc["findings"]} == EXPECTED_4_3  # nothing new live
    for finding in doc["findings"]:
        assert finding["live"].startswith("confirmed"), finding
