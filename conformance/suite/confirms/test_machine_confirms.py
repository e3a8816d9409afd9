"""Model-vs-broker machine for publisher confirms.

ConfirmMachine: two channels publish (some in confirm mode, some not; mandatory or not,
persistent or not) to a transient and a durable classic queue, a full queue that refuses
publishes (x-overflow reject-publish), a quorum queue, a fanout exchange over several of them,
and a routing key no queue has. Where RabbitMQ's transactions are judged (its profiles), a channel
may also be made transactional (tx.select on a channel in confirm mode is the PC-03 error), and its
publishes are then held until tx.commit, dropped by tx.rollback or the channel's close (TX-02,
TX-05, TX-06, PC-11: a commit a full queue refuses part of closes the channel 406 "partial tx
completion"); commit and rollback are also tried on channels that are not transactional (PC-11). A
queue is deleted and declared again, as it was or differently (a classic one with or without a
length limit of 1 that refuses publishes), but not while an open transaction holds a publish routed to it
(what such a commit does differs by version: TX-06's own tests). The model (publishing.py) numbers the confirms and keeps the
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

from codec import (
    BasicReturn,
    ConfirmSelect,
    ConfirmSelectOk,
    QueuePurge,
    QueuePurgeOk,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    TxSelect,
    TxSelectOk,
)
from conformance.catalogue.profiles import NOT_CLAIMED
from conformance.drivers.raw import DriverError
from conformance.model import Violation
from conformance.model.outcomes import OK, ChannelClosed, Outcome, Return
from conformance.plugin.session import Target
from conformance.plugin.verdicts import not_claimed
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
PUBLISHER = from_machine(lambda m: m.publishers)
TX_CHANNEL = from_machine(lambda m: m.publishers if m.target.rabbitmq_base else [])  # RabbitMQ's tx rules
# a commit or rollback: channel 2 whatever its mode (PC-11 when not transactional), then the open
# transactions, those holding publishes last (a pick counts from the end: drawn most often)
TX_END = from_machine(lambda m: [2, *sorted((ch for ch in m.publishers if m.model.tx_mode(ch)),
                                            key=m.model.held_publishes)]
                      if m.target.rabbitmq_base else [])
# a transaction's target: an unroutable key (TX-05 returns) and the full queue (PC-11 partial commits)
# drawn most often (a pick counts from the end)
TX_TARGET = from_machine(lambda m: [t for t in m.targets if t not in ("nowhere", "full")] + ["full", "nowhere"])
FREE_QUEUE = from_machine(lambda m: [q for q in m.queue_pool if not m.model.holds_publishes_for(q)])


class ConfirmMachine(ModelMachine):
    # what reaches a queue: routed publishes stored (PC-05 acks mean stored), the full queue refuses (PC-08)
    COUNT_RULES = ("PC-05: an acked publish was stored, PC-08: the full queue refuses with a nack, TX-02: a "
                   "transaction's publishes reach their queues at tx.commit")
    """PC-01..10, PC-13 over two channels."""

    def __init__(self, target: MachineTarget) -> None:
        super().__init__(target)
        self.connect("A")
        self.open(1)
        self.open(2)
        self.queue_pool: list[str] = ["transient", "durable", "full"]
        fanout = ["transient", "durable"]
        with self.pipelined():
            self.declare("transient")
            self.declare("durable", durable=True)
            self.declare("full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
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
        self.publishers = [1, 2]
        if self.target.rabbitmq_base:  # channel 3 starts transactional (RabbitMQ's tx rules: TX-02, TX-05, PC-11)
            self.open(3)
            self.call(3, TxSelect(), TxSelectOk)
            self.model.tx_select(3)
            self.publishers.append(3)
        do.publish(self, 2, "", "full")  # full from the start: a publish to it is refused (PC-08)
        self.sync()

    @rule(ch=CHANNELS)
    @step
    def select(self, ch: int) -> None:
        observed = self.call(ch, ConfirmSelect(), ConfirmSelectOk)  # PC-01: again is harmless
        self.expect_outcome("confirm.select", observed, self.model.confirm_select(ch), "PC-01")
        self.recover_from(ch, observed)

    @rule(ch=PUBLISHER, to=TARGET, count=st.integers(1, 3), mandatory=st.booleans(), persistent=st.booleans())
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

    @rule(queue=FREE_QUEUE)
    @step
    def redeclare(self, queue: str | None) -> None:
        if queue is None:
            return
        self.delete_and_declare(queue)  # PC-09: what was pending for it is acked, not nacked

    @rule(queue=FREE_QUEUE, limited=st.booleans())
    @step
    def redeclare_differently(self, queue: str | None, limited: bool) -> None:
        """A classic queue deleted and declared again with (or without) a length limit of 1 that
        refuses publishes: channels that published to it go on, their pending confirms acked
        (PC-09), later publishes nacked while it is full (PC-08)."""
        if queue is None or self.declared[queue][0] != "classic":
            return
        kind, durable, _ = self.declared[queue]
        self.declared[queue] = (kind, durable, {"x-max-length": 1, "x-overflow": "reject-publish"} if limited else {})
        self.delete_and_declare(queue)

    @rule(ch=CONFIRM_CHANNEL)
    @step
    def tx_select(self, ch: int | None) -> None:
        if ch is None:
            return
        self.select_tx(ch)

    @rule(ch=TX_CHANNEL)
    @step
    def tx_select_any(self, ch: int | None) -> None:
        if ch is not None:
            self.select_tx(ch)  # TX-01 on a transactional channel, PC-03 on a confirm one

    @rule(ch=TX_END)
    @step
    def tx_commit(self, ch: int | None) -> None:
        if ch is None:
            return
        self.commit(ch)

    @rule(ch=TX_CHANNEL, to=TX_TARGET, count=st.integers(1, 3), mandatory=st.booleans(), commit=st.booleans())
    @step
    def transaction(self, ch: int | None, to: str, count: int, mandatory: bool, commit: bool) -> None:
        """tx.select (again: TX-01), publishes, then tx.commit or tx.rollback, in one step."""
        if ch is None:
            return
        self.select_tx(ch)
        if not self.model.tx_mode(ch):
            return  # a confirm channel: the select was PC-03's error
        exchange, routing_key = ("fanout", "") if to == "fanout" else ("", to)
        for _ in range(count):
            do.publish(self, ch, exchange, routing_key, mandatory=mandatory)
        if commit:
            self.commit(ch)
        else:
            expected = self.model.tx_rollback(ch)
            self.end_of_transaction(ch, "tx.rollback", self.call(ch, TxRollback(), TxRollbackOk), expected)

    @rule(ch=TX_END)
    @step
    def tx_rollback(self, ch: int | None) -> None:
        if ch is None:
            return
        expected = self.model.tx_rollback(ch)
        self.end_of_transaction(ch, "tx.rollback", self.call(ch, TxRollback(), TxRollbackOk), expected)

    def commit(self, ch: int) -> None:
        # tx.commit-ok follows the enqueue of every publish (PC-11): a quorum queue's consensus or a
        # persistent message's disk write may hold it up, so every commit is given as long as a
        # consensus is (machine_base: CONSENSUS_SETTLE_SECONDS; tests/conformance/test_probes.py
        # holds every commit-ok back 3 s, a slow disk, and the confirms area must pass)
        expected = self.model.tx_commit(ch)  # the returns it owes are expected from now on
        observed = self.commit_on_broker(ch, self.target.timeout(self.CONSENSUS_SETTLE_SECONDS))
        self.end_of_transaction(ch, "tx.commit", observed, expected)

    def commit_on_broker(self, ch: int, wait: float) -> Outcome:
        """tx.commit: each basic.return that comes before tx.commit-ok is checked as it comes
        (TX-05), then the commit-ok, or the channel.close that ends the commit."""
        client, number = self.client(ch)
        self.drain_channel(ch, [])  # what came before the commit
        client.send(number, TxCommit())
        try:
            while True:
                command = client.expect(number, BasicReturn, TxCommitOk, timeout=wait)
                if isinstance(command.method, TxCommitOk):
                    return OK
                m = command.method
                assert isinstance(m, BasicReturn)
                self.model.returned(ch, Return(m.reply_code, m.exchange, m.routing_key, command.body))
        except DriverError as exc:
            return self.closed_outcome(ch, exc)

    def end_of_transaction(self, ch: int, what: str, observed: Outcome, expected: Outcome) -> None:
        self.expect_outcome(what, observed, expected, "PC-11")  # which close ends a transaction, and when
        if missing := self.model.expected_returns(ch):
            ended = "tx.commit-ok" if observed == OK else "channel.close"
            raise Violation(f"{what} on channel {ch}: {missing} basic.return(s) of the transaction's unroutable "
                            f"mandatory publishes did not come before its {ended} (TX-05)")
        if isinstance(expected, ChannelClosed):
            self.model.closed_by_broker(ch)
        self.recover_from(ch, observed)

    def select_tx(self, ch: int) -> None:
        confirm = self.model.confirm_mode(ch)
        rule = "PC-03" if confirm else "TX-01"  # refused on a confirm channel, else taken
        try:
            observed = self.call(ch, TxSelect(), TxSelectOk)  # PC-03: 406 on a confirm channel
        except AssertionError as exc:  # no reply at all (a broker without the tx class)
            want = "channel.close 406 PRECONDITION_FAILED" if confirm else "tx.select-ok"
            raise Violation(f"tx.select on {'confirm ' if confirm else ''}channel {ch}: {exc}; expected {want} "
                            f"({rule})") from None
        self.expect_outcome("tx.select", observed, self.model.tx_select(ch), rule)
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
        """PC-05: every seqno published on these channels is settled, within the settle (hurried while
        a failure is shrunk: machine_budget, hurried shrinking; the reported replay waits in full)."""
        settle = self.settle_seconds()
        started = time.monotonic()
        deadline = started + settle
        while True:
            self.drain()
            pending = {ch: sorted(self.model.unsettled(ch)) for ch in channels if self.model.unsettled(ch)}
            returns = {ch: n for ch in channels if (n := self.model.expected_returns(ch))}
            if not pending and not returns:
                self.settled(time.monotonic() - started)
                return
            if time.monotonic() > deadline:
                raise Violation(f"after {settle:.1f} s: seqnos never settled "
                                f"{pending} (PC-05), basic.return missing {returns} (PC-06)")
            self.read(deadline)

    def final_check(self) -> None:
        self.await_settlement([ch for ch in self.channels if self.model.is_open(ch)])


CONFIRM_RULES = ("PC-01", "PC-02", "PC-03", "PC-04", "PC-05", "PC-06", "PC-07", "PC-08", "PC-09", "PC-10",
                 "PC-11", "PC-13", "TX-01", "TX-02", "TX-05", "TX-06")


@pytest.mark.rules(*CONFIRM_RULES)
def test_publisher_confirms_match_the_model(target: Target) -> None:
    if target.profile.expect("PC-01") == NOT_CLAIMED:  # its transactions alone are the tx area's tests
        not_claimed("the confirms machine needs publisher_confirms, which the broker does not claim")
    run_machine(ConfirmMachine, machine_target(target), examples=120, steps=10)
