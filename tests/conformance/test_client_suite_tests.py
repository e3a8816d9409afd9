"""The client suite tests for tx, mandatory returns and global qos, proven against deviating brokers.

Each case runs `amqp-conformance run --client LIB --select RULE` against the embedded reference
broker made to deviate in one way (a named fault of reference_broker/faults.py, or a rewrite by
the DeviantProxy, tests/conformance/deviant.py) and expects the client test of that rule to be
`failed`; the same tests pass the conforming broker and, marked `rabbitmq`, RabbitMQ 3.10.8.
The transaction deviations are defined here, as rewrites of the client's frames (the reference
broker's named tx faults, tx_* in reference_broker/faults.py, are judged by the broker suite's tx
area and PC-11, docs/mutation.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codec import ConfirmSelect, ConfirmSelectOk, TxCommit, TxCommitOk, TxRollback, TxRollbackOk, TxSelect
from conformance.interpose.frames import Frame
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation, Io, encode
from tests.conformance.deviations import ReturnDropped
from tests.conformance.test_cli_rabbitmq import rabbitmq  # noqa: F401  (fixture)
from tests.conformance.test_through_clients import _run

pytestmark = pytest.mark.end_to_end  # whole commands as subprocesses: `make test-end-to-end`


class TxRollbackAsCommit(Deviation):
    """The broker hears tx.commit for the client's tx.rollback (and the client hears rollback-ok)."""

    name, area, rules = "tx_rollback_as_commit", "ack", ("ACK-08",)

    def __init__(self) -> None:
        super().__init__()
        self.rewritten: set[int] = set()

    def client(self, frame: Frame, io: Io) -> None:
        if isinstance(frame.method, TxRollback):
            io.record(self.name)
            self.rewritten.add(frame.channel)
            io.to_broker(encode(frame.channel, TxCommit()))
            return
        io.to_broker(frame.raw)

    def broker(self, frame: Frame, io: Io) -> None:
        if isinstance(frame.method, TxCommitOk) and frame.channel in self.rewritten:
            self.rewritten.discard(frame.channel)
            io.to_client(encode(frame.channel, TxRollbackOk()))
            return
        io.to_client(frame.raw)


class NonTxCommitAccepted(Deviation):
    """tx.commit on a channel that never selected tx is answered commit-ok (PC-11 says 406)."""

    name, area, rules = "non_tx_commit_accepted", "confirms", ("PC-11",)

    def __init__(self) -> None:
        super().__init__()
        self.tx: set[int] = set()

    def client(self, frame: Frame, io: Io) -> None:
        if isinstance(frame.method, TxSelect):
            self.tx.add(frame.channel)
        if isinstance(frame.method, TxCommit) and frame.channel not in self.tx:
            io.record(self.name)
            io.to_client(encode(frame.channel, TxCommitOk()))
            return
        io.to_broker(frame.raw)


class ConfirmOnTxAccepted(NonTxCommitAccepted):
    """confirm.select on a tx channel is answered select-ok (PC-03 says 406)."""

    name, area, rules = "confirm_on_tx_accepted", "confirms", ("PC-03",)

    def client(self, frame: Frame, io: Io) -> None:
        if isinstance(frame.method, TxSelect):
            self.tx.add(frame.channel)
        if isinstance(frame.method, ConfirmSelect) and frame.channel in self.tx:
            io.record(self.name)
            io.to_client(encode(frame.channel, ConfirmSelectOk()))
            return
        io.to_broker(frame.raw)


# (library, rule selected, deviation or fault, the client tests that must fail)
PROXY_CASES = [
    ("pika", "ACK-08", TxRollbackAsCommit, {"test_tx_ack_is_settled_at_commit_and_restored_by_rollback[rollback-1]"}),
    ("amqp", "PC-11", NonTxCommitAccepted, {"test_tx_commit_on_a_channel_without_tx_select_is_406"}),
    ("amqp", "PC-03", ConfirmOnTxAccepted, {"test_confirm_select_on_a_tx_channel_is_406"}),
    ("pika", "PC-06", ReturnDropped, {"test_an_unroutable_mandatory_publish_is_returned_then_confirmed",
                                      "test_an_unroutable_mandatory_publish_is_returned_without_confirms"}),
    ("aio-pika", "PC-06", ReturnDropped, {"test_an_unroutable_mandatory_publish_is_returned_then_confirmed"}),
]


def _verdicts(tests: dict[str, tuple[str, str]], names: set[str]) -> dict[str, str]:
    return {name: tests[name][0] for name in names if name in tests}


# `make test` keeps the first case; the others (a client library's whole run each, 12-30 s of CPU on
# two cores) run in `make test-gates`, as every whole-run proof beyond the first does
@pytest.mark.parametrize(("library", "rule", "deviation", "failing"), [
    pytest.param(*case, id=f"{case[0]}-{case[2].name}", marks=() if n == 0 else pytest.mark.gate)
    for n, case in enumerate(PROXY_CASES)])
def test_a_client_suite_test_fails_a_deviating_broker(tmp_path: Path, library: str, rule: str,
                                                      deviation: type[Deviation], failing: set[str]) -> None:
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), deviation) as proxy:
        _status, output, tests = _run(tmp_path, "--client", library, "--select", rule, "--broker-url", proxy.url)
    assert _verdicts(tests, failing) == dict.fromkeys(failing, "failed"), output[-3000:]
    assert deviation.name in proxy.actions


@pytest.mark.gate  # a client library's run: `make test-gates`
def test_the_global_qos_client_test_fails_the_channel_wide_fault(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMQPC_BROKER_FAULTS", "global_qos_channel_wide")  # 4.3 must treat global=true per consumer
    _status, output, tests = _run(tmp_path, "--client", "amqp", "--select", "QOS-03")
    assert _verdicts(tests, {"test_global_qos_scope_through_the_client"}) == \
        {"test_global_qos_scope_through_the_client": "failed"}, output[-3000:]


def _passes(tmp_path: Path, library: str, *args: str) -> None:
    status, output, tests = _run(tmp_path, "--client", library, "--select", "ACK-08", "PC-11", "PC-03", "PC-06",
                                 "QOS-03", *args)
    assert status == 0, output[-3000:]
    ours = {name: v for name, (v, _why) in tests.items() if name.startswith(("test_tx_", "test_confirm_select_on",
                                                                             "test_an_unroutable", "test_global_qos"))}
    expected = 7 if library != "aio-pika" else 5  # aio-pika cannot express two of them (their `why`)
    assert list(ours.values()).count("passed") == expected, ours


@pytest.mark.parametrize("library", ["pika", pytest.param("amqp", marks=pytest.mark.gate),
                                     pytest.param("aio-pika", marks=pytest.mark.gate)])
def test_the_client_suite_tests_pass_the_reference_broker(tmp_path: Path, library: str) -> None:
    _passes(tmp_path, library)


@pytest.mark.rabbitmq
@pytest.mark.gate  # `amqp-conformance run --client LIB` on RabbitMQ 3.10.8: `make test-gates`
@pytest.mark.parametrize("library", ["pika", "amqp", "aio-pika"])
def test_the_client_suite_tests_pass_rabbitmq(tmp_path: Path, library: str, rabbitmq: str) -> None:  # noqa: F811
    _passes(tmp_path, library, "--broker-url", rabbitmq)
