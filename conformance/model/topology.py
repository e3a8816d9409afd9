"""The topology oracle: exchanges, queues and bindings, where a publish goes, what a delete removes.

Responsibility: for the topology machine (conformance/suite/routing/test_machine_topology.py)
predict, from the declarations, bindings and deletions so far, the exact set of queues each
publish reaches, whether a mandatory one is returned 312, and every exchange and queue each
removal takes with it. Pure: no I/O, no clock, no import of the reference broker.

Rules (RabbitMQ's, v3.10.8 to v4.3.x: rabbit_exchange:route/2 and route1, rabbit_binding's
removals and rabbit_exchange:maybe_auto_delete):
- Routing keys are the routing key and the CC and BCC headers' keys (ROUTE-13). The default
  exchange "" reaches the queue named by each key (ROUTE-01); an exchange matches each binding of
  its own against the keys and headers: direct the whole key (ROUTE-03), fanout every binding
  (ROUTE-04), topic words with `*` one and `#` zero or more (ROUTE-05), headers `x-match`
  all/any, `x-` keys left out unless `-with-x` (ROUTE-06, ROUTE-07).
- A matched binding to an exchange routes on through it, each exchange at most once per publish
  (ROUTE-09). An exchange whose own bindings match nothing, exchange destinations included,
  passes the message to its alternate exchange if that one exists (ROUTE-12; an alternate
  exchange of a later hop is taken for that hop alone). A queue gets one copy however many
  routes reach it (ROUTE-10); a mandatory publish that reaches none is returned 312 (ROUTE-11).
- Deleting a queue removes the bindings to it (QUEUE-11); deleting an exchange removes the
  bindings from and to it (EXCH-07). A removed binding whose source is an auto-delete exchange
  left with no binding as a source deletes that exchange too, and so on (EXCH-08). Exclusive
  queues go when their connection closes (QUEUE-05), an auto-delete queue when its last consumer
  is cancelled (QUEUE-06). Unbinding a binding removes it alone, its source's auto-delete aside.
- Every route is kept with the rule that decided it (`Route`), so a broker that misroutes is
  reported as the rule of the hop it got wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TYPE_RULES = {"direct": "ROUTE-03", "fanout": "ROUTE-04", "topic": "ROUTE-05", "headers": "ROUTE-06"}


@dataclass(frozen=True)
class Exchange:
    kind: str
    auto_delete: bool = False
    internal: bool = False
    alternate: str | None = None  # the alternate-exchange argument: a name, declared or not


@dataclass(frozen=True)
class Queue:
    exclusive: bool = False
    auto_delete: bool = False
    durable: bool = False


@dataclass(frozen=True)
class Binding:
    source: str
    destination: str
    to_exchange: bool
    key: str
    arguments: tuple[tuple[str, Any], ...] = ()  # sorted items: a binding is a value

    def describe(self) -> str:
        arrow = "exchange" if self.to_exchange else "queue"
        args = f" {dict(self.arguments)}" if self.arguments else ""
        return f"{self.source} -> {arrow} {self.destination} key {self.key!r}{args}"


@dataclass(frozen=True)
class Hop:
    """One step of a route: how `exchange` was reached and which binding of it took the message on."""

    exchange: str
    via: str  # "publish", "exchange-to-exchange" or "alternate"
    binding: Binding | None  # None: the default exchange's implicit binding
    rule: str  # the rule that decided the match (or the miss)
    by_cc: bool = False  # matched a CC/BCC key only


@dataclass
class Route:
    """Where a publish goes: the queues with the first hop that reached each, and the exchanges
    visited; `misses` are bindings to queues that were looked at and did not match."""

    queues: dict[str, Hop] = field(default_factory=dict)
    visited: dict[str, str] = field(default_factory=dict)  # exchange -> how it was reached
    misses: dict[str, list[Hop]] = field(default_factory=dict)


@dataclass
class Removed:
    """What one operation removed, with the rule that requires each removal."""

    exchanges: dict[str, str] = field(default_factory=dict)
    queues: dict[str, str] = field(default_factory=dict)
    causes: dict[str, str] = field(default_factory=dict)  # auto-deleted exchange -> the rule that removed its binding


def topic_matches(pattern: str, key: str) -> bool:
    """RabbitMQ's topic match (ROUTE-05): words split on '.', the empty key has no words."""
    want, words = (pattern.split(".") if pattern else []), (key.split(".") if key else [])

    def match(p: int, w: int) -> bool:
        if p == len(want):
            return w == len(words)
        if want[p] == "#":
            return any(match(p + 1, i) for i in range(w, len(words) + 1))
        return w < len(words) and want[p] in ("*", words[w]) and match(p + 1, w + 1)

    return match(0, 0)


