"""Small shared steps of the ack, requeue and qos suite files: declare, publish, consume, look.

Rules:
- Every wait is bounded: replies use the client's (scaled) timeout; a check that something
  does NOT arrive is a short bounded `poll`, never a sleep standing in for synchronisation.
- Publishing returns only once the broker took every message (publisher confirms, or a
  transaction where confirms are not advertised), so a following consume or get sees them.
- Queue names always come from the `names` fixture (unique, deleted at teardown); quorum and
  stream queues are declared durable with their `x-queue-type`.
- A delivery (basic.deliver or basic.get-ok) is turned into a `Delivery` record so tests read
  tags, flags, bodies and headers without casting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from codec import (
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicReject,
    Command,
    ConfirmSelect,
    ConfirmSelectOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    TxCommit,
    TxCommitOk,
    TxSelect,
    TxSelectOk,
)
from codec import Method as AmqpMethod
from conformance.catalogue.mentions import RuleViolation
from conformance.catalogue.profiles import Profile
from conformance.drivers.raw import NoReply, RawClient
from conformance.plugin.session import Names
from conformance.plugin.verdicts import not_applicable, not_claimed

CLASSIC = "classic"
QUORUM = "quorum"
STREAM = "stream"
Connect = Callable[..., RawClient]
RETURN_S = 2.0  # s (scaled): a gone channel's deliveries back in the queue (RQ-03, assert_ready_elsewhere)


@dataclass(frozen=True)
class Delivery:
    """One basic.deliver or basic.get-ok with its content."""

    tag: int
    redelivered: bool
    body: bytes
    headers: Mapping[str, Any]
    consumer_tag: str | None  # None for basic.get-ok

    @classmethod
    def of(cls, command: Command) -> Delivery:
        m = command.method
        headers = dict((command.properties.headers or {}) if command.properties else {})
        if isinstance(m, BasicDeliver):
            return cls(m.delivery_tag, m.redelivered, command.body, headers, m.consumer_tag)
        if isinstance(m, BasicGetOk):
            return cls(m.delivery_tag, m.redelivered, command.body, headers, None)
        raise AssertionError(f"expected basic.deliver or basic.get-ok, got {m.NAME} {m.fields()}")


def bodies(deliveries: Iterable[Delivery]) -> list[bytes]:
    return [d.body for d in deliveries]


def assert_redelivered(got: Delivery | Iterable[Delivery] | None, want: bytes | Iterable[bytes], *,
                       in_order: bool = True) -> None:
    """Messages the broker took back came back (`want`, in that order unless `in_order` is false),
    each flagged redelivered=true: they were delivered before (0-9-1 basic.deliver/get-ok `redelivered`)."""
    wanted = [want] if isinstance(want, bytes) else list(want)
    if got is None:
        raise AssertionError(f"the message the broker took back ({wanted[0]!r}) is not in the queue: basic.get-empty")
    seen = [got] if isinstance(got, Delivery) else list(got)
    found = [d.body for d in seen] if in_order else sorted(d.body for d in seen)
    if found != (wanted if in_order else sorted(wanted)):
        raise AssertionError(f"the messages the broker took back came back as {found}, expected {wanted}")
    flat = [f"{d.body!r} (tag {d.tag})" for d in seen if not d.redelivered]
    if flat:
        raise AssertionError(f"{', '.join(flat)} came back with redelivered=false; a message that was delivered "
                             f"before must come back with redelivered=true")


def tag_of(delivery: Delivery | None) -> int:
    assert delivery is not None, "basic.get-empty where a message was expected"
    return delivery.tag


def settle(kind: str, tag: int, *, multiple: bool = False, requeue: bool = False) -> AmqpMethod:
    """basic.ack, basic.reject or basic.nack (`kind`) of `tag`."""
    if kind == "ack":
        return BasicAck(delivery_tag=tag, multiple=multiple)
    if kind == "reject":
        return BasicReject(delivery_tag=tag, requeue=requeue)
    return BasicNack(delivery_tag=tag, multiple=multiple, requeue=requeue)


def require(profile: Profile, capability: str, what: str) -> None:
    """Skip as not-claimed unless the broker claims the RabbitMQ extension `capability`
    (always true on a RabbitMQ profile; advertised or declared elsewhere)."""
    if not profile.supports(capability):
        product = profile.server_properties.get("product") or "the broker"
        not_claimed(f"{what} is a RabbitMQ extension ({capability}) that {product} does not claim")


def require_nack(profile: Profile) -> None:
    require(profile, "basic.nack", "basic.nack")


def require_kind(profile: Profile, kind: str) -> None:
    """Skip unless the broker has queues of `kind`: not-claimed on a broker that does not claim
    RabbitMQ's queue types, not-applicable on a RabbitMQ version older than the type."""
    if kind != CLASSIC:
        require(profile, "quorum_queues", f"{kind} queues")
    if (missing := profile.lacks(kind)) is not None:
        not_applicable(missing)


