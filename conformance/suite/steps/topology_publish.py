"""A publish of the topology machine and its judgement: where each copy went, against the oracle.

Responsibility: the machine's publish (conformance/suite/steps/machine_topology.py, its module
rules: every publish has its own body, then every queue the model holds is drained with basic.get
on channel `STEP` until get-empty, a passive declare after them as the round trip a basic.return
comes before) and the rule a difference breaks: a copy missing (the hop the broker got wrong,
topology_checks `_missing_rule`), a copy where the rules send none (`extra_rule`), more than one
copy (ROUTE-10), a mandatory publish returned wrongly (ROUTE-11); then the step's checks.
"""

from __future__ import annotations

from typing import Any

from codec import (
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    BasicReturn,
    ExchangeDeclareOk,
    Method,
    ReplyCode,
)
from conformance.catalogue.mentions import RuleViolation
from conformance.drivers.raw import DriverError
from conformance.model.topology import Removed, extra_rule
from conformance.suite.steps.topology_checks import TopologyChecks
from conformance.suite.steps.wire import PING

STEP = 1  # the channel of every step (topology_checks.CHECK: the checks')


class TopologyPublishing(TopologyChecks):
    """The publish and its judgement, mixed into the machine (which also has `bodies`)."""

    bodies: int

    def _request(self, rule_id: str, what: str, method: Method, *reply: type[Method]) -> None:
        try:
            self.client.rpc(STEP, method, *reply, timeout=self.target.timeout(5.0))
        except DriverError as exc:
            raise RuleViolation(rule_id, f"{what} must succeed (everything it names exists in the model); "
                                         f"the broker answered: {exc}") from None

    def _publish(self, exchange: str, real: str, key: str, headers: dict[str, Any], cc: tuple[str, ...],
                 mandatory: bool, logical: str | None = None) -> None:
        self.bodies += 1
        body = f"m{self.bodies}"
        route = self.model.route(exchange, logical if logical is not None else key, headers, cc)
        what = f"publish {body} to {exchange or 'the default exchange'} key {key!r} headers {headers}" + \
            (" mandatory" if mandatory else "")
        self.client.send(STEP, BasicPublish(exchange=real, routing_key=key, mandatory=mandatory),
                         BasicProperties(headers=headers or None), body.encode())
        got = self._drain(what)
        wanted = set(route.queues)
        problems = []
        for queue in sorted(self.model.queues):
            copies = got.get(queue, 0)
            if queue in wanted and copies == 0:
                rule_id, probed = self._missing_rule(route, route.queues[queue], key, headers)
                problems.append((rule_id, f"{queue} did not get it (the rules route it "
                                 f"there by {_hop_text(route.queues[queue])}{probed})"))
            elif queue not in wanted and copies:
                misses = route.misses.get(queue)
                problems.append((extra_rule(self.model, route, queue), f"{queue} got it (" + (
                    f"the rules do not match it to {misses[0].binding.describe() if misses[0].binding else queue}"
                    if misses else "no route the rules know leads there") + ")"))
            elif copies > 1:
                problems.append(("ROUTE-10", f"{queue} got {copies} copies (one however many routes)"))
        returns = [c.method for c in self.client.pending(STEP) if isinstance(c.method, BasicReturn)]
        self.client.inbox.pop(STEP, None)
        must_return = mandatory and not wanted
        if not problems and len(returns) != int(must_return):
            said = "not returned" if not returns else f"returned {len(returns)} time(s)"
            problems.append(("ROUTE-11", f"it was {said}; a mandatory publish that reaches no queue is returned "
                                         "once (312 NO_ROUTE), any other publish never"))
        elif not problems and returns and returns[0].reply_code != ReplyCode.NO_ROUTE:
            problems.append(("ROUTE-11", f"it was returned with {returns[0].reply_code}, not 312 NO_ROUTE"))
        if problems:
            rule_id = problems[0][0]
            detail = "; ".join(text for _, text in problems)
            raise RuleViolation(rule_id, f"{what}: {detail}. The rules send it to {sorted(wanted) or 'no queue'}; "
                                         f"the broker to {sorted(q for q in got if got[q])}. "
                                         f"Bindings: {[b.describe() for b in self.model.bindings]}")
        self._check(Removed())

    def _drain(self, what: str) -> dict[str, int]:
        """Each queue the model holds, emptied with basic.get: the copies of the last body each got."""
        got: dict[str, int] = {}
        for queue in sorted(self.model.queues):
            while True:
                try:
                    reply = self.client.rpc(STEP, BasicGet(queue=self.real(queue), no_ack=True), BasicGetOk,
                                            BasicGetEmpty, timeout=self.target.timeout(5.0))
                except DriverError as exc:
                    raise RuleViolation("EXCH-09", f"{what}: the publish to an existing, not internal exchange "
                                                   f"was refused, or {queue} was gone: {exc}") from None
                if isinstance(reply.method, BasicGetEmpty):
                    break
                got[queue] = got.get(queue, 0) + 1
        self._request("EXCH-09", f"{what}, then a passive declare of amq.direct (a round trip: a basic.return "
                                 "comes before its reply)", PING,
                      ExchangeDeclareOk)
        return got


def _hop_text(hop: Any) -> str:
    how = {"publish": "", "exchange-to-exchange": " (reached by an exchange-to-exchange binding)",
           "alternate": " (its alternate exchange)"}[hop.via]
    binding = hop.binding.describe() if hop.binding else f"the default exchange's binding of {hop.exchange!r}"
    return f"{binding}{how}" + (" on a CC key" if hop.by_cc else "")
