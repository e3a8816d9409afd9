"""The checks after each step of the topology machine (conformance/suite/steps/machine_topology.py).

Responsibility: after a step, what the topology oracle says it removed is gone and everything the
oracle holds exists, empty (the machine's module rules); a passive declare on channel `CHECK`
each, a 404 closing only that channel, which is opened again. The declares of what must exist go
out together and their replies are read in order: the channel answers them in the order they
came, and after a 404 it drops the rest, so the first missing one is the one named, as when each
was asked alone (docs/probes.md, "Fewer round trips in the machines"). And, when a copy reached through
an exchange-to-exchange binding is missing, which rule that breaks: the route-on rule (ROUTE-09),
unless one of the bindings between exchanges on its way does not take the message on when tried
alone (a queue bound the same way to the same exchange, the same message published there): then
that binding's own matching rule. Without that probe, the rule named would depend on how far
shrinking got (a wildcard broken under a route through two exchanges reads as ROUTE-09). A copy
missing behind an alternate exchange likewise: the alternate-exchange rule (ROUTE-12) unless the
alternate exchange's binding to the queue, tried alone, does not take the message on either
(measured: a topic '#' broken for the empty key, reached through an alternate exchange, read as
ROUTE-12 when shrinking stopped early under load).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, ClassVar

from codec import (
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    Method,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    ReplyCode,
)
from conformance.catalogue.mentions import RuleViolation
from conformance.drivers.raw import ChannelClosed, DriverError
from conformance.model.topology import Binding, Hop, Removed, Route, hop_rule
from conformance.suite.steps.machine_budget import HURRIED_SETTLE_SECONDS, Smallest
from conformance.suite.steps.machine_program import Program
from conformance.suite.steps.machine_support import MachineTarget

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
        exchanges, queues = sorted(self.model.exchanges.items()), sorted(self.model.queues.items())
        missing = self._first_missing(
            [(ExchangeDeclare(exchange=self.real(name), passive=True), ExchangeDeclareOk) for name, _ in exchanges]
            + [(QueueDeclare(queue=self.real(name), passive=True), QueueDeclareOk) for name, _ in queues])
        if missing is not None and missing < len(exchanges):
            name, spec = exchanges[missing]
            rule_id = "EXCH-08" if spec.auto_delete else "EXCH-07"
            raise RuleViolation(rule_id, f"after {self.program.steps[-1]}: exchange {name} ({spec}) must "
                                         "still exist; it is gone")
        if missing is not None:
            name, qspec = queues[missing - len(exchanges)]
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

    # -- a missing copy reached through exchanges -------------------------------------------
    def _missing_rule(self, route: Route, hop: Hop, key: str, headers: dict[str, Any]) -> tuple[str, str]:
        """The rule a copy missing at `hop` breaks, and what the probe found (module docstring)."""
        rule_id = hop_rule(hop)
        if rule_id == "ROUTE-12" and hop.binding is not None:  # the alternate exchange's own binding, alone
            binding = hop.binding
            if not self.model.exchanges[binding.source].internal and self._taken_alone(binding, key, headers) is False:
                return self.model.binding_rule(binding, headers), _not_taken_alone(binding, "the alternate exchange ")
            return rule_id, ""
        if rule_id != "ROUTE-09":
            return rule_id, ""
        for binding in self.model.bindings:
            if not binding.to_exchange or binding.source not in route.visited \
                    or binding.destination not in route.visited or self.model.exchanges[binding.source].internal \
                    or not self.model.matches(binding, key, headers):
                continue
            if self._taken_alone(binding, key, headers) is False:
                return self.model.binding_rule(binding, headers), _not_taken_alone(binding)
        return rule_id, ""

    def _taken_alone(self, binding: Binding, key: str, headers: dict[str, Any]) -> bool | None:
        """Whether a queue bound like `binding` to its source gets a message published there
        (None: the probe itself failed, which says nothing)."""
        probe, source = self.real("probe"), self.real(binding.source)
        timeout = self.target.timeout(5.0)
        try:
            self.client.rpc(CHECK, QueueDeclare(queue=probe, exclusive=True), QueueDeclareOk, timeout=timeout)
            self.client.rpc(CHECK, QueueBind(queue=probe, exchange=source, routing_key=binding.key,
                                             arguments=dict(binding.arguments)), QueueBindOk, timeout=timeout)
            self.client.send(CHECK, BasicPublish(exchange=source, routing_key=key),
                             BasicProperties(headers=headers or None), b"probe")
            reply = self.client.rpc(CHECK, BasicGet(queue=probe, no_ack=True), BasicGetOk, BasicGetEmpty,
                                    timeout=timeout)
        except (DriverError, OSError):
            return None
        with contextlib.suppress(DriverError, OSError):  # the answer stands; the exclusive queue goes with the connection
            self.client.rpc(CHECK, QueueDelete(queue=probe), QueueDeleteOk, timeout=timeout)
        return isinstance(reply.method, BasicGetOk)

    def _wait_seconds(self) -> float:
        if self.smallest is not None and self.smallest.hurry():
            self.hurried = True
            return self.target.timeout(HURRIED_SETTLE_SECONDS)
        return self.target.timeout(self.WAIT_SECONDS)

    def _exists(self, method: Method, reply: type[Method]) -> bool:
        return self._first_missing([(method, reply)]) is None

    def _first_missing(self, checks: list[tuple[Method, type[Method]]]) -> int | None:
        """The passive declares of `checks` sent together on `CHECK`, their replies read in order:
        the index of the first one that is missing (its 404 closes the channel, which drops the
        rest; it is opened again), or None (module rules)."""
        for method, _ in checks:
            self.client.send(CHECK, method)
        for index, (_, reply) in enumerate(checks):
            try:
                self.client.expect(CHECK, reply, timeout=self.target.timeout(5.0))
            except ChannelClosed as closed:
                if closed.code != ReplyCode.NOT_FOUND:
                    raise
                self.client.closed_channels.pop(CHECK, None)  # channel() clears it only after open-ok
                self.client.inbox.pop(CHECK, None)
                self.client.channel(CHECK)
                return index
        return None

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


def _not_taken_alone(binding: Binding, what: str = "") -> str:
    """What the probe of `binding` found: its source (`what` says which) did not take the message on alone."""
    arguments = f" {dict(binding.arguments)}" if binding.arguments else ""
    return (f"; tried alone, {what}{binding.source} did not take it on to a queue bound with key "
            f"{binding.key!r}{arguments} either, as {binding.describe()} should")
