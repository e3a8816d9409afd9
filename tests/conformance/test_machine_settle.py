"""A machine's settle waits until what each channel published has reached its queues
(conformance/suite/steps/machine_settle.py, `ping_publishers`).

A conforming broker may route a publish late: the channel that took it is a process of its own,
and on a loaded node it handles its frames after another channel has answered a later request.
`SlowChannel` makes any broker behave so: what the client sends on channel 2 reaches the broker
half a second late, in order, while the other channels' frames pass at once. Against it, the
confirms machine's steps that failed against RabbitMQ 4.3.6 under load (two publishes a full
queue refuses, then a purge) must settle as the model says, on the reference broker and on
RabbitMQ: the purge must come after the refused publishes, not overtake them.
"""

from __future__ import annotations

import pytest

from conformance.interpose.frames import Frame
from conformance.interpose.relay import OUT
from conformance.suite.confirms.test_machine_confirms import ConfirmMachine
from conformance.suite.steps.machine_support import MachineTarget
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation, Io
from tests.conformance.test_probes import BROKERS, upstream

LATE = 0.5  # seconds channel 2's frames reach the broker late


class SlowChannel(Deviation):
    """A conforming but loaded broker: channel 2's frames reach it `LATE` seconds late, in order."""

    name = "slow_channel"

    def client(self, frame: Frame, io: Io) -> None:
        if frame.channel == 2:
            io.link.send_later(LATE, OUT, frame.raw)
        else:
            io.to_broker(frame.raw)


@pytest.mark.parametrize("port", BROKERS)
def test_a_purge_comes_after_the_publishes_a_full_queue_refused_on_another_channel(port: int | None) -> None:
    """Without the ping on channel 2 the settle after its publishes passed at once (the full queue's
    count does not change), the purge emptied the queue first, and a late publish then filled it:
    "queue full holds 1 ready messages, the model 0", a false PC-05/PC-08 failure."""
    with EmbeddedBroker() as broker, DeviantProxy(upstream(port, broker), SlowChannel) as proxy:
        machine = ConfirmMachine(MachineTarget(proxy.url, "rabbitmq-4.3"))
        try:
            machine.publish(ch=2, to="full", count=2, mandatory=False, persistent=False)  # refused: full
            machine.purge(queue="full")
            machine.publish(ch=2, to="transient", count=1, mandatory=False, persistent=False)
            assert machine.model.ready("full") == 0 and machine.model.ready("transient") == 1
            assert machine.count_mismatch() is None  # the settles above compared every count already
        finally:
            machine.cleanup()
        pings = [r for r in machine.recorder.frames if r.direction == "out" and r.channel == 2
                 and type(r.frame.method).__name__ == "ExchangeDeclare"]
        assert len(pings) == 3, "one ping on channel 2 after each step and the set-up that published on it"
