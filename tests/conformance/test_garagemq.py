"""The suite against GarageMQ ("Real brokers"): it finishes in bounded time whatever
the broker does, and its report lists the broker's deviations.

Each test starts its own GarageMQ on free ports with a fresh db directory (tests/garagemq_broker.py)
and runs the shipped suite against it in a subprocess under a hard timeout. A subset, at least one
rule test of every area, keeps this under a minute; the full run and its findings are in
docs/garagemq.md. Skipped when the Debian package `garagemq` is not installed, a failure under
AMQPC_STRICT=1 (CI installs it).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.catalogue.rules import BROKER_AREAS
from conformance.results.verdicts import Verdict
from tests.conftest import free_port, require
from tests.garagemq_broker import (
    EXIT_TIMED_OUT,
    GarageMQ,
    amqp_answers,
    available,
    read_verdicts,
    rewrite_config,
    run_suite,
)

HARD_LIMIT = 300.0  # seconds for one suite run; the subsets take well under a minute

# One or more rule tests per area, none of which leaves a consumer on a queue the harness deletes
# (GarageMQ deadlocks on that, see docs/garagemq.md); test_timeout: all not-applicable here.
SUBSET = " or ".join([
    "test_reply_text_is_constant_dash_explanation", "test_unexpected_frame_texts",  # errors
    "test_multiple_needs_n_outstanding", "test_reject_and_nack_requeue_or_discard_without_reply",  # ack
    "test_classic_requeue_restores_the_original_position",  # requeue
    "test_prefetch_size_is_a_connection_error_540",  # qos
    "test_commit_or_rollback_outside_tx_is_406", "test_immediate_publish_is_540",  # confirms
    "test_cancelling_an_unknown_tag_is_answered",  # cancel
    "test_timeout",  # timeout (the module)
    "test_tune_ok_out_of_bounds_is_530", "test_the_heartbeat_is_the_clients_value",  # framing
    "test_get_delivers_every_field_type_unchanged",  # messages
    "test_default_exchange_routes_by_queue_name", "test_topic_words_star_and_hash",  # routing
    "test_delete_and_if_unused",  # exchanges
    "test_server_named_queues_and_the_reserved_prefix",  # queues
    "test_an_invalid_expiration_closes_the_channel",  # ttl
    "test_invalid_dead_letter_arguments_are_refused",  # deadletter
    "test_select_commit_and_rollback_are_answered",  # tx
    "test_invalid_length_arguments_are_refused",  # limits
    "test_the_lower_max_length_wins",  # policies (needs-admin on GarageMQ)
    "test_an_unknown_vhost_is_refused",  # access (not-applicable: access control is RabbitMQ's)
    "test_a_publish_during_alarms_blocks_and_waits_until_none_is_left",  # alarms (needs-admin on GarageMQ)
    "test_cluster",  # cluster (the modules: needs-cluster, a single GarageMQ node)
])
# Deviations this subset always shows (docs/garagemq.md): multiple=true above the highest tag is
# accepted (ACK-05), cancelling an unknown tag closes the channel 404 (CCN-03), an out-of-range
# tune-ok is accepted (FRM-01), tx.commit outside a transaction gets no reply (PC-11), nor does
# tx.select (TX-01).
KNOWN = {"ACK-05", "CCN-03", "FRM-01", "PC-11", "EXCH-06", "QUEUE-04", "TX-01"}
SUMMARY = re.compile(r"^([\w-]+)" + r"\s+(\d+|\.)" * len(Verdict) + r"\s*$", re.M)  # a column per verdict


def summary_counts(output: str) -> dict[str, list[int]]:
    """The plugin's "amqp-conformance verdicts" table: area -> counts in Verdict order."""
    section = output.split("amqp-conformance verdicts", 1)
    assert len(section) == 2, f"no verdict summary in the output:\n{output[-3000:]}"
    return {m[1]: [0 if c == "." else int(c) for c in m.groups()[1:]] for m in SUMMARY.finditer(section[1])}


@pytest.fixture
def garagemq() -> Iterator[GarageMQ]:
    require(available(), "GarageMQ (Debian package garagemq: /usr/bin/garagemq, /etc/garagemq/config.yaml)")
    with GarageMQ(lifetime=HARD_LIMIT + 60) as broker:
        yield broker


def test_config_copy_changes_ports_and_db_only() -> None:
    text = ("proto: amqp-rabbit\ntcp:\n  ip: 127.0.0.1\n  port: 5672\n  nodelay: false\n"
            "admin:\n  ip: 127.0.0.1\n  port: 15672\ndb:\n  defaultPath: /var/lib/garagemq/db # here\n"
            "  engine: badger\n")
    out = rewrite_config(text, {("tcp", "port"): "1", ("admin", "port"): "2", ("db", "defaultPath"): "/tmp/x"})
    assert out == text.replace("5672\n", "1\n", 1).replace("15672", "2").replace(
        "/var/lib/garagemq/db # here", "/tmp/x")
    with pytest.raises(ValueError, match=r"queue\.port"):
        rewrite_config(text, {("queue", "port"): "1"})


