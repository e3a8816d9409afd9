"""The audit's edge cases on recorded traffic: lakes older than a column, nowait methods,
global prefetch, requeue order, and what cannot be judged.

Each check is proven twice: RabbitMQ 3.10.8 running the program gives no finding, and the same
program through a deviation (`tests.conformance.deviations`, in front of the same RabbitMQ, or
GarageMQ) gives the rule's finding.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import dpkt
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from codec._generated import BasicDeliver, BasicQos, ChannelOpen
from conformance.record.pcap import import_capture
from conformance.results.lake import RecordingLake
from reference_broker.server import EmbeddedBroker
from reports.audit.lake import audit_lake
from reports.model import ReportData, Violation
from reports.render import render_site
from tests.conformance import deviations
from tests.conformance.deviant import DeviantProxy, Deviation
from tests.record import edge_programs, programs
from tests.record.relay_thread import lake_relay
from tests.record.test_relay import method, tcp_packets

RABBITMQ = ("127.0.0.1", 5672)
LIMIT = 12.0


def record(out: Path, program: Callable[[str, str], object], deviation: type[Deviation] | None = None,
           upstream: tuple[str, int] = RABBITMQ) -> object:
    """Run `program` through the recording relay (and the deviation proxy, when given); its result."""
    queue = f"amqpc-edge-{uuid.uuid4().hex[:10]}"
    if deviation is None:
        with lake_relay(out, *upstream) as relay:
            finished, result = programs.run_bounded(program, f"amqp://guest:guest@127.0.0.1:{relay.port}/", queue, LIMIT)
    else:
        with DeviantProxy(upstream, deviation) as proxy, lake_relay(out, "127.0.0.1", proxy.port) as relay:
            finished, result = programs.run_bounded(program, f"amqp://guest:guest@127.0.0.1:{relay.port}/", queue, LIMIT)
        assert proxy.actions, f"{deviation.name} never acted"
    assert finished, result
    assert not isinstance(result, Exception), result
    return result


def findings(root: Path) -> Counter[tuple[str, str]]:
    found = audit_lake(root)
    return Counter(zip(found["kind"].to_pylist(), found["rule_id"].to_pylist(), strict=True))


def without_column(root: Path, column: str) -> None:
    """Rewrite every frames part file of the lake without `column`: a lake written before it existed."""
    parts = sorted((root / "frames").rglob("*.parquet"))
    assert parts
    for part in parts:
        table = pq.read_table(part, partitioning=None)
        pq.write_table(table.drop_columns([column]), part)


# --- 4. lakes older than the capabilities column (CCN-01) ----------------------------------


@pytest.mark.rabbitmq
def test_cancel_notification_judged_from_capabilities(tmp_path: Path, rabbitmq: None) -> None:
    honest, forced = tmp_path / "honest", tmp_path / "forced"
    assert record(honest, edge_programs.uncapable_consumer) == {"cancelled": False}
    assert record(honest, programs.cancelled_by_deletion) == {"deleted": True, "cancelled": True}
    assert findings(honest) == Counter()
    assert record(forced, edge_programs.uncapable_consumer, deviations.CancelCapabilityForced) == {"cancelled": True}
    assert findings(forced) == Counter({("cancel-unrequested", "CCN-01"): 1})


@pytest.mark.rabbitmq
def test_a_lake_without_capabilities_counts_cancels_as_not_judged(tmp_path: Path, rabbitmq: None) -> None:
    record(tmp_path, edge_programs.uncapable_consumer, deviations.CancelCapabilityForced)
    record(tmp_path, programs.cancelled_by_deletion)
    without_column(tmp_path, "capabilities")
    found = audit_lake(tmp_path)
    assert set(found["severity"].to_pylist()) == {"unjudged"}, found.to_pylist()  # never a finding
    assert found["kind"].to_pylist() == ["unjudged-capabilities"] * 2
    assert all("no capabilities column" in d for d in found["detail"].to_pylist())


# --- 3. nowait methods: no reply is owed ---------------------------------------------------


@pytest.mark.rabbitmq
def test_nowait_methods_owe_no_reply(tmp_path: Path, rabbitmq: None) -> None:
    received = record(tmp_path / "honest", edge_programs.nowait_program)
    assert len(received) == edge_programs.MESSAGES  # type: ignore[arg-type]
    assert findings(tmp_path / "honest") == Counter()  # no delete-unanswered, no cancel-missing
    record(tmp_path / "plus-one", edge_programs.nowait_program, deviations.PrefetchPlusOne)
    found = findings(tmp_path / "plus-one")  # the nowait consumer is judged from its request on
    assert set(found) == {("prefetch-exceeded", "QOS-02")} and found[("prefetch-exceeded", "QOS-02")] >= 1, found


# --- 2. prefetch with global=true: one limit for the channel (RabbitMQ <= 4.2) ---------------


@pytest.mark.rabbitmq
def test_global_prefetch_over_delivery_is_judged(tmp_path: Path, rabbitmq: None) -> None:
    assert record(tmp_path / "honest", edge_programs.global_prefetch) == 2 * edge_programs.MESSAGES
    assert findings(tmp_path / "honest") == Counter()
    assert record(tmp_path / "plus-one", edge_programs.global_prefetch, deviations.PrefetchPlusOne) == \
        2 * edge_programs.MESSAGES
    found = findings(tmp_path / "plus-one")
    assert set(found) == {("global-prefetch-exceeded", "QOS-03")} and found[("global-prefetch-exceeded", "QOS-03")] >= 1


def test_a_lake_without_emulates_leaves_an_emulating_brokers_global_prefetch_unjudged(tmp_path: Path) -> None:
    """The reference broker emulates RabbitMQ 4.3, where global=true is a per-consumer limit: with
    the emulates column recorded the program is judged by 4.3 and gives nothing; in a lake written
    before that column, the broker is not identified and its global prefetch is counted as not
    judged, never a QOS-03 finding by another version's rule."""
    with EmbeddedBroker() as broker:
        assert record(tmp_path, edge_programs.global_prefetch, upstream=(broker.host, broker.port)) == \
            2 * edge_programs.MESSAGES
    assert findings(tmp_path) == Counter()
    without_column(tmp_path, "emulates")
    found = audit_lake(tmp_path)
    assert set(found["severity"].to_pylist()) == {"unjudged"}, found.to_pylist()
    assert set(found["kind"].to_pylist()) == {"unjudged-global-qos"}
    assert all("not identified" in d for d in found["detail"].to_pylist())


