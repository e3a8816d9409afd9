"""The machines' cause probe for a missing delivery (machine_steps.held_below_multiple, ACK-05).

A delivery the model requires did not come after a basic.ack multiple=true: the probe acks the
lowest tag the multiple ack covered below the one it named. Against a broker that settled it the
probe closes the channel (406) and proves nothing; against one that settled only the named tag
(`multi_ack_only_named`) the ack is accepted and the failure names ACK-05 with that evidence.
"""

from __future__ import annotations

import pytest

from conformance.catalogue.mentions import named_rules
from conformance.suite.ack.test_machine_ack import AckMachine
from conformance.suite.steps import machine_steps as do
from conformance.suite.steps.machine_support import MachineTarget
from reference_broker.server import EmbeddedBroker


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
