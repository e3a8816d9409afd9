"""`run --client NAME` through a library of another language, driven by its adapter program.

conformance/drivers/suite_client.py starts the library's adapter (docs/adapter-protocol.md) for
each driver a test makes. On the embedded reference broker: amqplib (Node) and rabbitmq-c (C)
pass the acknowledgement checks through the suite; a step amqplib cannot express (it has no
transactions API: its adapter answers `unsupported`) makes the test not-applicable with that
reason, and the cancel-notification check, which rabbitmq-c cannot express (its client-properties
do not claim consumer_cancel_notify), is not-applicable with the suite's reason. The libraries
need their packages (node and amqplib under the virtualenv; gcc and librabbitmq-dev): without
them these tests skip, and fail under AMQPC_STRICT=1 (CI installs them). The two suite runs are
`grid` tests (`make test-grid`, which CI runs): each starts a Node or C program per driver, about 15
CPU-seconds together on the 2-core machine, out of `make test`'s five minutes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.drivers.registry import REGISTRY, ClientUnavailable
from conformance.drivers.suite_client import OwnedAdapter, open_client
from conformance.results.parts import read_table
from reference_broker.server import EmbeddedBroker
from tests.conformance.test_through_clients import _run
from tests.conftest import require


def _require(client: str) -> None:
    try:
        REGISTRY[client].check()
    except ClientUnavailable as exc:
        require(False, str(exc))


@pytest.mark.grid
def test_amqplib_passes_the_ack_checks_and_cannot_express_transactions(tmp_path: Path) -> None:
    _require("amqplib")
    status, output, tests = _run(tmp_path, "--client", "amqplib", "--select", "ACK-05", "ACK-08")
    assert status == 0, output
    assert tests["test_ack_multiple_settles_every_outstanding_tag_up_to_it"] == ("passed", ""), tests
    assert tests["test_acknowledgements_through_the_client_match_the_model"][0] == "passed", tests
    tx = [tests[f"test_tx_ack_is_settled_at_commit_and_restored_by_rollback[{case}]"] for case in ("commit-0", "rollback-1")]
    for verdict, why in tx:
        assert verdict == "not-applicable"
        assert why.endswith("amqplib cannot express a step of this check: amqplib has no transactions API"), why
    (run,) = read_table(tmp_path / "out" / "results", "runs").to_pylist()
    assert (run["client"], run["client_version"]) == ("amqplib", REGISTRY["amqplib"].installed_version())


@pytest.mark.grid
def test_rabbitmq_c_passes_an_ack_check_and_cannot_express_cancel_notification(tmp_path: Path) -> None:
    _require("rabbitmq-c")
    status, output, tests = _run(tmp_path, "--client", "rabbitmq-c", "--select", "ACK-05", "CCN-02")
    assert status == 0, output
    assert tests["test_ack_multiple_settles_every_outstanding_tag_up_to_it"] == ("passed", ""), tests
    verdict, why = tests["test_deleting_the_queue_notifies_the_consumer"]
    assert verdict == "not-applicable", tests
    assert "rabbitmq-c cannot express this check" in why and "consumer_cancel_notify" in why, why


@pytest.fixture(scope="module")
def broker() -> EmbeddedBroker:
    with EmbeddedBroker() as running:
        yield running


def test_closing_a_driver_ends_its_adapter_program(broker: EmbeddedBroker) -> None:
    _require("amqplib")
    driver = open_client("amqplib", 5.0)
    assert isinstance(driver, OwnedAdapter)  # amqplib runs in its Node adapter program
    driver.connect(broker.url)
    ch = driver.open_channel()
    queue = driver.declare_queue(ch, "")
    driver.publish(ch, "", queue, b"one")
    got = driver.get(ch, queue, no_ack=True)
    assert got is not None and got.body == b"one"
    driver.close()
    assert driver.process.poll() is not None, "the adapter program still runs after close()"
