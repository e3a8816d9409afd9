"""The requeue machine through a client library: `--client NAME`.

Responsibility: where requeued messages go back and how they are flagged, with the library's
calls as the steps: basic.publish, basic.get, basic.nack / basic.reject requeue=true of one
outstanding delivery, basic.nack multiple=true requeue=true of all of them (tag 0, ACK-06),
basic.recover requeue=true, basic.ack, on a classic queue and, where the profile has them, a
quorum queue. The model (conformance.model) is the oracle: every basic.get must be one of the
answers it allows (RQ-01 classic original position, RQ-02 quorum returns first, RQ-04 the
redelivered flag); at the end both channels close (RQ-03) and each queue is emptied by
basic.get in the model's order (machine_clients.ClientMachine.final_check).

What a client cannot express: py-amqp 5.4 has no basic_nack (its Channel stops at
basic.reject), so under `--client amqp` the nack steps are left out (noted in the run, nothing
is sent) and requeueing goes through basic.reject and basic.recover only. Consumers are left
out: deliveries arrive on the library's schedule (machine_client_consuming covers them).

Rules: as in machine_clients: every step ends with a round trip on the channel it used, and
outcomes are compared by scope and reply code.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import rule

from conformance.model import outcomes
from conformance.suite.steps.machine_support import from_machine
from conformance.suite.through_clients.machine_clients import KEYS, OUTSTANDING, ClientMachine, client_step

REQUEUE_RULES = ("RQ-01", "RQ-02", "RQ-03", "RQ-04", "ACK-07")
QUEUES = from_machine(lambda m: list(m.real))


class ClientRequeueMachine(ClientMachine):
    """RQ-01..04 on a classic and a quorum queue through a client library (module doc)."""

    def setup_queues(self) -> None:
        self.declare("classic")
        if self.model.traits.quorum_queues:
            # as in machine_base: with a delivery limit set, 3.10 returns go first (RQ-02; without
            # one 3.10 requeues nack/reject at the back, docs/findings-rabbitmq-3.10.8.md)
            self.declare("quorum", "quorum", delivery_limit=1000)
        for logical in self.real:  # two messages each from the start: a requeue then shows the order
            for _ in range(2):
                self.publish_to(1, logical)
        self._sync(1)

    def publish_to(self, key: int, logical: str) -> None:
        body = self.body()
        self.driver.publish(self.numbers[key], "", self.real[logical], body)
        self.model.publish(key, "", logical, body)

    @rule(key=KEYS, queue=QUEUES)
    @client_step
    def publish(self, key: int, queue: str) -> None:
        self.publish_to(key, queue)
        self._compare(f"basic.publish to {queue}", key, self._sync(key, queue), outcomes.OK)
        self.model.quiesce()

    @rule(key=KEYS, queue=QUEUES)
    @client_step
    def get(self, key: int, queue: str) -> None:
        self.get_from(key, queue, no_ack=False)

    @rule(delivery=OUTSTANDING, how=st.sampled_from(["nack", "reject"]))
    @client_step
    def requeue(self, delivery: tuple[int, int] | None, how: str) -> None:
        if delivery is not None:
            key, tag = delivery
            self.settle_tag(key, how, tag, False, True)  # ACK-07, RQ-01/RQ-02

    @rule(key=KEYS)
    @client_step
    def requeue_all(self, key: int) -> None:
        self.settle_tag(key, "nack", 0, True, True)  # ACK-06: tag 0 multiple, in delivery order

    @rule(key=KEYS)
    @client_step
    def recover(self, key: int) -> None:
        self.driver.recover(self.numbers[key], requeue=True)
        expected = self.model.recover(key, True)
        self._compare("basic.recover requeue=true", key, self._sync(key), expected)
        self.model.quiesce()

    @rule(delivery=OUTSTANDING)
    @client_step
    def ack(self, delivery: tuple[int, int] | None) -> None:
        if delivery is not None:
            key, tag = delivery
            self.settle_tag(key, "ack", tag, False, False)
