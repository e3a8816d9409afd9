"""The checks after each step of the topology machine (conformance/suite/steps/machine_topology.py).

Responsibility: after a step, what the topology oracle says it removed is gone and everything the
oracle holds exists, empty (the machine's module rules); a passive declare on channel `CHECK`
each, a 404 closing only that channel, which is opened again.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from codec import (
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    Method,
    QueueDeclare,
    QueueDeclareOk,
    ReplyCode,
)
from conformance.catalogue.mentions import RuleViolation
from conformance.drivers.raw import ChannelClosed
from conformance.model.topology import Removed
from conformance.suite.steps.machine_support import HURRIED_SETTLE_SECONDS, MachineTarget, Program, Smallest

CHECK = 2  # the checks' channel


class TopologyChecks:
    """The checks, mixed into the machine (which has `client`, `model`, `target`, `program`,
    `smallest`, `hurried` and `real`)."""

    WAIT_SECONDS: ClassVar[float] = 5.0  # for what the broker removes by its own act (module rules)
    client: Any
    model: Any
    target: MachineTarget
    program: Program
    smallest: Smallest | None
    hurried: bool

    def real(self, logical: str) -> str:
        raise NotImplementedError

    # -- after every step --------------------------------------------------------------------
    def _check(self, removed: Removed, wait: bool = False) -> None:
        """What the step removed is gone, everything else the model holds exists, empty."""
        deadline = time.monotonic() + self._wait_seconds() if wait else 0.0
        for name, rule_id in removed.exchanges.items():
            if not self._gone(ExchangeDeclare(exchange=self.real(name), passive=True), ExchangeDeclareOk, deadline):
                rule_id, why = self._why_kept(name, rule_id, removed.causes.get(name))
                raise RuleViolation(rule_id, f"after {self.program.steps[-1]}: exchange {name} must be gone "
                                             f"({why}); it still exists")
        for name, rule_id in removed.queues.items():
            if not self._gone(QueueDeclare(queue=self.real(name), passive=True), QueueDeclareOk, deadline):
                raise RuleViolation(rule_id, f"after {self.program.steps[-1]}: queue {name} must be gone "
                                             f"({_why(rule_id)}); it still exists")
        for name, spec in sorted(self.model.exchanges.items()):
            if not self._exists(ExchangeDeclare(exchange=self.real(name), passive=True), ExchangeDeclareOk):
                rule_id = "EXCH-08" if spec.auto_delete else "EXCH-07"
                raise RuleViolation(rule_id, f"after {self.program.steps[-1]}: exchange {name} ({spec}) must "
                                             "still exist; it is gone")
        for name, qspec in sorted(self.model.queues.items()):
            reply = self._exists(QueueDeclare(queue=self.real(name), passive=True), QueueDeclareOk)
            if not reply:
                rule_id = "QUEUE-06" if qspec.auto_delete else "QUEUE-05" if qspec.exclusive else "QUEUE-10"
                raise RuleViolation(rule_id, f"after {self.program.steps[-1]}: queue {name} ({qspec}) must "
                                             "still exist; it is gone")

    def _why_kept(self, name: str, rule_id: str, cause: str | None) -> tuple[str, str]:
        """Why an auto-delete exchange is still there: its binding was kept (`cause`, the rule that
        removes it), or it was not deleted with its last binding (EXCH-08). Asked by an
        exchange.delete with if-unused, which this failing example no longer needs the exchange for."""
        if rule_id != "EXCH-08" or cause is None:
            return rule_id, _why(rule_id)
        try:
            self.client.rpc(CHECK, ExchangeDelete(exchange=self.real(name), if_unused=True), ExchangeDeleteOk,
                            timeout=self.target.timeout(5.0))
        except ChannelClosed as closed:
            return cause, (f"{_why(cause)}, and then an auto-delete exchange without a binding as a source goes; "
                           f"exchange.delete if-unused says it still has one: {closed.code} {closed.text}")
        return rule_id, f"{_why(rule_id)}; exchange.delete if-unused found no binding left and deleted it"

    def _wait_seconds(self) -> float:
        if self.smallest is not None and self.smallest.hurry():
            self.hurried = True
            return self.target.timeout(HURRIED_SETTLE_SECONDS)
        return self.target.timeout(self.WAIT_SECONDS)

    def _exists(self, method: Method, reply: type[Method]) -> bool:
        try:
            self.client.rpc(CHECK, method, reply, timeout=self.target.timeout(5.0))
        except ChannelClosed as closed:
            if closed.code != ReplyCode.NOT_FOUND:
                raise
            self.client.closed_channels.pop(CHECK, None)  # channel() clears it only after open-ok
            self.client.inbox.pop(CHECK, None)
            self.client.channel(CHECK)
            return False
        return True

    def _gone(self, method: Method, reply: type[Method], deadline: float) -> bool:
        while self._exists(method, reply):
            if time.monotonic() >= deadline:
                return False
        return True


def _why(rule_id: str) -> str:
    return {"EXCH-08": "an auto-delete exchange goes with its last binding as a source",
            "EXCH-06": "exchange.delete", "QUEUE-10": "queue.delete", "QUEUE-05": "an exclusive queue goes with its "
            "connection", "QUEUE-06": "an auto-delete queue goes with its last consumer",
            "QUEUE-11": "a deleted queue's bindings go with it", "EXCH-07": "a deleted exchange's bindings go with it",
            "EXCH-10": "an unbound binding is gone"}.get(rule_id, rule_id)