def declare(client: RawClient, ch: int, queue: str, kind: str = CLASSIC,
            arguments: Mapping[str, Any] | None = None) -> str:
    """Declare `queue` (classic, quorum or stream) and return its name."""
    args = dict(arguments or {})
    if kind != CLASSIC:
        args["x-queue-type"] = kind
    client.rpc(ch, QueueDeclare(queue=queue, durable=kind != CLASSIC, arguments=args), QueueDeclareOk)
    DECLARED[queue] = (kind, kind != CLASSIC)
    return queue


DECLARED: dict[str, tuple[str, bool]] = {}  # queue -> (kind, durable), as `declare` made it: for `confirm_wait`
DISK_SHARE, CONSENSUS_SHARE = 1.0, 2.0  # of the client's reply timeout (5 s, scaled): 5 s and 10 s


def confirm_wait(client: RawClient, queue: str, persistent: bool) -> float:
    """How long a publish's confirm may take, by what holds it up (the confirms rules' evidence):
    - nothing but the enqueue (a transient message, or any message to a transient classic queue:
      `rabbit_amqqueue_process:send_or_record_confirm/2` confirms it while enqueueing): `prompt`;
    - a disk (a persistent message to a durable classic queue: confirmed after the fsync): 5 s;
    - a consensus (a quorum or stream queue: confirmed once a majority wrote it), or a queue this
      process did not declare with `declare` (an exchange's bindings, a raw declare): 10 s."""
    kind, durable = DECLARED.get(queue, (None, True))
    if kind is None or kind in (QUORUM, STREAM):
        return client.timeout * CONSENSUS_SHARE
    if durable and persistent:
        return client.timeout * DISK_SHARE
    return prompt(client)


def filled(connect: Connect, names: Names, count: int, kind: str = CLASSIC,
           arguments: Mapping[str, Any] | None = None) -> tuple[RawClient, int, str]:
    """A new client, an open channel, and a queue of `kind` holding m1..m<count>."""
    client = connect()
    ch = client.channel()
    queue = declare(client, ch, names.queue(kind), kind, arguments)
    Publisher(client).publish(queue, messages(count))
    return client, ch, queue


def ready(client: RawClient, ch: int, queue: str, timeout: float | None = None) -> int:
    """Ready messages of `queue` (passive declare); also a round trip proving that the
    broker handled every earlier method on `ch`."""
    ok = client.rpc(ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk, timeout=timeout).method
    assert isinstance(ok, QueueDeclareOk)
    return ok.message_count


def assert_ready_elsewhere(connect: Connect, want: Mapping[str, int], within: float) -> None:
    """Each queue's ready count, seen from a fresh connection after a channel went, is its
    count in `want`, waiting for it up to `within` seconds.

    RQ-03: a gone channel's unacked deliveries come back when the queue notices the channel
    is gone, not before the close: RabbitMQ sends channel.close-ok, then the channel process
    terminates, and the classic queue requeues its basic.get deliveries on the monitor's
    'DOWN' (rabbit_amqqueue_process handle_info/handle_ch_down, v3.10.8 and v4.3.5; only
    queues the channel consumes from are told synchronously, rabbit_channel notify_queues).
    A reader on another channel may come first (seen on 4.3.6 under load, 4 of 600 times)."""
    client = connect()
    ch = client.channel()
    seen = {queue: poll_ready(client, ch, queue, count, within) for queue, count in want.items()}
    assert seen == dict(want), f"ready messages after the channel went: {seen}, want {dict(want)}"


def poll_ready(client: RawClient, ch: int, queue: str, want: int, within: float) -> int:
    """Ready count of `queue`, asked again until it is `want` or `within` seconds have passed."""
    deadline = time.monotonic() + within
    while (seen := ready(client, ch, queue)) != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return seen


