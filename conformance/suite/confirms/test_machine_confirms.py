"""Model-vs-broker machine for publisher confirms.

ConfirmMachine: two channels publish (some in confirm mode, some not; mandatory or not,
persistent or not) to a transient and a durable classic queue, a full queue that refuses
publishes (x-overflow reject-publish), a quorum queue, a fanout exchange over several of them,
and a routing key no queue has. The model (publishing.py) numbers the confirms and keeps the
set of seqnos the broker must settle exactly once (a queue deleted meanwhile still means ack); every basic.ack / basic.nack / basic.return
that arrives is checked in arrival order, and the run ends only when every seqno of an open
channel is settled (PC-05). Confirms may come coalesced (multiple=true) and in any order.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from codec import ConfirmSelect, ConfirmSelectOk, QueuePurge, QueuePurgeOk, TxSelect, TxSelectOk
from conformance.model import Violation
from conformance.plugin.session import Target
from conformance.suite.steps import machine_steps as do
from conformance.suite.steps.machine_base import (
    CONTROL,
    MachineTarget,
    ModelMachine,
    from_machine,
    run_machine,
    step,
)
from conformance.suite.steps.machine_consuming import CHANNELS, machine_target

TARGET = from_machine(lambda m: m.targets)
QUEUE = from_machine(lambda m: m.queue_pool)
CONFIRM_CHANNEL = from_machine(lambda m: [ch for ch in (1, 2) if m.model.confirm_mode(ch)])


class ConfirmMachine(ModelMachine):
    # what reaches a queue: routed publishes stored (PC-05 acks mean stored), the full queue refuses (PC-08)
    COUNT_RULES = "PC-05: an acked publish was stored, PC-08: the full queue refuses with a nack"
    """PC-01..10, PC-13 over two channels."""

    def __init__(self, target: MachineTarget) -> None:
        super().__init__(target)
        self.connect("A")
        self.open(1)
        self.open(2)
        self.declare("transient")
        self.declare("durable", durable=True)
        self.declare("full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        self.queue_pool: list[str] = ["transient", "durable", "full"]
        fanout = ["transient", "durable"]
        if self.model.traits.quorum_queues:
            self.declare("quorum", "quorum")
            self.queue_pool.append("quorum")
            fanout.append("quorum")
        self.declare_fanout("fanout", fanout)
        # picks count from the end: the full queue (PC-08 nacks) and an unroutable key (PC-06
        # returns) are drawn as often as the plain queues
        self.targets = ["transient", "durable", *self.queue_pool[3:], "nowhere", "fanout", "full"]
        self.call(1, ConfirmSelect(), ConfirmSelectOk)  # channel 1 starts in confirm mode, 2 not
        self.model.confirm_select(1)
        do.publish(self, 2, "", "full")  # full from the start: a publish to it is refused (PC-08)
        self.sync()

    @rule(ch=CHANNELS)
    @step
    def select(self, ch: int) -> None:
        observed = self.call(ch, ConfirmSelect(), ConfirmSelectOk)  # PC-01: again is harmless
        self.expect_outcome("confirm.select", observed, self.model.confirm_select(ch), "PC-01")
        self.recover_from(ch, observed)

    @rule(ch=CHANNELS, to=TARGET, count=st.integers(1, 3), mandatory=st.booleans(), persistent=st.booleans())
    @step
    def publish(self, ch: int, to: str, count: int, mandatory: bool, persistent: bool) -> None:
        exchange, routing_key = ("fanout", "") if to == "fanout" else ("", to)
        for _ in range(count):
            do.publish(self, ch, exchange, routing_key, mandatory=mandatory, persistent=persistent)

    @rule(queue=QUEUE)
    @step
    def purge(self, queue: str) -> None:
        control = self.clients[self.control_conn]
        reply = control.rpc(CONTROL, QueuePurge(queue=self.real[queue]), QueuePurgeOk)
        assert isinstance(reply.method, QueuePurgeOk), f"queue.purge {queue}: {reply.method} (PC-01)"
        expected = self.model.purge_queue(queue)  # the last sync left both sides equal
        assert reply.method.message_count == expected, f"(PC-05) queue.purge {queue}: purge-ok says " \
            f"{reply.method.message_count} messages, the model {expected}"

    @rule(queue=QUEUE)
    @step
    def redeclare(self, queue: str) -> None:
        self.delete_and_declare(queue)  # PC-09: what was pending for it is acked, not nacked

    @rule(ch=CONFIRM_CHANNEL)
    @step
    def tx_select(self, ch: int | None) -> None:
        if ch is None:
            return
        try:
            observed = self.call(ch, TxSelect(), TxSelectOk)  # PC-03: 406 on a confirm channel
        except AssertionError as exc:  # no reply at all (a broker without the tx class): the failure is PC-03's
            raise Violation(f"tx.select on confirm channel {ch}: {exc}; expected channel.close 406 "
                            "PRECONDITION_FAILED (PC-03)") from None
        self.expect_outcome("tx.select", observed, self.model.tx_select(ch), "PC-03")
        self.recover_from(ch, observed)

    @rule(ch=CHANNELS)
    @step
    def wait_for_confirms(self, ch: int) -> None:
        self.await_settlement([ch])

    @rule(ch=CHANNELS)
    @step
    def close_channel(self, ch: int) -> None:
        do.close_channel(self, ch)  # PC-13: its pending confirms die with it

    def await_settlement(self, channels: list[Any]) -> None:
        """PC-05: every seqno published on these channels is settled, within the timeout."""
        deadline = time.monotonic() + self.target.timeout(self.SETTLE_SECONDS)
        while True:
            self.drain()
            pending = {ch: sorted(self.model.unsettled(ch)) for ch in channels if self.model.unsettled(ch)}
            returns = {ch: n for ch in channels if (n := self.model.expected_returns(ch))}
            if not pending and not returns:
                return
            if time.monotonic() > deadline:
                raise Violation(f"after {self.target.timeout(self.SETTLE_SECONDS):.1f} s: seqnos never settled "
                                f"{pending} (PC-05), basic.return missing {returns} (PC-06)")
            self.read(deadline)

    def final_check(self) -> None:
        self.await_settlement([ch for ch in self.channels if self.model.is_open(ch)])


CONFIRM_RULES = ("PC-01", "PC-02", "PC-03", "PC-04", "PC-05", "PC-06", "PC-07", "PC-08", "PC-09", "PC-10",
                 "PC-13")


@pytest.mark.rules(*CONFIRM_RULES)
def test_publisher_confirms_match_the_model(target: Target) -> None:
    run_machine(ConfirmMachine, machine_target(target), examples=120, steps=10)
