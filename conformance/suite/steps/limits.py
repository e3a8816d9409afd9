"""Shared steps of the limits area (LEN-*): publishing one message at a time under confirms, what a
queue holds and what reached its dead-letter queue, and what RabbitMQ's rules predict of them.

Rules:
- Publishes go one at a time, each awaiting its own basic.ack or basic.nack (a quorum queue looks
  at its limits after the enqueue: what it refuses depends on what it took before, LEN-04); the
  confirm is awaited as long as `confirm_wait` allows for the queue's kind.
- What a queue holds is read with basic.get (no-ack) until basic.get-empty, bounded by a count.
- A dead-letter queue is filled by the source queue after its own reply: its count is polled,
  bounded, until it reaches what is expected.
- `predict` is RabbitMQ's rule as the catalogue states it (LEN-02, LEN-04, LEN-05), a pure
  function of the queue's kind, its limits and the sizes of the messages published.
- Hypothesis draws the limits and the messages: derandomized, no example database, no
  shrinking (every example is a fresh queue on a live broker), a few examples: the same broker
  gets the same examples, and a failure names the drawn example.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, settings

from codec import BasicAck, BasicGet, BasicGetEmpty, BasicGetOk, BasicNack, BasicProperties, BasicPublish
from codec.frames import encode_header_payload
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.confirms import confirm_channel
from conformance.suite.steps.queues import QUORUM, confirm_wait, declare, poll_ready, prompt, require_kind

EXAMPLES = 8  # per drawn test: each is a queue declared and filled on the broker
LIMIT_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                          suppress_health_check=list(HealthCheck), phases=(Phase.explicit, Phase.generate))
DROP_HEAD, REJECT, REJECT_DLX = "drop-head", "reject-publish", "reject-publish-dlx"
HEADER_FIXED = 12  # a content header's class id, weight and body size, before the property flags
SOFT_LIMIT = 0.8  # rabbit_fifo ?LOW_LIMIT: a blocked quorum queue takes publishes again at 80 %


@dataclass(frozen=True)
class Limits:
    """A queue's length-limit arguments."""

    max_length: int | None = None
    max_bytes: int | None = None
    overflow: str | None = None  # None: the default, drop-head

    def arguments(self) -> dict[str, Any]:
        pairs = (("x-max-length", self.max_length), ("x-max-length-bytes", self.max_bytes), ("x-overflow", self.overflow))
        return {k: v for k, v in pairs if v is not None}

    def __str__(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.arguments().items()) or "no limit"


@dataclass
class Outcome:
    """What a run of publishes led to: each publish's confirm, what stays ready (indices, oldest
    first) and what was dead-lettered with reason maxlen (indices, in order)."""

    confirms: list[str] = field(default_factory=list)  # "ack" or "nack", by publish
    kept: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)


def counted_size(target: Target, kind: str, body: bytes, properties: BasicProperties) -> int:
    """The bytes a message counts for toward x-max-length-bytes (LEN-02): its body's, plus its
    encoded properties on a quorum queue from 4.3."""
    if kind == QUORUM and not target.profile.expect("LEN-02").startswith("variant:"):
        return len(body) + len(encode_header_payload(0, properties)) - HEADER_FIXED
    return len(body)


def predict(kind: str, limits: Limits, sizes: Sequence[int]) -> Outcome:
    """RabbitMQ's rules for messages of `sizes` published one at a time to an empty queue nobody
    consumes from (LEN-02, LEN-04, LEN-05)."""
    overflow = limits.overflow or DROP_HEAD
    if kind == QUORUM and overflow == REJECT_DLX:
        overflow = DROP_HEAD  # LEN-05: not supported, the default applies
    out = Outcome()
    blocked = False

    def over(extra: int | None = None) -> bool:
        count = len(out.kept) + (extra is not None)
        used = sum(sizes[i] for i in out.kept) + (extra or 0)
        return ((limits.max_length is not None and count > limits.max_length)
                or (limits.max_bytes is not None and used > limits.max_bytes))

    def below_soft() -> bool:
        used = sum(sizes[i] for i in out.kept)
        return all(limit is None or value <= int(limit * SOFT_LIMIT)
                   for limit, value in ((limits.max_length, len(out.kept)), (limits.max_bytes, used)))

    for i, size in enumerate(sizes):
        if overflow == DROP_HEAD:
            out.confirms.append("ack")
            out.kept.append(i)
            while out.kept and over():
                out.dead.append(out.kept.pop(0))
        elif kind == QUORUM:  # reject-publish: the limit looked at after the enqueue
            blocked = blocked and not below_soft()
            out.confirms.append("nack" if blocked else "ack")
            if not blocked:
                out.kept.append(i)
                blocked = over()
        elif over(size):
            out.confirms.append("nack")
            if overflow == REJECT_DLX:
                out.dead.append(i)
        else:
            out.confirms.append("ack")
            out.kept.append(i)
    return out


def publish_one_by_one(client: RawClient, queue: str, bodies: Sequence[bytes],
                       properties: BasicProperties | None = None) -> list[str]:
    """Publish each body to `queue` on a confirm channel, awaiting its confirm before the next:
    "ack" or "nack" for each."""
    ch = confirm_channel(client)
    wait = confirm_wait(client, queue, persistent=False)
    out = []
    for seqno, body in enumerate(bodies, 1):
        client.send(ch, BasicPublish(exchange="", routing_key=queue), properties or BasicProperties(), body)
        method = client.expect(ch, BasicAck, BasicNack, timeout=wait).method
        assert isinstance(method, BasicAck | BasicNack)
        assert method.delivery_tag == seqno, f"PC-05: publish {seqno} awaited its own confirm and got {method}"
        out.append("ack" if isinstance(method, BasicAck) else "nack")
    client.close_channel(ch)
    return out


