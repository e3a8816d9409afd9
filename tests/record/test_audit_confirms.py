"""The audit of publisher confirms on recorded traffic: confirms pending when a
channel closed died with it (PC-13), so the reference broker's recording gives no finding; a
confirm the reference broker's `confirm_lost` fault never sends, on a channel that stays open
past the audit's grace until the recording ends, is PC-05's `confirm-missing` (the honest broker's
recording of the same program has no finding).

Each program runs a raw client through the recording relay (tests.record.relay_thread) in front
of an embedded reference broker."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from codec import (
    BasicAck,
    BasicProperties,
    BasicQos,
    BasicQosOk,
    ConfirmSelect,
    ConfirmSelectOk,
    ConnectionClose,
    ConnectionCloseOk,
    QueueDeclare,
    QueueDeclareOk,
    encode_method,
)
from conformance.drivers.raw import RawClient
from conformance.suite.steps.wire import publish_burst, wait_channel_closed
from reference_broker.server import EmbeddedBroker
from reports.audit.context import recording_contexts
from reports.audit.partition import audit_table
from tests.record import programs
from tests.record.relay_thread import lake_relay

PERSISTENT = BasicProperties(delivery_mode=2)
GRACE_S = 1.0  # conformance.model.recorded_frames.Context.grace_us


def _confirming(url: str, queue: str) -> tuple[RawClient, int]:
    client = RawClient(url, timeout=5).connect()
    ch = client.channel()
    client.rpc(ch, QueueDeclare(queue=queue, durable=True), QueueDeclareOk)
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    return client, ch


def pending_at_every_close(url: str, queue: str) -> None:
    """50 publishes, then at once: the client's channel.close; a bad ack the broker closes the
    channel for; on another connection, the client's connection.close. Their confirms may never
    come (PC-13). The first connection then lingers past the audit's grace, so the recording goes
    on after every close."""
    client, ch = _confirming(url, queue)
    publish_burst(client, ch, [queue] * 50, properties=PERSISTENT)
    client.close_channel(ch)
    ch = client.channel()
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    publish_burst(client, ch, [queue] * 50, properties=PERSISTENT, tail=encode_method(ch, BasicAck(999_999)))
    wait_channel_closed(client, ch, 5)
    other, ch = _confirming(url, queue)
    publish_burst(other, ch, [queue] * 50, properties=PERSISTENT, tail=encode_method(0, ConnectionClose(200, "bye", 0, 0)))
    other.expect(0, ConnectionCloseOk)
    _end_socket(other)
    time.sleep(GRACE_S + 0.3)
    client.rpc(client.channel(), BasicQos(prefetch_count=1), BasicQosOk)
    client.close()


def _end_socket(client: RawClient) -> None:
    assert client.sock is not None
    client.sock.close()
    client.sock = None


def one_lost_on_an_open_channel(url: str, queue: str) -> None:
    """Three publishes, one at a time (the faulty broker never confirms the third, and no later
    multiple=true confirm covers it); the channel stays open past the grace, then the socket ends
    without connection.close (the recording's end)."""
    client, ch = _confirming(url, queue)
    for seqno in range(1, 4):
        publish_burst(client, ch, [queue], properties=PERSISTENT)
        if seqno != 3:
            assert client.expect(ch, BasicAck, timeout=5).method == BasicAck(seqno, multiple=False)
    time.sleep(GRACE_S + 0.3)
    client.rpc(ch, BasicQos(prefetch_count=1), BasicQosOk)
    _end_socket(client)


def record(out: Path, program: Callable[[str, str], object], faults: list[str]) -> pa.Table:
    """The frames of `program` recorded through the relay in front of a reference broker with `faults`."""
    with EmbeddedBroker(faults=faults) as broker, lake_relay(out, broker.host, broker.port) as relay:
        finished, result = programs.run_bounded(program, f"amqp://guest:guest@127.0.0.1:{relay.port}/",
                                                f"amqpc-confirms-{uuid.uuid4().hex[:10]}", 20)
    assert finished and not isinstance(result, Exception), result
    return ds.dataset(out / "frames", format="parquet", partitioning="hive").to_table()


def findings(frames: pa.Table, contexts: dict | None = None) -> Counter[tuple[int, str, str]]:
    found = audit_table(frames, contexts)
    return Counter(zip(found["connection"].to_pylist(), found["kind"].to_pylist(), found["rule_id"].to_pylist(),
                       strict=True))


def test_recorded_confirms_pending_at_a_close_are_no_finding(tmp_path: Path) -> None:
    frames = record(tmp_path, pending_at_every_close, [])
    assert findings(frames) == Counter()
    # the recording went on past the grace after the connection's close: only PC-13 spares it
    unaware = {key: replace(context, connection_closed=False) for key, context in recording_contexts(frames).items()}
    assert findings(frames, unaware) == Counter({(2, "confirm-missing", "PC-05"): 1})


def test_recorded_confirm_lost_on_an_open_channel_is_pc_05(tmp_path: Path) -> None:
    assert findings(record(tmp_path / "honest", one_lost_on_an_open_channel, [])) == Counter()
    assert findings(record(tmp_path / "lost", one_lost_on_an_open_channel, ["confirm_lost"])) == Counter(
        {(1, "confirm-missing", "PC-05"): 1})
