"""Shared steps of the exchanges and queues areas: an operation that must succeed or be refused
exactly, whether an exchange or queue exists, and RabbitMQ's way of writing an argument's value.

Rules:
- Every step names its rule and says, in the failure's first line, what was asked, what the rule
  required and what the broker did (a console shows only that line); the frames are in the log.
- A refusal is compared (its text as ERR-01 limits it) by scope (channel or connection), reply code, text and class/method id
  on a RabbitMQ profile (a variant there changes one detail, which its test builds in); on the
  plain 0-9-1 profile, whose variants leave code and text free, only that it was refused.
- A message another channel will look for is published with `publish_confirmed` (it returns
  once the broker took it): RabbitMQ's channels are independent processes, so another channel's
  request may overtake a publish, and a queue serves a passive declare's count before the
  deliveries it has not handled yet.
- Existence is asked with a passive declare on a channel of its own (a 404 closes only that
  channel); a passive declare changes nothing (EXCH-04, QUEUE-03). What another connection's act
  removes may be observed a moment later (EXCH-09, QUEUE-05): `gone` asks again until the
  (scaled) wait ends, each ask a round trip.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from codec import (
    BasicProperties,
    BasicPublish,
    BasicReturn,
    ExchangeDeclare,
    ExchangeDeclareOk,
    Method,
    QueueDeclare,
    QueueDeclareOk,
    ReplyCode,
)
from codec.fields import rabbitmq_value_text
from conformance.drivers.raw import ChannelClosed, Closed, ConnectionClosed, NoReply, RawClient
from conformance.plugin.session import Target
from conformance.suite.steps.queues import Publisher
from conformance.suite.steps.replies import assert_limited
from conformance.suite.steps.wire import PING, sync

LOCKED = ("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{name}' in vhost '{vhost}'. It "
          "could be originally declared on another connection or the exclusive property value does not "
          "match that of the original declaration.")
def inequivalent(arg: str, what: str, received: Any, current: Any) -> str:
    """The 406 text of an argument that differs on redeclaration (EXCH-03, QUEUE-02)."""
    return (f"PRECONDITION_FAILED - inequivalent arg '{arg}' for {what}: "
            f"received {rabbitmq_value_text(received, current)} but current is {rabbitmq_value_text(current, received)}")


def flag(value: bool) -> str:
    return "'true'" if value else "'false'"


@dataclass
class Judge:
    """One rule's checks of single operations on one connection."""

    client: RawClient
    target: Target
    rule: str

    def __repr__(self) -> str:  # what pytest shows of a failed check's condition: the rule, not the client
        return f"Judge({self.rule})"

    @property
    def pinned(self) -> bool:
        """Codes and texts are RabbitMQ's on a RabbitMQ profile (a variant there changes one
        detail, which the test handles); the plain 0-9-1 profile's variants leave them free."""
        return self.target.profile.rabbitmq

    def channel(self) -> int:
        return self.client.channel()

    def ok(self, what: str, method: Method, *reply: type[Method], ch: int | None = None) -> Any:
        """The reply `method` must get (a `Command`, its method typed loosely for the caller's
        fields): the rule requires `what` to succeed."""
        ch = self.channel() if ch is None else ch
        try:
            return self.client.rpc(ch, method, *reply, timeout=self.target.timeout(5))
        except Closed as closed:
            raise AssertionError(f"{self.rule}: {what} must succeed ({' or '.join(r.NAME for r in reply)}); "
                                 f"the broker refused it: {closed}") from None
        except NoReply as exc:
            raise AssertionError(f"{self.rule}: {what} must succeed ({' or '.join(r.NAME for r in reply)}); "
                                 f"the broker answered nothing: {exc}") from None

    def refused(self, what: str, method: Method, reply: type[Method] | tuple[type[Method], ...], code: int,
                text: str, *, connection: bool = False, ch: int | None = None,
                ids: type[Method] | None = None) -> Closed:
        """`method` must be refused with this close (exactly, where the profile pins the rule);
        `ids`: the method the close names when it is not `method` (a publish sent before it)."""
        ch = self.channel() if ch is None else ch
        scope = "connection.close" if connection else "channel.close"
        named = ids or type(method)
        want = (scope, code, text, named.CLASS_ID, named.METHOD_ID)
        replies = reply if isinstance(reply, tuple) else (reply,)
        try:
            answer = self.client.rpc(ch, method, *replies, timeout=self.target.timeout(5))
            sync(self.client, ch)  # a refusal that comes after the reply (a nowait) still counts
        except (ChannelClosed, ConnectionClosed) as closed:
            have = ("connection.close" if isinstance(closed, ConnectionClosed) else "channel.close",
                    closed.code, closed.text, closed.class_id, closed.method_id)
            if self.pinned and not _same_close(self.target, have, want):
                raise AssertionError(f"{self.rule}: {what} must be refused with {scope} {code} ({named.CLASS_ID}/"
                                     f"{named.METHOD_ID}) \"{text}\"; the broker sent {have[0]} {closed.code} "
                                     f"({closed.class_id}/{closed.method_id}) \"{closed.text}\"") from None
            return closed
        except NoReply as exc:
            raise AssertionError(f"{self.rule}: {what} must be refused with {scope} {code}; the broker "
                                 f"answered nothing: {exc}") from None
        raise AssertionError(f"{self.rule}: {what} must be refused with {scope} {code} \"{text}\"; the broker "
                             f"answered {answer.method.NAME}, as if it had done it")

    def publish_refused(self, what: str, exchange: str, key: str, code: int, text: str,
                        properties: BasicProperties | None = None, ch: int | None = None) -> Closed:
        """A basic.publish must close its channel with this close, seen at the channel's next request
        (a passive declare of amq.direct): `refused` with the publish's class/method ids."""
        ch = self.channel() if ch is None else ch
        self.client.send(ch, BasicPublish(exchange=exchange, routing_key=key), properties or BasicProperties(),
                         b"refused")
        return self.refused(f"{what} (seen on the next request of its channel)",
                            PING,
                            ExchangeDeclareOk, code, text, ch=ch, ids=BasicPublish)

    def exchange_exists(self, name: str) -> bool:
        return _exists(self.client, ExchangeDeclare(exchange=name, passive=True), ExchangeDeclareOk, self.target)

    def queue_counts(self, name: str) -> tuple[int, int] | None:
        """(messages ready, consumers) of the queue, None when it does not exist."""
        ch = self.client.channel()
        try:
            reply: Any = self.client.rpc(ch, QueueDeclare(queue=name, passive=True), QueueDeclareOk,
                                         timeout=self.target.timeout(5))
        except ChannelClosed as closed:
            if closed.code != ReplyCode.NOT_FOUND:
                raise
            return None
        self.client.close_channel(ch)
        return reply.method.message_count, reply.method.consumer_count

    def queue_exists(self, name: str) -> bool:
        return self.queue_counts(name) is not None

    def gone(self, exists: Callable[[], bool], seconds: float = 5.0) -> bool:
        """Whether what `exists` asks about is gone within the (scaled) wait, asked again and again."""
        deadline = time.monotonic() + self.target.timeout(seconds)
        while True:
            if not exists():
                return True
            if time.monotonic() >= deadline:
                return False

    def publish(self, exchange: str, key: str, body: str, *, mandatory: bool = False, ch: int) -> None:
        self.client.send(ch, BasicPublish(exchange=exchange, routing_key=key, mandatory=mandatory),
                         BasicProperties(), body.encode())

    def publish_confirmed(self, queue: str, *bodies: str, exchange: str = "") -> None:
        """Publish and return once the broker took every message (publisher confirms, else a
        transaction): only then may another channel look at the queue. A passive declare on the
        publishing channel would not do: RabbitMQ's queue process serves `stat` before the
        deliveries it has not handled yet (rabbit_amqqueue_process prioritise_call: stat 7)."""
        Publisher(self.client).publish(queue, [b.encode() for b in bodies], exchange=exchange)

    def returned(self, ch: int) -> list[BasicReturn]:
        """The basic.returns on `ch` so far (after a round trip on it)."""
        sync(self.client, ch)
        return [c.method for c in self.client.pending(ch) if isinstance(c.method, BasicReturn)]


def _same_close(target: Target, have: tuple[Any, ...], want: tuple[Any, ...]) -> bool:
    """The same close, its text as ERR-01 limits the expected one (255 octets)."""
    if have[:2] + have[3:] != want[:2] + want[3:]:
        return False
    try:
        assert_limited(target, have[2], want[2])
    except AssertionError:
        return False
    return True


def _exists(client: RawClient, method: Method, reply: type[Method], target: Target) -> bool:
    ch = client.channel()
    try:
        client.rpc(ch, method, reply, timeout=target.timeout(5))
    except ChannelClosed as closed:
        if closed.code != ReplyCode.NOT_FOUND:
            raise
        return False
    client.close_channel(ch)
    return True
