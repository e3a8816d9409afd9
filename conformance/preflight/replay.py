"""Live replay: each distinct shape of a recording as a minimal program against a real target.

Responsibility: for every aggregated request shape (queue.declare, exchange.declare, basic.consume,
basic.qos global=true) and every RQ-06 finding, run the smallest program that exercises it on the
target broker with the project's raw client (`conformance.drivers.raw.RawClient`), and compare the
target's reply with the catalogue's prediction (for a finding: `live` says confirmed or not) or,
for a shape no rule predicted a change for, with the recorded reply: a difference is a new finding
with `source: live`, which is how the catalogue learns.

Rules:
- Every name is under a scratch prefix (`amqpc-preflight-<random>-`); everything declared is
  deleted at the end, on a fresh connection, whatever happened.
- Every wait is bounded (`rpc_timeout` per request, `budget` for the whole replay). A target that
  does not answer gets a `breaks` finding saying so (source: live) and the replay stops; it never hangs.
- The replay declares what the recording declared with the same flags and arguments, never a
  passive declare (it owns nothing on the target), and publishes only to its own queues.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from codec import (
    BasicConsume,
    BasicConsumeOk,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    BasicReject,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
)
from conformance.drivers.raw import ChannelClosed, Closed, ConnectionLost, DriverError, NoReply, RawClient
from conformance.preflight.behaviour import CHANNEL, CHECKS, CONNECTION, OK, Behaviour
from conformance.preflight.judging import Finding, example, kind_of, recorded
from conformance.preflight.shapes import parse_arguments

REPLAYED = ("queue.declare", "exchange.declare", "basic.consume", "basic.qos")
Row = Mapping[str, Any]


class TargetSilent(Exception):
    """The target did not answer a request within the bound."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"the target did not answer {what} within {seconds:.0f} s")


@dataclass
class Replay:
    url: str
    rpc_timeout: float = 5.0
    budget: float = 120.0
    prefix: str = field(default_factory=lambda: f"amqpc-preflight-{uuid.uuid4().hex[:6]}-")
    queues: list[str] = field(default_factory=list)
    exchanges: list[str] = field(default_factory=list)
    shapes_replayed: int = 0

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.budget
        self._n = 0

    def name(self, what: str) -> str:
        self._n += 1
        return f"{self.prefix}{what}{self._n}"

    # -- running one program ---------------------------------------------------------------
    def observe(self, program: Callable[[RawClient, int], str], what: str) -> Behaviour:
        """Run `program` on a fresh connection and channel; accepted (its text) or the close it got."""
        if time.monotonic() > self._deadline:
            raise TargetSilent(f"{what} (replay budget {self.budget:.0f} s spent)", self.budget)
        client = RawClient(self.url, timeout=self.rpc_timeout)
        try:
            client.connect()
            text = program(client, client.channel())
            return Behaviour(OK, None, text)
        except ChannelClosed as closed:
            return Behaviour(CHANNEL, closed.code, closed.text)
        except Closed as closed:
            return Behaviour(CONNECTION, closed.code, closed.text)
        except (NoReply, TimeoutError) as exc:
            raise TargetSilent(what, self.rpc_timeout) from exc
        except (ConnectionLost, OSError) as exc:  # reset, refused: what the application would see too
            return Behaviour(CONNECTION, None, f"connection lost: {exc}")
        finally:
            client.close()

    def cleanup(self) -> None:
        """Delete everything the replay declared (a fresh connection; errors ignored, bounded)."""
        if not self.queues and not self.exchanges:
            return
        with contextlib.suppress(DriverError, OSError), RawClient(self.url, timeout=self.rpc_timeout) as client:
            for queue in self.queues:
                client.send(client.channel(), QueueDelete(queue=queue, nowait=True))
            for exchange in self.exchanges:
                client.send(client.channel(), ExchangeDelete(exchange=exchange, nowait=True))
            client.rpc(client.channel(), QueueDeclare(queue=self.name("done"), exclusive=True), QueueDeclareOk)

    # -- the programs, one per method --------------------------------------------------------
    def program(self, shape: Row) -> Callable[[RawClient, int], str] | None:
        method = shape.get("method")
        flags = set(filter(None, (shape.get("flags") or "").split(","))) - {"passive"}
        arguments = parse_arguments(shape.get("raw_arguments"))
        if method == "queue.declare":
            return lambda c, ch: self._declare_queue(c, ch, flags, arguments)
        if method == "exchange.declare":
            return lambda c, ch: self._declare_exchange(c, ch, shape.get("exchange_type") or "direct", flags, arguments)
        if method == "basic.consume" and shape.get("queue_type") in ("classic", "quorum"):
            return lambda c, ch: self._consume(c, ch, str(shape["queue_type"]), arguments)
        if method == "basic.qos" and shape.get("global_qos"):
            return self._global_qos
        return None

    def _queue(self, client: RawClient, ch: int, kind: str, arguments: dict[str, Any] | None = None,
               durable: bool = True) -> str:
        queue = self.name("q")
        self.queues.append(queue)
        args = {**({"x-queue-type": kind} if kind != "classic" else {}), **(arguments or {})}
        client.rpc(ch, QueueDeclare(queue=queue, durable=durable, arguments=args), QueueDeclareOk)
        return queue

    def _declare_queue(self, client: RawClient, ch: int, flags: set[str], arguments: dict[str, Any]) -> str:
        queue = self.name("q")
        self.queues.append(queue)
        client.rpc(ch, QueueDeclare(queue=queue, durable="durable" in flags, exclusive="exclusive" in flags,
                                    auto_delete="auto_delete" in flags, arguments=arguments), QueueDeclareOk)
        return ""

    def _declare_exchange(self, client: RawClient, ch: int, kind: str, flags: set[str],
                          arguments: dict[str, Any]) -> str:
        exchange = self.name("x")
        self.exchanges.append(exchange)
        client.rpc(ch, ExchangeDeclare(exchange=exchange, exchange_type=kind, durable="durable" in flags,
                                       auto_delete="auto_delete" in flags, internal="internal" in flags,
                                       arguments=arguments), ExchangeDeclareOk)
        return ""

    def _consume(self, client: RawClient, ch: int, kind: str, arguments: dict[str, Any]) -> str:
        queue = self._queue(client, ch, kind)
        client.rpc(ch, BasicConsume(queue=queue, arguments=arguments), BasicConsumeOk)
        return ""

    def _global_qos(self, client: RawClient, ch: int) -> str:
        """QOS-03 live: prefetch 1 global=true, two consumers, four messages: how many arrive?"""
        queue = self._queue(client, ch, "classic", durable=False)
        for n in range(4):
            client.send(ch, BasicPublish(exchange="", routing_key=queue), body=b"m%d" % n)
        client.rpc(ch, BasicQos(prefetch_count=1, global_=True), BasicQosOk)
        for tag in ("a", "b"):
            client.rpc(ch, BasicConsume(queue=queue, consumer_tag=tag), BasicConsumeOk)
        deliveries = 0
        deadline = time.monotonic() + min(1.0, self.rpc_timeout)
        while (remaining := deadline - time.monotonic()) > 0:
            if client.poll(ch, duration=remaining) is not None:
                deliveries += 1
        return {1: "one limit shared by the channel's consumers",
                2: "global=true ignored: a per-consumer limit (global_qos denied by default)"}.get(
                    deliveries, f"{deliveries} deliveries under prefetch 1 global=true with two consumers")

    def bounce(self, limit: int | None, returns: int) -> Behaviour:
        """RQ-06 live: one quorum message returned `returns` times with basic.reject requeue=true."""
        def program(client: RawClient, ch: int) -> str:
            queue = self._queue(client, ch, "quorum", {"x-delivery-limit": limit} if limit is not None else None)
            client.send(ch, BasicPublish(exchange="", routing_key=queue), body=b"bounced")
            for _ in range(returns + 1):
                got = self._get(client, ch, queue)
                if got is None:
                    return "dead-lettered or dropped once over the delivery limit"
                client.send(ch, BasicReject(delivery_tag=got, requeue=True))
            return "redelivered every time"
        return self.observe(program, "a quorum message's returns")

    def _get(self, client: RawClient, ch: int, queue: str) -> int | None:
        deadline = time.monotonic() + self.rpc_timeout
        while time.monotonic() < deadline:
            reply = client.rpc(ch, BasicGet(queue=queue), BasicGetOk, BasicGetEmpty).method
            if isinstance(reply, BasicGetOk):
                return int(reply.delivery_tag)
            time.sleep(0.02)  # a requeued quorum message takes a moment to be ready again
        return None