def await_ready(client: RawClient, ch: int, queue: str, count: int, within: float) -> None:
    """Wait (bounded by `within` seconds) until `queue` has `count` ready messages: for returns
    a broker makes asynchronously, e.g. a quorum queue noticing a closed channel (RQ-03)."""
    seen = poll_ready(client, ch, queue, count, within)
    assert seen == count, f"{queue}: {seen} ready messages after {within:.1f} s, want {count}"


def with_dead_letter_queue(client: RawClient, ch: int, names: Names) -> tuple[dict[str, Any], str]:
    """A fanout dead-letter exchange bound to a fresh classic queue: (queue arguments, dlq)."""
    dlx = names.exchange("dlx")
    client.rpc(ch, ExchangeDeclare(exchange=dlx, exchange_type="fanout"), ExchangeDeclareOk)
    dlq = declare(client, ch, names.queue("dlq"))
    client.rpc(ch, QueueBind(queue=dlq, exchange=dlx), QueueBindOk)
    return {"x-dead-letter-exchange": dlx}, dlq


@dataclass
class Publisher:
    """A publishing channel; `publish` returns once the broker took every message: confirm
    mode where the broker advertises publisher_confirms, else a transaction (tx.commit-ok).
    Each new confirm is awaited as long as what holds it up allows (`confirm_wait`: 2 s for what
    no disk or consensus holds up, 5 s for a persistent message to a durable queue, 10 s for a
    quorum or stream queue, or a queue of unknown kind)."""

    client: RawClient
    ch: int = 0
    confirms: bool = True
    next_seqno: int = 1
    confirmed: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.ch = self.client.channel()
        capabilities = self.client.server_properties.get("capabilities")
        self.confirms = isinstance(capabilities, dict) and capabilities.get("publisher_confirms") is True
        if self.confirms:
            self.client.rpc(self.ch, ConfirmSelect(), ConfirmSelectOk)
        else:
            self.client.rpc(self.ch, TxSelect(), TxSelectOk)

    def publish(self, queue: str, payloads: Iterable[bytes], properties: BasicProperties | None = None,
                exchange: str = "") -> None:
        last = 0
        for body in payloads:
            self.client.send(self.ch, BasicPublish(exchange=exchange, routing_key=queue), properties, body)
            last, self.next_seqno = self.next_seqno, self.next_seqno + 1
        if not self.confirms:
            self.client.rpc(self.ch, TxCommit(), TxCommitOk)
            return
        persistent = properties is not None and properties.delivery_mode == 2
        wait = confirm_wait(self.client, queue if not exchange else "", persistent)
        deadline = time.monotonic() + wait  # moves on with every new confirm
        while not all(s in self.confirmed for s in range(1, last + 1)):
            try:  # past the deadline: e.g. a broker repeating acks that confirm nothing new
                command = self.client.expect(self.ch, BasicAck, BasicNack, timeout=max(deadline - time.monotonic(), 0))
            except NoReply:
                missing = sorted(set(range(1, last + 1)) - self.confirmed)
                raise NoReply(wait, f"confirms of seqnos up to {last} on channel {self.ch}; PC-05: the broker acks "
                              f"or nacks every publish on a confirm channel, and {missing} were neither") from None
            m = command.method
            assert isinstance(m, BasicAck | BasicNack)
            if isinstance(m, BasicNack):  # a broker deviation met while the test prepares: a verdict, not broken
                raise RuleViolation("PC-08", f"the broker nacked publish {m.delivery_tag} to {queue!r}, which "
                                    "no queue refused: basic.nack only when a queue cannot take the message "
                                    "(PC-08); expected basic.ack")
            low = 1 if m.multiple else m.delivery_tag
            before = len(self.confirmed)
            self.confirmed.update(range(low, m.delivery_tag + 1))
            if len(self.confirmed) > before:  # acks that confirm nothing new do not extend the wait
                deadline = time.monotonic() + wait


def messages(count: int, prefix: str = "m") -> list[bytes]:
    """m1, m2, ... (1-based, so bodies read like positions)."""
    return [f"{prefix}{i}".encode() for i in range(1, count + 1)]


