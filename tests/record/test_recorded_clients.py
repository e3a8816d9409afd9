"""Traffic no one here wrote: pika, py-amqp and kombu programs recorded through the relay, audited.

GarageMQ's known deviations (docs/garagemq.md) must come out of the traffic alone: requeued
messages come back with redelivered=false (RQ-04), and deleting a queue that has a consumer
wedges the vhost, so neither queue.delete-ok nor the consumer's basic.cancel ever comes (CCN-02).
RabbitMQ 3.10.8 running the same programs must give no finding at all.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest

from reports.audit.lake import audit_lake
from tests.conftest import require
from tests.garagemq_broker import GarageMQ, available
from tests.record import programs
from tests.record.relay_thread import lake_relay

PROGRAMS = ("pika_work_queue", "pika_confirms", "kombu_work_queue", "pyamqp_confirms", "cancelled_by_deletion")
LIMIT = 12.0  # seconds per program; a wedged broker leaves the program blocked until the relay closes


def _record(out: Path, host: str, port: int, name: str) -> tuple[bool, object]:
    with lake_relay(out, host, port) as relay:
        url = f"amqp://guest:guest@127.0.0.1:{relay.port}/"
        return programs.run_bounded(getattr(programs, name), url, f"amqpc-audit-{uuid.uuid4().hex[:10]}", LIMIT)


@pytest.mark.rabbitmq
def test_recorded_programs_on_rabbitmq_give_no_finding(tmp_path: Path, rabbitmq: None) -> None:
    outcomes = {name: _record(tmp_path, "127.0.0.1", 5672, name) for name in PROGRAMS}
    assert all(finished for finished, _ in outcomes.values()), outcomes
    assert outcomes["cancelled_by_deletion"][1] == {"deleted": True, "cancelled": True}
    assert len(outcomes["pika_work_queue"][1]) == programs.MESSAGES  # type: ignore[arg-type]
    found = audit_lake(tmp_path)
    assert found.num_rows == 0, found.to_pylist()


@pytest.mark.garagemq
@pytest.mark.gate  # a GarageMQ of its own and every program against it: `make test-gates`, out of make test's five minutes
def test_recorded_programs_show_garagemqs_deviations(tmp_path: Path) -> None:
    require(available(), "GarageMQ (Debian package garagemq)")
    for name in PROGRAMS:  # a fresh broker each: the deletion wedges the vhost for good
        with GarageMQ(lifetime=120) as broker:
            finished, result = _record(tmp_path, broker.host, broker.port, name)
        assert finished, (name, result)
    found = audit_lake(tmp_path)
    kinds = Counter(zip(found["kind"].to_pylist(), found["rule_id"].to_pylist(), strict=True))
    # every message of both work queues was requeued once and came back unflagged
    assert kinds[("redelivered-missing", "RQ-04")] == 2 * programs.MESSAGES
    assert kinds[("delete-unanswered", "CCN-02")] == 1 and kinds[("cancel-missing", "CCN-02")] == 1
    assert set(kinds) == {("redelivered-missing", "RQ-04"), ("delete-unanswered", "CCN-02"),
                          ("cancel-missing", "CCN-02")}, kinds