def replay(url: str, requests: Iterable[Row], findings: list[Finding], *, rpc_timeout: float = 5.0,
           budget: float = 120.0, max_shapes: int = 200) -> tuple[list[Finding], int]:
    """Replay the shapes on `url`; mark each finding live-confirmed or not; return the new live
    findings and how many shapes were replayed."""
    run = Replay(url, rpc_timeout, budget)
    new: list[Finding] = []
    try:
        for shape in [s for s in requests if s.get("method") in REPLAYED][:max_shapes]:
            program = run.program(shape)
            if program is None:
                continue
            observed = run.observe(program, str(shape.get("method")))
            run.shapes_replayed += 1
            _compare(shape, observed, findings, new)
        for finding in findings:
            if finding.rule == "RQ-06":
                observed = run.bounce(finding.example.get("delivery_limit"), int(finding.example.get("returns", 0)))
                finding.live = _verdict(finding.target_behaviour, observed)
    except TargetSilent as silent:
        new.append(Finding("-", "breaks", 1, 1, str(silent), "answered", "no answer", {}, source="live",
                           live="the target hung: the replay stopped"))
    finally:
        run.cleanup()
    return new, run.shapes_replayed


def _compare(shape: Row, observed: Behaviour, findings: list[Finding], new: list[Finding]) -> None:
    predicted = next((f for f in findings if _covers(f, shape)), None)
    if predicted is not None:
        predicted.live = _verdict(predicted.target_behaviour, observed)
        return
    source = recorded(shape, Behaviour())
    kind = kind_of(source, observed) if shape.get("reply") in (OK, CHANNEL, CONNECTION) else None
    if kind is not None:
        new.append(Finding("-", kind, int(shape.get("count") or 1), int(shape.get("connections") or 1),
                           f"{shape.get('method')} {shape.get('arguments') or ''}".strip(), source.describe(),
                           observed.describe(), example(shape), source="live", live="seen live only"))


def _covers(finding: Finding, shape: Row) -> bool:
    """The catalogue finding `shape` contributes to (the check that applies to it made it)."""
    return finding.source == "catalogue" and any(
        check.rule == finding.rule and check.what == finding.what and check.applies(shape) for check in CHECKS)


def _verdict(predicted: str, observed: Behaviour) -> str:
    said = observed.describe()
    if observed.outcome == OK:
        same = observed.text in predicted if observed.text else predicted.startswith("accepted")
    else:
        same = predicted.startswith(f"{observed.outcome} {observed.code}")
    return f"{'confirmed' if same else 'NOT confirmed'}: {said}"