def headers_match(arguments: Mapping[str, Any], headers: Mapping[str, Any]) -> bool:
    """ROUTE-06/07: x-match all (the default) or any; `x-` keys only in the `-with-x` modes."""
    mode = str(arguments.get("x-match", "all"))
    with_x = mode.endswith("-with-x")
    wanted = [(k, v) for k, v in arguments.items() if k != "x-match" and (with_x or not k.startswith("x-"))]
    hits = [k in headers and (v is None or headers[k] == v) for k, v in wanted]
    return any(hits) if mode.startswith("any") else all(hits)


def headers_rule(arguments: Mapping[str, Any], headers: Mapping[str, Any] | None = None) -> str:
    """ROUTE-07 when the `-with-x` mode or an `x-` key decides the match, else ROUTE-06."""
    mode = str(arguments.get("x-match", "all"))
    if mode.endswith("-with-x"):
        return "ROUTE-07"
    if headers is None or not any(k.startswith("x-") and k != "x-match" for k in arguments):
        return "ROUTE-06"
    counted = headers_match({**arguments, "x-match": f"{mode}-with-x"}, headers)
    return "ROUTE-07" if counted != headers_match(arguments, headers) else "ROUTE-06"


class Topology:
    """The declared exchanges and queues and their bindings, by the machine's logical names."""

    def __init__(self) -> None:
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        self.bindings: list[Binding] = []  # in the order made (a route reports its first hop)
        self.consumed: set[str] = set()  # queues that had a consumer (QUEUE-06 needs one)
        self.history: dict[Binding, str] = {}  # removed bindings, with the rule that removed them

    # -- declarations and bindings -----------------------------------------------------------
    def declare_exchange(self, name: str, spec: Exchange) -> None:
        self.exchanges.setdefault(name, spec)

    def declare_queue(self, name: str, spec: Queue) -> None:
        self.queues.setdefault(name, spec)

    def bind(self, binding: Binding) -> None:
        if binding not in self.bindings:
            self.bindings.append(binding)
        self.history.pop(binding, None)

    def unbind(self, binding: Binding) -> Removed:
        removed = Removed()
        if binding in self.bindings:
            self.bindings.remove(binding)
            self.history[binding] = "EXCH-10"
            self._auto_delete([binding.source], removed, "EXCH-10")
        return removed

    # -- removals ----------------------------------------------------------------------------
    def delete_queue(self, name: str, rule: str = "QUEUE-10") -> Removed:
        removed = Removed()
        self._remove_queue(name, rule, removed)
        return removed

    def delete_exchange(self, name: str) -> Removed:
        removed = Removed()
        self._remove_exchange(name, "EXCH-06", removed)
        return removed

    def connection_closed(self) -> Removed:
        """The exclusive queues go with their connection (QUEUE-05)."""
        removed = Removed()
        for name in [q for q, spec in self.queues.items() if spec.exclusive]:
            self._remove_queue(name, "QUEUE-05", removed)
        return removed

    def consumer_cancelled(self, name: str) -> Removed:
        """The queue's only consumer was cancelled: an auto-delete queue goes (QUEUE-06)."""
        self.consumed.add(name)
        if self.queues[name].auto_delete:
            return self.delete_queue(name, "QUEUE-06")
        return Removed()

    def _remove_queue(self, name: str, rule: str, removed: Removed) -> None:
        if self.queues.pop(name, None) is None:
            return
        removed.queues[name] = rule
        self.consumed.discard(name)
        gone = [b for b in self.bindings if not b.to_exchange and b.destination == name]
        self._forget(gone, "QUEUE-11")
        self._auto_delete([b.source for b in gone], removed, "QUEUE-11")

    def _remove_exchange(self, name: str, rule: str, removed: Removed) -> None:
        if self.exchanges.pop(name, None) is None:
            return
        removed.exchanges[name] = rule
        gone = [b for b in self.bindings if b.source == name or (b.to_exchange and b.destination == name)]
        self._forget(gone, "EXCH-07")
        self._auto_delete([b.source for b in gone if b.source != name], removed, "EXCH-07")

    def _forget(self, gone: list[Binding], rule: str) -> None:
        self.bindings = [b for b in self.bindings if b not in gone]
        self.history.update(dict.fromkeys(gone, rule))

    def _auto_delete(self, sources: list[str], removed: Removed, cause: str) -> None:
        for source in dict.fromkeys(sources):
            spec = self.exchanges.get(source)
            if spec is not None and spec.auto_delete and not any(b.source == source for b in self.bindings):
                removed.causes[source] = cause
                self._remove_exchange(source, "EXCH-08", removed)

    # -- routing -----------------------------------------------------------------------------
    def in_use(self, exchange: str) -> bool:
        return any(b.source == exchange for b in self.bindings)

    def route(self, exchange: str, routing_key: str, headers: Mapping[str, Any] | None = None,
              cc: tuple[str, ...] = ()) -> Route:
        """Where a publish to `exchange` (declared, or "" the default one) goes (module rules)."""
        headers = dict(headers or {})
        keys = (routing_key, *cc)
        route = Route()
        if exchange == "":
            for key in keys:
                if key in self.queues and key not in route.queues:
                    route.queues[key] = Hop("", "publish", None, "ROUTE-01", key != routing_key)
            return route
        work, route.visited[exchange] = [exchange], "publish"
        while work:
            name = work.pop(0)
            spec = self.exchanges[name]
            matched = False
            for binding in [b for b in self.bindings if b.source == name]:
                hop = self._match(name, route.visited[name], spec, binding, keys, headers)
                if hop is None:
                    if not binding.to_exchange:
                        rule = self._rule(spec, binding, headers)
                        route.misses.setdefault(binding.destination, []).append(
                            Hop(name, route.visited[name], binding, rule))
                    continue
                matched = True
                self._reach(route, work, binding.destination, binding.to_exchange, hop)
            alternate = spec.alternate
            if not matched and alternate is not None and alternate in self.exchanges \
                    and alternate not in route.visited:
                route.visited[alternate] = "alternate"
                work.append(alternate)
        return route

    def _reach(self, route: Route, work: list[str], destination: str, to_exchange: bool, hop: Hop) -> None:
        if not to_exchange:
            route.queues.setdefault(destination, hop)
        elif destination not in route.visited:
            route.visited[destination] = "exchange-to-exchange"
            work.append(destination)

    def matches(self, binding: Binding, routing_key: str, headers: Mapping[str, Any] | None = None) -> bool:
        """Whether `binding` takes a message of this key and headers on from its source exchange."""
        spec = self.exchanges[binding.source]
        return self._match(binding.source, "publish", spec, binding, (routing_key,), dict(headers or {})) is not None

    def binding_rule(self, binding: Binding, headers: Mapping[str, Any] | None = None) -> str:
        """The rule that decides whether `binding` matches (its source exchange's type's)."""
        return self._rule(self.exchanges[binding.source], binding, headers)

    def _match(self, name: str, via: str, spec: Exchange, binding: Binding, keys: tuple[str, ...],
               headers: Mapping[str, Any]) -> Hop | None:
        rule = self._rule(spec, binding, headers)
        if spec.kind == "headers":
            return Hop(name, via, binding, rule) if headers_match(dict(binding.arguments), headers) else None
        for n, key in enumerate(keys):
            if spec.kind == "fanout" or (spec.kind == "direct" and binding.key == key) or (
                    spec.kind == "topic" and topic_matches(binding.key, key)):
                return Hop(name, via, binding, rule, by_cc=n > 0 and spec.kind != "fanout")
        return None

    @staticmethod
    def _rule(spec: Exchange, binding: Binding, headers: Mapping[str, Any] | None = None) -> str:
        return headers_rule(dict(binding.arguments), headers) if spec.kind == "headers" else TYPE_RULES[spec.kind]


