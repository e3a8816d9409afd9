"""Shared steps of the routing suite: a small topology on one channel, and where publishes went.

Rules:
- A topology is built on one channel of one connection: exclusive queues (gone with the
  connection) and auto-delete exchanges, all named by the `names` fixture.
- Where a message went is read, never guessed: every publish carries its own body, then
  `reached` drains each queue with basic.get (no-ack) until get-empty. A publish and the
  following basic.get on the same channel are ordered by the broker, so no wait is needed;
  every reply is awaited within the client's (scaled) timeout.
- A difference is reported as a person reads it: which queue (by the label the test gave it)
  should have received which messages, and what it received instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from codec import (
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    BasicReturn,
    ExchangeBind,
    ExchangeBindOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target


@dataclass
class Topology:
    """Exchanges and queues on one channel, by the labels a test gives them."""

    client: RawClient
    ch: int
    names: Names
    target: Target
    exchanges: dict[str, str] = field(default_factory=dict)  # label -> name
    queues: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # what pytest shows of a failed check's condition: the labels, not the client
        return f"Topology(exchanges={sorted(self.exchanges)}, queues={sorted(self.queues)})"

    def rpc(self, method: Any, ok: type) -> None:
        self.client.rpc(self.ch, method, ok, timeout=self.target.timeout(5))

    def exchange(self, label: str, kind: str, arguments: Mapping[str, Any] | None = None) -> str:
        name = self.names.exchange(label)
        self.rpc(ExchangeDeclare(exchange=name, exchange_type=kind, auto_delete=True,
                                 arguments=dict(arguments or {})), ExchangeDeclareOk)
        self.exchanges[label] = name
        return name

    def queue(self, label: str) -> str:
        name = self.names.queue(label)
        self.rpc(QueueDeclare(queue=name, exclusive=True), QueueDeclareOk)
        self.queues[label] = name
        return name

    def bind(self, queue: str, exchange: str, key: str = "", arguments: Mapping[str, Any] | None = None) -> None:
        """Bind the queue labelled `queue` to the exchange labelled `exchange`."""
        self.rpc(QueueBind(queue=self.queues[queue], exchange=self.exchanges[exchange], routing_key=key,
                           arguments=dict(arguments or {})), QueueBindOk)

    def bind_exchange(self, destination: str, source: str, key: str = "") -> None:
        self.rpc(ExchangeBind(destination=self.exchanges[destination], source=self.exchanges[source],
                              routing_key=key), ExchangeBindOk)

    def publish(self, exchange: str, key: str, body: str, *, headers: Mapping[str, Any] | None = None,
                mandatory: bool = False) -> None:
        """Publish `body` to the exchange labelled `exchange` ("" is the default exchange)."""
        name = self.exchanges[exchange] if exchange else ""
        props = BasicProperties(headers=dict(headers) if headers is not None else None)
        self.client.send(self.ch, BasicPublish(exchange=name, routing_key=key, mandatory=mandatory),
                         props, body.encode())

    def reached(self) -> dict[str, list[str]]:
        """The bodies each queue holds, by label, in arrival order (the queues are drained)."""
        got: dict[str, list[str]] = {}
        for label, name in self.queues.items():
            bodies = got.setdefault(label, [])
            while True:
                reply = self.client.rpc(self.ch, BasicGet(queue=name, no_ack=True), BasicGetOk, BasicGetEmpty,
                                        timeout=self.target.timeout(5))
                if isinstance(reply.method, BasicGetEmpty):
                    break
                bodies.append(reply.body.decode())
        return got

    def returned(self) -> list[BasicReturn]:
        """The basic.returns that arrived so far (after `reached` or another round trip)."""
        return [c.method for c in self.client.pending(self.ch) if isinstance(c.method, BasicReturn)]


def topology(connect: Any, names: Names, target: Target) -> Topology:
    client = connect()
    return Topology(client, client.channel(), names, target)


def assert_reached(got: Mapping[str, Iterable[str]], want: Mapping[str, Iterable[str]], rule: str, what: str,
                   context: str = "") -> None:
    """Each queue received exactly the messages `want` names (as sets, and each once). The first
    line of a failure names what was wrong per queue (a console shows only that line); the next
    ones what each queue wanted and received, then `context`."""
    short, detail = [], []
    for label, expected in want.items():
        have = list(got.get(label, []))
        if sorted(have) == sorted(set(expected)):
            continue
        missing = sorted(set(expected) - set(have))
        extra = sorted(set(have) - set(expected))
        twice = sorted({b for b in have if have.count(b) > 1})
        parts = [f"missing {missing}" if missing else "", f"not wanted {extra}" if extra else "",
                 f"more than one copy of {twice}" if twice else ""]
        short.append(f"{label} {', '.join(p for p in parts if p)}")
        detail.append(f"{label}: wanted {sorted(set(expected))}, received {have}")
    if short:
        lines = [f"{rule}: {what} routed wrongly: " + "; ".join(short), *detail, *([context] if context else [])]
        raise AssertionError("\n  ".join(lines))
