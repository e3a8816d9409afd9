"""Model-vs-broker machine for the message lifecycle: TTL, expiry at the head, requeue past the TTL,
dead-lettering, x-death and cycles, length limits (TTL-03, DLX-01, DLX-02, DLX-04, LEN-02..04).

LifecycleMachine: three classic queues per example, each with or without a SHORT x-message-ttl,
with or without a dead-letter target among the three (itself included: cycles of one, two and
three queues) and with or without an x-max-length (drop-head or reject-publish), in one of the
topologies drawn at setup; steps publish with no, a SHORT or a LONG per-message expiration,
basic.get, ack, and reject with or without requeue. The oracle is `conformance.model.lifecycle`.

Rules:
- The clock: SHORT is `SHORT_MS`; a step that enqueued a message with a SHORT TTL, or dead-lettered
  one into a SHORT queue, ends by letting that TTL pass on the broker's clock once per hop of the
  chain, counted from the step's last reply (part of the scenario: time must pass), plus `QUIET`.
  LONG never passes within a run. So between steps every SHORT message is past its TTL, and the
  model knows which ones a classic queue has removed (those that reached its head).
- After each step the ready count of every queue must match the model, waited for (bounded) as in
  every machine; a mismatch names the rules of the model's transitions on that queue in the step.
  basic.get must return the model's head, with the model's x-death entries (queue, reason, count,
  in order).
- Hurried shrinking (machine_budget): a shrink candidate waits `HURRIED_QUIET` instead of `QUIET`
  and the shortened settle; the failure reported is the one replayed with the full waits.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from codec import (
    BasicAck,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicReject,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.catalogue.mentions import RuleViolation
from conformance.catalogue.rules import expectation
from conformance.model import OK
from conformance.model.lifecycle import LifecycleModel, Message, QueueSpec
from conformance.plugin.session import Target
from conformance.suite.steps.machine_base import (
    CONTROL,
    MachineTarget,
    ModelMachine,
    from_machine,
    run_machine,
    step,
)
from conformance.suite.steps.machine_consuming import machine_target

SHORT_MS = 50
LONG_MS = 600_000
QUIET = 0.1  # s (scaled) past the last SHORT TTL: see the module rules
HURRIED_QUIET = 0.03
QUEUES = ("a", "b", "c")
QUEUE = st.sampled_from(QUEUES)


Spec = tuple[bool, str | None] | tuple[bool, str | None, int, str]  # (SHORT TTL, target[, max-length, overflow])


def _specs(a: Spec, b: Spec, c: Spec) -> dict[str, QueueSpec]:
    return {"a": QueueSpec(*a), "b": QueueSpec(*b), "c": QueueSpec(*c)}


# the shapes drawn at setup, (SHORT x-message-ttl, dead-letter target) per queue: each a place where
# brokers differ (a draw per queue mostly gave queues that keep nothing, or no cycle at all)
TOPOLOGIES = {
    "rejections into themselves": _specs((False, "a"), (False, "b"), (False, None)),
    "expiring into themselves": _specs((True, "a"), (False, "b"), (True, "b")),
    "reject into an expiring queue that leads back": _specs((False, "b"), (True, "a"), (False, None)),
    "rejections and an expiry round three queues": _specs((False, "b"), (True, "c"), (False, "a")),
    "an expiry cycle of two": _specs((True, "b"), (True, "a"), (False, "a")),
    "an expiry cycle of three": _specs((True, "b"), (True, "c"), (True, "a")),
    "a chain that ends": _specs((True, "b"), (False, "c"), (False, None)),
    "no dead-letter exchange": _specs((True, None), (False, None), (False, "b")),
    "a full queue dropping its head into another": _specs((False, "b", 2, "drop-head"), (False, None),
                                                         (True, "a")),
    "a full queue refusing": _specs((False, "b", 2, "reject-publish"), (True, "a"), (False, "a")),
    "a full queue dropping its head into itself": _specs((False, "a", 1, "drop-head"), (False, "c"),
                                                        (True, "a")),
}
EXPIRATION = st.sampled_from([None, "short", "long"])
HELD = from_machine(lambda m: m.lifecycle.held_tags())
RULES = ("DLX-01", "DLX-02", "DLX-04", "TTL-03", "LEN-02", "LEN-03", "LEN-04")
CH = 1


class LifecycleMachine(ModelMachine):
    """See the module docstring."""

    ADAPTIVE_HURRY: ClassVar[bool] = False  # its counts follow the TTLs' clock
    REPLAY_REDUCTION: ClassVar[bool] = False  # each replay would wait on that clock again (machine_base)

    def __init__(self, target: MachineTarget) -> None:
        super().__init__(target)
        self.legacy = expectation("DLX-07", target.profile).startswith("variant")
        self.lifecycle = LifecycleModel({}, self.legacy)
        self.connect("A")
        self.open(CH, "A")
        self.clients["A"].rpc(CH, ConfirmSelect(), ConfirmSelectOk)
        self.seqno = 0
        self.tags = 0
        self.names: dict[str, str] = {}  # broker name -> logical

    @initialize(topology=st.sampled_from(list(TOPOLOGIES)))
    @step
    def setup(self, topology: str) -> None:
        specs = TOPOLOGIES[topology]
        self.lifecycle = LifecycleModel(dict(specs), self.legacy)
        for logical in QUEUES:
            self.real[logical] = f"{self.prefix}.{logical}"
            self.names[self.real[logical]] = logical
        for logical, spec in specs.items():
            arguments: dict[str, Any] = {"x-message-ttl": SHORT_MS} if spec.short_ttl else {}
            if spec.target is not None:
                arguments |= {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": self.real[spec.target]}
            if spec.max_length is not None:
                arguments |= {"x-max-length": spec.max_length, "x-overflow": spec.overflow}
            self.clients["A"].rpc(CONTROL, QueueDeclare(queue=self.real[logical], arguments=arguments), QueueDeclareOk)

    # -- rules --------------------------------------------------------------------------------------
    @rule(queue=QUEUE, expiration=EXPIRATION)
    @step
    def publish(self, queue: str, expiration: str | None) -> None:
        self.lifecycle.begin_step()
        self.send_publish(queue, expiration)

    def send_publish(self, queue: str, expiration: str | None) -> None:
        body = self.body().decode()
        ttl = {None: None, "short": str(SHORT_MS), "long": str(LONG_MS)}[expiration]
        client = self.clients["A"]
        client.send(CH, BasicPublish(exchange="", routing_key=self.real[queue]), BasicProperties(expiration=ttl),
                    body.encode())
        self.seqno += 1
        reply = client.expect(CH, BasicAck, BasicNack, timeout=self.target.timeout(self.SETTLE_SECONDS))
        confirm = reply.method
        assert isinstance(confirm, BasicAck | BasicNack) and confirm.delivery_tag == self.seqno \
            and not confirm.multiple, f"the publish of {body} was confirmed with {confirm!r} (PC-05)"
        accepted = self.lifecycle.publish(queue, body, expiration == "short")
        if accepted != isinstance(confirm, BasicAck):
            spec = self.lifecycle.specs[queue]
            raise RuleViolation(["LEN-04"], (
                f"the publish of {body} to {queue} ({spec}, holding {len(self.lifecycle.bodies(queue))} ready messages "
                f"by the model before it) was confirmed with {confirm.NAME}; a queue at its x-max-length with "
                f"overflow reject-publish refuses it (basic.nack), any other takes it (basic.ack)"))

    @rule(queue=QUEUE)
    @step
    def get(self, queue: str) -> None:
        self.lifecycle.begin_step()
        self.fetch(queue)

    @rule(queue=QUEUE, times=st.integers(1, 3))
    @step
    def get_and_reject(self, queue: str, times: int) -> None:
        """basic.get, then basic.reject without requeue, `times` over: deaths in one step (a message
        going round a cycle through rejections is seen at each turn)."""
        self.lifecycle.begin_step()
        for _ in range(times):
            if not self.fetch(queue):
                return
            self.settle_call(BasicReject(delivery_tag=self.tags, requeue=False))
            self.lifecycle.reject(self.tags, False)
            self.sync()

    def fetch(self, queue: str) -> bool:
        """basic.get (acknowledged) checked against the model's head, publishing one message (no
        expiration) first when the model's queue is empty; True when a message came."""
        if not self.lifecycle.count(queue):
            self.send_publish(queue, None)
            self.sync()
        reply = self.clients["A"].rpc(CH, BasicGet(queue=self.real[queue]), BasicGetOk, BasicGetEmpty,
                                      timeout=self.target.timeout(self.SETTLE_SECONDS))
        before = self.lifecycle.bodies(queue)
        expected = self.lifecycle.get(queue, self.tags + 1)
        got = reply.body.decode() if isinstance(reply.method, BasicGetOk) else None
        if got != (expected.body if expected else None):
            raise RuleViolation(self.lifecycle.rules_for(queue, got is not None) or ["TTL-03"], (
                f"basic.get on {queue} returned {got or 'basic.get-empty'}; the model's head was "
                f"{expected.body if expected else 'nothing'} (the queue in order: {before}), every expired message "
                f"having left its head: {self.explain(queue)}"))
        if isinstance(reply.method, BasicGetOk):
            self.tags += 1
            assert reply.method.delivery_tag == self.tags, \
                f"ACK-01: basic.get-ok carried delivery tag {reply.method.delivery_tag}, the channel's next is {self.tags}"
        if expected is not None:
            self.check_deaths(queue, expected, reply.properties)
        return expected is not None

    @rule(tag=HELD)
    @step
    def ack(self, tag: int | None) -> None:
        self.lifecycle.begin_step()
        if tag is not None:
            self.settle_call(BasicAck(delivery_tag=tag))
            self.lifecycle.ack(tag)

    @rule(tag=HELD, requeue=st.booleans())
    @step
    def reject(self, tag: int | None, requeue: bool) -> None:
        self.lifecycle.begin_step()
        if tag is not None:
            self.settle_call(BasicReject(delivery_tag=tag, requeue=requeue))
            self.lifecycle.reject(tag, requeue)

    # -- checks -------------------------------------------------------------------------------------
    def settle_call(self, method: Any) -> None:
        outcome = self.call_async(CH, method)
        assert outcome == OK, \
            f"{method!r} on a held delivery tag closed the channel: {outcome} (ACK-03)"

    def check_deaths(self, queue: str, expected: Message, properties: BasicProperties | None) -> None:
        headers = dict((properties.headers or {}) if properties else {})
        raw = headers.get("x-death") or []
        seen = [(self.names.get(str(d.get("queue")), d.get("queue")), d.get("reason"), d.get("count"))
                for d in raw if isinstance(d, dict)]
        want = [tuple(d) for d in expected.deaths]
        if seen != want:
            raise RuleViolation(["DLX-02"], (
                f"{expected.body} from {queue} carries x-death (queue, reason, count) {seen}; the model {want}: one "
                "entry per queue and reason, newest first, the count of an entry that recurs incremented and that "
                f"entry moved to the front{' (regrouped first, before 3.13)' if self.legacy else ''}"))

    def explain(self, queue: str) -> str:
        events = [e.text + f" ({e.rule})" for e in self.lifecycle.events if queue in e.queues]
        return "; ".join(events) or "nothing happened to it in this step"

    def sync(self) -> None:
        """Let the SHORT TTLs of this step pass (module rules), wait for the counts to match; when a
        TTL was involved, once more after them: a message dead-lettered behind a live head, counted
        once it arrived, has then passed its TTL too, however late the broker moved it."""
        timed = self.lifecycle.hops > 0
        self.wait_for_ttls()
        self.settle_counts()
        if timed:
            self.lifecycle.hops = 1
            self.wait_for_ttls()
            self.settle_counts()

    def settle_counts(self) -> None:
        settle = self.settle_seconds()
        deadline = time.monotonic() + settle
        while True:
            mismatch = self.count_mismatch()
            if mismatch is None:
                return
            if time.monotonic() > deadline:
                queue, more, text = mismatch
                rules, seen = self.lifecycle.rules_for(queue, more) or ["TTL-03"], ""
                if more:  # what the broker kept: a message that went round an expiry cycle says so in its x-death
                    deaths = self.peek_deaths(queue)
                    seen = f"; the broker's head there carries x-death {deaths}"
                    if any(reason == "expired" and isinstance(n, int) and n > 1 for _, reason, n in deaths):
                        rules = ["DLX-04"]
                raise RuleViolation(rules, f"after {settle:.1f} s: {text}{seen}")
            time.sleep(0.02)

    def peek_deaths(self, queue: str) -> list[tuple[Any, Any, Any]]:
        """The x-death (queue, reason, count) of the message at the broker's head of `queue`, taken
        off (the example is failing): what the failure shows of it."""
        reply = self.clients[self.control_conn].rpc(CONTROL, BasicGet(queue=self.real[queue], no_ack=True),
                                                    BasicGetOk, BasicGetEmpty)
        headers = dict((reply.properties.headers or {}) if reply.properties else {})
        return [(self.names.get(str(d.get("queue")), d.get("queue")), d.get("reason"), d.get("count"))
                for d in headers.get("x-death") or [] if isinstance(d, dict)]

    def wait_for_ttls(self) -> None:
        """Let the SHORT TTLs the model counted since the last wait pass on the broker's clock."""
        if self.lifecycle.hops:
            quiet = HURRIED_QUIET if self.smallest is not None and self.smallest.hurry() else QUIET
            time.sleep(self.lifecycle.hops * SHORT_MS / 1000 + self.target.timeout(quiet))
            self.lifecycle.hops = 0

    def count_mismatch(self) -> tuple[str, bool, str] | None:  # type: ignore[override]
        control = self.clients[self.control_conn]
        for logical in QUEUES:
            if logical not in self.real:
                continue
            reply = control.rpc(CONTROL, QueueDeclare(queue=self.real[logical], passive=True), QueueDeclareOk)
            assert isinstance(reply.method, QueueDeclareOk)
            if reply.method.message_count != self.lifecycle.count(logical):
                return logical, reply.method.message_count > self.lifecycle.count(logical), (
                    f"queue {logical} ({self.lifecycle.specs[logical]}) holds {reply.method.message_count} ready "
                    f"messages, the model {self.lifecycle.count(logical)}: {self.lifecycle.bodies(logical)}; "
                    f"in this step: {self.explain(logical)}")
        return None


@pytest.mark.takes(22)  # measured: 21-22 s on RabbitMQ 4.3.6 and embedded
@pytest.mark.rules(*RULES)
def test_the_message_lifecycle_matches_the_model(target: Target) -> None:
    run_machine(LifecycleMachine, machine_target(target), examples=25, steps=10)