def hop_rule(hop: Hop) -> str:
    """The one rule a wrong outcome at this hop breaks: the hop's own matching rule when the
    published exchange decided it; the route-on rule when an exchange-to-exchange binding or an
    alternate exchange brought the message there; CC's rule when only a CC/BCC key matched."""
    if hop.by_cc:
        return "ROUTE-13"
    if hop.via == "exchange-to-exchange":
        return "ROUTE-09"
    if hop.via == "alternate":
        return "ROUTE-12"
    return hop.rule


def extra_rule(topology: Topology, route: Route, queue: str) -> str:
    """The one rule a copy that reached `queue` against the model breaks (module rules): a binding
    to it that was looked at and did not match; else a binding from a visited exchange that did not
    match and leads there through exchanges; else a removed binding that led there (QUEUE-11,
    EXCH-07, EXCH-10); else an alternate exchange that should not have been taken (ROUTE-12)."""
    misses = route.misses.get(queue)
    if misses:
        return hop_rule(misses[0])
    for binding in topology.bindings:
        if binding.source in route.visited and binding.to_exchange and binding.destination not in route.visited \
                and queue in _reachable(topology, binding.destination):
            spec = topology.exchanges[binding.source]
            return Topology._rule(spec, binding)
    for binding, rule in topology.history.items():
        if binding.destination == queue or (binding.to_exchange and queue in _reachable(topology, binding.destination)):
            return rule
    return "ROUTE-12" if any(s.alternate for s in topology.exchanges.values()) else "ROUTE-01"


def _reachable(topology: Topology, exchange: str) -> set[str]:
    """The queues any chain of bindings (or alternate exchanges) from `exchange` can reach."""
    seen, work, queues = {exchange}, [exchange], set()
    while work:
        name = work.pop()
        spec = topology.exchanges.get(name)
        nexts = [b.destination for b in topology.bindings if b.source == name and b.to_exchange]
        queues |= {b.destination for b in topology.bindings if b.source == name and not b.to_exchange}
        if spec is not None and spec.alternate in topology.exchanges:
            nexts.append(spec.alternate)
        for n in nexts:
            if n not in seen:
                seen.add(n)
                work.append(n)
    return queues