# --- 5. what the model cannot judge is counted, down to the HTML audit page ------------------


def _audit_page(root: Path, out: Path) -> str:
    """The site's audit.html for the lake's audit findings (no JVM: the findings as the build collects them)."""
    found = audit_lake(root).to_pylist()
    violations = [Violation("RabbitMQ 3.10.8 · recorded", r["run_id"], r["test_id"], r["connection"], r["channel"],
                            r["seq"], r["kind"], r["rule_id"], r["severity"], r["detail"], None) for r in found]
    data = ReportData(generated=datetime.now(UTC), results_dir=str(root), runs=2, tests=0, areas=[], targets=[],
                      rules=[], matrix={}, trend=[], changes=[], regressions=[], flakes=[], violations=violations,
                      failing=[])
    render_site(data, out)
    return (out / "audit.html").read_text()


@pytest.mark.rabbitmq
def test_unjudged_traffic_is_counted_on_the_audit_page(tmp_path: Path, rabbitmq: None) -> None:
    lake = tmp_path / "lake"
    record(lake, edge_programs.unknown_method)  # RabbitMQ drops the connection: no close recorded
    capture = tmp_path / "mid.pcap"  # a capture that starts after the handshake (no SYN)
    client = method(1, ChannelOpen()) + method(1, BasicQos(0, 3, False))
    with open(capture, "wb") as handle:
        writer = dpkt.pcap.Writer(handle)
        for n, packet in enumerate(tcp_packets(client, method(1, BasicDeliver("c", 1, False, "", "q")), 40002, False)):
            writer.writepkt(packet, ts=1_700_000_000 + n / 1000)
    recording = RecordingLake(lake, "pcap:mid.pcap")
    import_capture(capture, recording)
    recording.close()
    found = audit_lake(lake)
    assert set(found["severity"].to_pylist()) == {"unjudged"}, found.to_pylist()  # RabbitMQ: no finding
    kinds = Counter(found["kind"].to_pylist())
    assert kinds["unjudged-gap"] == 1 and kinds["unjudged-mid-stream"] >= 1, kinds
    gap = found.filter(pc.equal(found["kind"], "unjudged-gap"))["detail"][0].as_py()
    assert "unknown method 60/99" in gap  # the codec's reason
    page = _audit_page(lake, tmp_path / "site")
    counts = page[page.index('id="unjudged-counts"'):]
    counts = counts[:counts.index("</table>")]
    assert "<td>unjudged-gap</td>" in counts and "<td>unjudged-mid-stream</td>" in counts
    assert f"<td>{kinds['unjudged-mid-stream']}</td>" in counts
    assert "unknown method 60/99" in page and "No findings." in page


# --- 1. requeue order (RQ-01/RQ-02), judged by the model's own ready lists -------------------


@pytest.mark.rabbitmq
def test_requeue_order_is_judged_from_the_frames(tmp_path: Path, rabbitmq: None) -> None:
    honest = tmp_path / "honest"
    for program in (edge_programs.requeue_order, edge_programs.quorum_requeue_order, programs.pika_work_queue,
                    programs.kombu_work_queue):
        record(honest, program)
    assert findings(honest) == Counter()  # judged (a queue not judged would be counted here)
    record(tmp_path / "tail", edge_programs.requeue_order, deviations.RequeueToTail)
    found = findings(tmp_path / "tail")  # requeue done as ack + republish: behind the never-delivered ones
    assert found[("requeue-order", "RQ-01")] >= 1, found
    assert set(found) == {("requeue-order", "RQ-01"), ("redelivered-missing", "RQ-04")}, found


def test_requeue_order_finds_the_reference_brokers_named_fault(tmp_path: Path) -> None:
    for faults in ([], ["requeue_to_tail"]):
        with EmbeddedBroker(faults=faults) as broker:
            record(tmp_path / "-".join(["ok", *faults]), edge_programs.classic_requeue_order,
                   upstream=(broker.host, broker.port))
    assert findings(tmp_path / "ok") == Counter()
    found = findings(tmp_path / "ok-requeue_to_tail")
    assert set(found) == {("requeue-order", "RQ-01")} and found[("requeue-order", "RQ-01")] >= 1, found
