"""Checks that used to pass whatever the broker did now judge what their rule says, proven against
a broker that disagrees (the deviation proxy) and passing on a conforming one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.results.parts import read_table
from conformance.run.admin import parse_admin
from reference_broker.server import EmbeddedBroker

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`

ROOT = Path(__file__).resolve().parents[2]


def run_rule(url: str, admin: str, rule: str, out: Path) -> list[dict[str, object]]:
    subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--broker-url", url, "--broker-admin", admin,
                    "--select", rule, "--out", str(out), "--run-id", "softened"],
                   capture_output=True, text=True, timeout=240, check=False, cwd=ROOT)
    return read_table(out / "results", "tests", "softened").to_pylist()


def test_the_negotiated_heartbeat_is_judged(tmp_path: Path) -> None:
    """Against `heartbeat_bounded_by_offer` (the broker keeps min(offer, tune-ok)), HB-01 fails where
    the client asked for more than the offer, and passes where it disabled heartbeats."""
    with EmbeddedBroker(management_port=0, faults=["heartbeat_bounded_by_offer"]) as broker:
        rows = run_rule(broker.url, str(broker.management_url), "HB-01", tmp_path / "bounded")
    verdicts = {str(r["test_id"]).split("::")[-1]: r for r in rows}
    above = verdicts["test_the_heartbeat_is_the_clients_value[above-offered]"]
    assert above["verdict"] == "failed" and list(above["failed_rules"] or []) == ["HB-01"], above
    assert "the client's tune-ok said 120; the broker keeps 60" in str(above["message"]), above["message"]
    assert verdicts["test_the_heartbeat_is_the_clients_value[disabled]"]["verdict"] == "passed"


@pytest.mark.gate  # the timeout machine end to end, about half a minute: `make test-gates`
def test_the_timeout_machine_judges_a_broker_with_a_short_global_timeout(tmp_path: Path) -> None:
    """A global consumer_timeout of 15 s (shorter than the machine's LONG level needs) is raised for
    the machine's run and restored after it: the five rules are judged, never set aside."""
    with EmbeddedBroker(management_port=0) as broker:
        admin = parse_admin(str(broker.management_url), broker.url)
        admin.set_global("consumer_timeout", 15_000)
        rows = run_rule(broker.url, str(broker.management_url), "TMO-4.3-4", tmp_path / "short")
        after = admin.get_global("consumer_timeout")
    machine = [r for r in rows if "test_timeout_precedence_and_reactions_match_the_model" in str(r["test_id"])]
    assert [r["verdict"] for r in machine] == ["passed"], [(r["verdict"], r["message"]) for r in machine]
    assert after == 15_000  # restored