@pytest.mark.garagemq
def test_garagemq_starts_on_its_own_ports(garagemq: GarageMQ) -> None:
    assert garagemq.port not in (5672, 15672) and garagemq.admin_port not in (5672, 15672)
    assert amqp_answers(garagemq.host, garagemq.port, 2.0)
    assert garagemq.workdir is not None and (garagemq.workdir / "db").is_dir()


@pytest.mark.garagemq
def test_the_start_script_returns_while_garagemq_runs() -> None:
    """scripts/garagemq.sh (the grid's `start` and `stop` for GarageMQ): a caller that captures its
    output gets EOF once it says "up", the pid file names GarageMQ itself, and `down` stops it. A
    backgrounded subshell holding the caller's pipes once made the CI grid wait 600 s for it."""
    require(available(), "GarageMQ (Debian package garagemq: /usr/bin/garagemq, /etc/garagemq/config.yaml)")
    port = free_port()
    script = str(Path(__file__).resolve().parents[2] / "scripts" / "garagemq.sh")
    try:
        done = subprocess.run([script, "up", str(port), str(free_port())], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert f"127.0.0.1:{port}" in done.stdout
        pid = int(Path(f"/tmp/amqpc-garagemq-{port}/pid").read_text())
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "garagemq"
    finally:
        subprocess.run([script, "down", str(port)], capture_output=True, timeout=30, check=False)
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert not amqp_answers("127.0.0.1", port, 1.0)


@pytest.mark.garagemq
@pytest.mark.gate  # the broker suite end to end: `make test-gates` (kept out of make test's 5 minutes)
def test_suite_finishes_and_lists_deviations(garagemq: GarageMQ, tmp_path: Path) -> None:
    run = run_suite(garagemq.url, ["-k", SUBSET, "--results-dir", str(tmp_path), "--run-id", "garagemq"],
                    HARD_LIMIT)
    assert not run.timed_out, f"killed after {HARD_LIMIT} s:\n{run.output[-3000:]}"
    assert run.returncode in (0, 1, 2), run.output[-3000:]
    assert garagemq.died() is None, f"GarageMQ died:\n{garagemq.log_tail()}"
    counts = summary_counts(run.output)
    assert set(BROKER_AREAS) <= set(counts), counts  # every area of the broker suite was exercised
    assert counts["total"][1] > 0  # failed: GarageMQ's deviations are listed
    verdicts = read_verdicts(tmp_path, "garagemq", 1)
    failed = [v for v in verdicts if v.verdict == "failed"]
    assert len(failed) == counts["total"][1]
    assert all(v.rule_ids and v.message for v in failed)  # each names its rules and what was seen
    missing = KNOWN - {r for v in failed for r in v.rule_ids}
    assert not missing, f"known GarageMQ deviations not reported: {sorted(missing)}"
    assert not [v for v in verdicts if v.verdict == "broken"], "the harness broke on GarageMQ"


@pytest.mark.garagemq
@pytest.mark.parametrize("case", ["truncated-method", "unknown-method-id"])
def test_a_broker_that_crashes_ends_the_run_with_exit_3(garagemq: GarageMQ, tmp_path: Path, case: str) -> None:
    """A truncated basic.qos frame, or an unknown method id, makes GarageMQ panic (nil pointer in
    Channel.handleIncoming): the run must end at once with exit 3, the tests after it `broken`,
    not time out one by one; the results name the test under which the broker went down (for
    unknown-method-id the plugin's own verdict is non-strict, "dropped without connection.close")."""
    # tests that run after the crash (the framing area comes after errors/): they must be `broken`
    selection = f"test_malformed_input_closes_the_connection and {case} or test_tune_offers_the_default_limits"
    run = run_suite(garagemq.url, ["-k", selection, "--results-dir", str(tmp_path), "--run-id", "crash"],
                    HARD_LIMIT)
    assert run.returncode != EXIT_TIMED_OUT and run.duration < 60, run.output[-3000:]
    assert garagemq.died() is not None, f"GarageMQ survived {case} (fixed upstream?)"
    assert run.returncode == 3 and "BROKER DOWN" in run.output, run.output[-3000:]
    verdicts = read_verdicts(tmp_path, "crash", 1)
    after = [v for v in verdicts if v.not_run]
    assert after and all(v.verdict == "broken" for v in after)
    assert [v.test_id.split("[")[-1] for v in verdicts if v.downed_broker] == [f"{case}]"]