def held(client: RawClient, ch: int, queue: str, limit: int = 100) -> list[bytes]:
    """The bodies `queue` holds, oldest first, taken with basic.get (no-ack) until it is empty."""
    out: list[bytes] = []
    while len(out) < limit:
        reply = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk, BasicGetEmpty)
        if isinstance(reply.method, BasicGetEmpty):
            break
        out.append(reply.body)
    return out


def dead_lettered(client: RawClient, ch: int, dlq: str, want: int) -> list[tuple[bytes, Any, Any]]:
    """(body, x-death reason, x-first-death-reason) of what reached `dlq`, oldest first, once `want`
    messages are there or the wait (prompt, scaled) ran out; with `want` 0 the wait is the same,
    so a message dead-lettered late is seen."""
    poll_ready(client, ch, dlq, max(want, 1), prompt(client) if want else prompt(client) / 4)
    out = []
    for _ in range(100):
        reply = client.rpc(ch, BasicGet(queue=dlq, no_ack=True), BasicGetOk, BasicGetEmpty)
        if isinstance(reply.method, BasicGetEmpty):
            break
        headers = dict((reply.properties.headers or {}) if reply.properties else {})
        deaths = headers.get("x-death")
        reason = deaths[0].get("reason") if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict) else None
        out.append((reply.body, reason, headers.get("x-first-death-reason")))
    return out



def opened(connect: Callable[..., RawClient], target: Target, kind: str) -> tuple[RawClient, int]:
    """A client with an open channel, for a test of `kind` queues (skipped where there are none)."""
    require_kind(target.profile, kind)
    client = connect()
    return client, client.channel()


def bodies(count: int) -> list[bytes]:
    """m1, m2, ... (1-based)."""
    return [f"m{i}".encode() for i in range(1, count + 1)]


def sized(sizes: Sequence[int]) -> list[bytes]:
    """Bodies of `sizes` bytes, each of its own letter (a, bb, ccc, ...)."""
    return [bytes([ord("a") + i % 26]) * size for i, size in enumerate(sizes)]


@dataclass
class Trial:
    """One queue filled one publish at a time: what was sent, what the broker did, what the rules
    predict (`predict`). `dead` and `want_dead` are (body, x-death reason, x-first-death-reason)."""

    kind: str
    limits: Limits
    sent: list[bytes]
    counted: list[int]
    confirms: list[str]
    held: list[bytes]
    dead: list[tuple[bytes, Any, Any]] | None
    want: Outcome

    @property
    def want_held(self) -> list[bytes]:
        return [self.sent[i] for i in self.want.kept]

    @property
    def want_dead(self) -> list[tuple[bytes, Any, Any]]:
        return [(self.sent[i], "maxlen", "maxlen") for i in self.want.dead]

    def kept_as_predicted(self) -> bool:
        return (self.confirms, self.held) == (self.want.confirms, self.want_held)

    def one_more_taken(self) -> bool:
        """A quorum queue took exactly one publish more than the rules say: the one right after
        the publish that took it over its limit, and kept it. Such a queue refuses through a status
        it sends its publishers after the enqueue that went over (rabbit_fifo `evaluate_limit0`,
        rabbit_fifo_client `enqueue/4`); this names the failure where that status came after the
        next publish (docs/findings-rabbitmq-4.3.6.md, LEN-04). With a dead-letter queue, what it got
        must be what the rules say (the race refuses nothing, so it dead-letters nothing either).
        The check itself is unchanged."""
        if self.kind != QUORUM or (self.dead is not None and self.dead != self.want_dead) \
                or "nack" not in self.want.confirms[1:]:
            return False
        first = self.want.confirms.index("nack", 1)
        confirms = [*self.want.confirms[:first], "ack", *self.want.confirms[first + 1:]]
        held = [self.sent[i] for i in sorted([*self.want.kept, first])]
        return (self.confirms, self.held) == (confirms, held)

    def told(self) -> str:
        """What the rules predict and what the broker did, for a failure's message."""
        dead = f", dead-letters (body, reason, first reason) {self.want_dead}" if self.dead is not None else ""
        got = f", its dead-letter queue got {self.dead}" if self.dead is not None else ""
        return (f"a {self.kind} queue with {self.limits}, sent {self.sent} one at a time (counting {self.counted} "
                f"bytes), confirms {self.want.confirms}, holds {self.want_held}{dead}; the broker confirmed "
                f"{self.confirms}, the queue held {self.held}{got}" + (
                    "; it took one publish more, the one right after the publish that went over the limit, and "
                    "kept it: its refusal came after that publish" if self.one_more_taken() else ""))


def trial(client: RawClient, ch: int, names: Names, target: Target, kind: str, limits: Limits, sent: list[bytes],
          properties: BasicProperties | None = None, dead_letter: bool = False) -> Trial:
    """Declare a `kind` queue with `limits` (and a dead-letter queue through "" when `dead_letter`),
    publish `sent` one at a time, and read what it holds and what was dead-lettered."""
    props = properties or BasicProperties()
    arguments = limits.arguments()
    dlq = declare(client, ch, names.queue("dlq")) if dead_letter else None
    if dlq is not None:
        arguments.update({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    queue = declare(client, ch, names.queue(kind), kind, arguments)
    counted = [counted_size(target, kind, body, props) for body in sent]
    confirms = publish_one_by_one(client, queue, sent, props)
    want = predict(kind, limits, counted)
    kept = held(client, ch, queue)
    dead = dead_lettered(client, ch, dlq, len(want.dead)) if dlq is not None else None
    return Trial(kind, limits, sent, counted, confirms, kept, dead, want)
