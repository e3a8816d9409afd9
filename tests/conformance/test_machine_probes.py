"""The machines' cause probe for a missing delivery (machine_steps.held_below_multiple, ACK-05).

A delivery the model requires did not come after a basic.ack multiple=true: the probe acks the
lowest tag the multiple ack covered below the one it named. Against a broker that settled it the
probe closes the channel (406) and proves nothing; against one that settled only the named tag
(`multi_ack_only_named`) the ack is accepted and the failure names ACK-05 with that evidence.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codec import BasicAck, BasicDeliver
from conformance.catalogue.mentions import named_rules
from conformance.interpose.frames import Frame
from conformance.results.parts import read_table
from conformance.suite.ack.test_machine_ack import AckMachine
from conformance.suite.steps import machine_steps as do
from conformance.suite.steps.machine_support import MachineTarget
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation, Io

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("faults", [[], ["multi_ack_only_named"]], ids=["conforming", "multi_ack_only_named"])
def test_the_probe_names_ack_05_only_when_the_broker_still_holds_the_tag(faults: list[str]) -> None:
    with EmbeddedBroker(faults=faults) as broker:
        m = AckMachine(MachineTarget(broker.url, "rabbitmq-4.3"))
        try:
            m.start(ch=1, count=4, consume=True, prefetch=1)  # consumer c1 holds tag 1
            m.consume(ch=1, queue="q", prefetch=1, no_ack=False, count=0)  # consumer c2 holds tag 2
            assert m.model.unacked_tags(1) == (1, 2)
            do.settle(m, 1, "ack", 2, True, False)  # settles tags 1 and 2: both consumers have room
            assert m.model.due()
            cause = do.held_below_multiple(m)
        finally:
            m.cleanup()
    if not faults:
        assert cause is None  # the re-ack of tag 1 closed the channel: the broker had settled it
    else:
        assert cause is not None and named_rules(cause) == ("ACK-05",), cause
        assert "the broker still held tag 1" in cause and "consumer 'c1'" in cause, cause


@pytest.mark.parametrize("faults", [["unknown_tag_accepted"], ["unknown_tag_accepted", "multi_ack_only_named"]],
                         ids=["settled-tag-accepted", "and-multi-ack-only-named"])
def test_on_a_broker_accepting_unknown_tags_an_accepted_re_ack_proves_nothing(faults: list[str]) -> None:
    """A broker that accepts an unknown (or already settled) tag accepts the re-ack whatever it
    holds: without the run's evidence that it refuses unknown tags at once, no failure names ACK-05,
    even where the multiple ack did settle too little (the failure keeps its own wording)."""
    do.REFUSES_UNKNOWN_TAGS.clear()
    with EmbeddedBroker(faults=faults) as broker:
        target = MachineTarget(broker.url, "rabbitmq-4.3")
        assert do.refuses_unknown_tags(target) is False
        m = AckMachine(target)
        try:
            m.start(ch=1, count=4, consume=True, prefetch=1)
            m.consume(ch=1, queue="q", prefetch=1, no_ack=False, count=0)
            do.settle(m, 1, "ack", 2, True, False)
            cause = do.held_below_multiple(m)
        finally:
            m.cleanup()
    assert cause is None


def test_a_broker_refusing_unknown_tags_at_once_is_known_once_per_run() -> None:
    do.REFUSES_UNKNOWN_TAGS.clear()
    with EmbeddedBroker() as broker:
        target = MachineTarget(broker.url, "rabbitmq-4.3")
        assert do.refuses_unknown_tags(target) is True
        assert {broker.url: True} == do.REFUSES_UNKNOWN_TAGS


class DeliverDroppedAfterMultipleAck(Deviation):
    """After a client's basic.ack multiple=true on a channel, the next basic.deliver on it never
    reaches the client (lost in transit): a delivery goes missing where the multiple ack was right."""

    name = "deliver_dropped_after_multiple_ack"

    def __init__(self) -> None:
        super().__init__()
        self.armed: set[int] = set()

    def client(self, frame: Frame, io: Io) -> None:
        if frame.type == 1 and isinstance(frame.method, BasicAck) and frame.method.multiple:
            self.armed.add(frame.channel)
        io.to_broker(frame.raw)

    def broker(self, frame: Frame, io: Io) -> None:
        if frame.type == 1 and isinstance(frame.method, BasicDeliver) and frame.channel in self.armed:
            self.armed.discard(frame.channel)
            io.record(self.name)
            self.drop_content("broker", frame.channel)
            return
        io.to_client(frame.raw)


@pytest.mark.gate  # three machines end to end: `make test-gates`
@pytest.mark.timeout(400)
def test_a_missing_delivery_on_a_broker_accepting_unknown_tags_never_names_ack_05(tmp_path: Path) -> None:
    """The machines of the ack, qos and requeue areas against a broker that accepts unknown tags
    (`unknown_tag_accepted`) and loses one delivery after a multiple ack (the proxy): they fail,
    and no failure names ACK-05, which this broker does not break."""
    with EmbeddedBroker(faults=["unknown_tag_accepted"]) as broker, \
            DeviantProxy((broker.host, broker.port), DeliverDroppedAfterMultipleAck) as proxy:
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
                              "-o", "addopts=", "--broker-url", proxy.url, "--results-dir", str(tmp_path),
                              "--run-id", "probe", "-k", "machine", "-m", "area_ack or area_qos or area_requeue",
                              "--pyargs", "conformance.suite"],
                             capture_output=True, text=True, timeout=380, check=False, cwd=ROOT)
        dropped = proxy.actions.count(DeliverDroppedAfterMultipleAck.name)
    rows = read_table(tmp_path, "tests", "probe").to_pylist()
    failed = [r for r in rows if r["verdict"] == "failed"]
    assert dropped and failed, run.stdout[-3000:]
    assert not [r for r in failed if "ACK-05" in (r["failed_rules"] or [])], \
        [(r["test_id"], r["failed_rules"], r["message"][:300]) for r in failed]