def consume(client: RawClient, ch: int, queue: str, *, no_ack: bool = False, tag: str = "",
            arguments: Mapping[str, Any] | None = None) -> str:
    """basic.consume; returns the consumer tag (deliveries may already be queued)."""
    ok = client.rpc(ch, BasicConsume(queue=queue, consumer_tag=tag, no_ack=no_ack,
                                     arguments=dict(arguments or {})), BasicConsumeOk).method
    assert isinstance(ok, BasicConsumeOk)
    return ok.consumer_tag


def take(client: RawClient, ch: int, count: int = 1, timeout: float | None = None) -> list[Delivery]:
    """The next `count` basic.deliver on `ch` (each within the timeout)."""
    return [Delivery.of(client.expect(ch, BasicDeliver, timeout=timeout)) for _ in range(count)]


def take_one(client: RawClient, ch: int, timeout: float | None = None) -> Delivery:
    return take(client, ch, 1, timeout)[0]


PROMPT_SHARE = 0.4  # of the client's reply timeout (5 s, scaled): 2 s, the machines' settle


def prompt(client: RawClient) -> float:
    """How long to wait for a frame the broker owes at once: `PROMPT_SHARE` of the client's
    reply timeout (2 s unscaled), the settle the machines give a frame the rules require. For
    frames the broker sends while it handles the method that provokes them, with no timer, disk
    write or cluster round trip in between: a delivery due now (`take_now`), a channel.close the
    channel raises itself (an unknown delivery tag, RabbitMQ's `rabbit_channel`), the confirm of
    a message no disk holds (a transient message, or any message to a transient classic queue:
    `rabbit_amqqueue_process:send_or_record_confirm/2` confirms it while enqueueing, v3.10.8 and
    v4.3.5). A broker that withholds one is judged in 2 s instead of 5."""
    return client.timeout * PROMPT_SHARE


def take_now(client: RawClient, ch: int, count: int = 1) -> list[Delivery]:
    """The next `count` basic.deliver of messages the broker must deliver now (ready, or just
    returned, to a consumer with room; no timer involved): each within `PROMPT_SHARE` of the
    client's reply timeout, as the machines wait for a delivery the rules require (`prompt`)."""
    return take(client, ch, count, prompt(client))


def take_one_now(client: RawClient, ch: int) -> Delivery:
    return take_now(client, ch)[0]


def assert_quiet(client: RawClient, ch: int, duration: float, what: str = "delivery") -> None:
    """Nothing more is delivered on `ch` within the bounded `duration`."""
    extra = client.poll(ch, BasicDeliver, duration=duration)
    assert extra is None, f"unexpected {what}: {Delivery.of(extra)}"


def drain(client: RawClient, ch: int, quiet: float, limit: int = 1000) -> list[Delivery]:
    """Every basic.deliver on `ch` until none arrives for `quiet` seconds (at most `limit`)."""
    out: list[Delivery] = []
    while len(out) < limit and (command := client.poll(ch, BasicDeliver, duration=quiet)) is not None:
        out.append(Delivery.of(command))
    return out


def per_consumer(deliveries: Iterable[Delivery]) -> dict[str | None, int]:
    """How many of `deliveries` each consumer tag got."""
    counts: dict[str | None, int] = {}
    for d in deliveries:
        counts[d.consumer_tag] = counts.get(d.consumer_tag, 0) + 1
    return counts


def get(client: RawClient, ch: int, queue: str, no_ack: bool = False) -> Delivery | None:
    """basic.get: the delivery, or None for basic.get-empty."""
    reply = client.rpc(ch, BasicGet(queue=queue, no_ack=no_ack), BasicGetOk, BasicGetEmpty)
    return None if isinstance(reply.method, BasicGetEmpty) else Delivery.of(reply)


def get_all(client: RawClient, ch: int, queue: str, limit: int = 100) -> list[Delivery]:
    """basic.get until get-empty (at most `limit` messages), manual-ack mode."""
    out: list[Delivery] = []
    while len(out) < limit and (d := get(client, ch, queue)) is not None:
        out.append(d)
    return out


def global_qos_is_channel_wide(profile: Profile) -> bool:
    """QOS-03: global=true is a channel-wide limit on RabbitMQ before 4.3; 4.3 treats it as
    per-consumer by default; a plain AMQP 0-9-1 broker applies it to the connection."""
    return profile.rabbitmq and not profile.at_least("4.3")
