"""Which TTL values a broker takes (TTL-01, TTL-02): the per-message `expiration` property, read as
Erlang's string:to_integer reads it, and the x-message-ttl queue argument.

Rules:
- Each refused value is its own test, with the exact close RabbitMQ sends (the same on 3.10.8,
  4.0.5 and 4.3.6, live); each accepted edge (0, the ten-year maximum, a leading "+") is shown
  accepted by a publish that reaches its queue, or a declaration that succeeds.
- A refused publish is seen at the channel's next request (`Judge.publish_refused`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from codec import BasicDeliver, BasicProperties, BasicPublish, QueueDeclare, QueueDeclareOk, ReplyCode, Typed
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.queues import CLASSIC, QUORUM, STREAM, consume, prompt, require_kind
from conformance.suite.steps.topology import Judge

Connect = Callable[..., RawClient]
MAX_TTL = 315_360_000_000  # ms, ten years: rabbit_misc:check_expiry

REFUSED_EXPIRATIONS: dict[str, str] = {  # expiration -> why RabbitMQ refuses it
    "abc": "no_integer",
    "": "no_integer",
    " 5": "no_integer",
    "-": "no_integer",
    "10x": '{leftover_string,"x"}',
    "5 ": '{leftover_string," "}',
    "1.5": '{leftover_string,".5"}',
    "-1": "{value_negative,-1}",
    str(MAX_TTL + 1): f"{{value_too_large,{MAX_TTL + 1}}}",
}
ACCEPTED_EXPIRATIONS = ["0", "+5", "007", str(MAX_TTL)]

REFUSED_TTLS: dict[str, tuple[Any, str]] = {  # x-message-ttl -> what RabbitMQ says of it
    "negative": (-1, "{value_negative,-1}"),
    "over ten years": (MAX_TTL + 1, f"{{value_too_large,{MAX_TTL + 1}}}"),
    "text": ("1000", '"expected integer, got longstr"'),
    "double": (1.5, '"expected integer, got double"'),
    "bool": (True, '"expected integer, got bool"'),
}


@pytest.mark.rules("TTL-01")
@pytest.mark.parametrize("expiration", list(REFUSED_EXPIRATIONS), ids=[repr(e) for e in REFUSED_EXPIRATIONS])
def test_an_invalid_expiration_closes_the_channel(connect: Connect, names: Names, target: Target,
                                                  expiration: str) -> None:
    judge = Judge(connect(), target, "TTL-01")
    judge.publish_refused(f"publishing with expiration {expiration!r}", "", names.queue("nowhere"),
                          ReplyCode.PRECONDITION_FAILED,
                          f"PRECONDITION_FAILED - invalid expiration '{expiration}': {REFUSED_EXPIRATIONS[expiration]}",
                          BasicProperties(expiration=expiration))


@pytest.mark.rules("TTL-01")
@pytest.mark.parametrize("expiration", ACCEPTED_EXPIRATIONS)
def test_a_valid_expiration_is_taken(connect: Connect, names: Names, target: Target, expiration: str) -> None:
    """The publish reaches its queue and is delivered with its expiration as published (a consumer
    is ready for it, so even "0" is delivered, as TTL-05 says)."""
    client = connect()
    judge = Judge(client, target, "TTL-01")
    queue = names.queue("q")
    ch = judge.channel()
    judge.ok("declaring the queue", QueueDeclare(queue=queue, exclusive=True), QueueDeclareOk, ch=ch)
    consume(client, ch, queue, no_ack=True)
    client.send(ch, BasicPublish(exchange="", routing_key=queue), BasicProperties(expiration=expiration), b"m")
    delivered = client.expect(ch, BasicDeliver, timeout=prompt(client))
    have = delivered.properties.expiration if delivered.properties else None
    if target.profile.expect("TTL-01").startswith("variant:"):  # up to 3.12: as published
        assert have == expiration, (f"TTL-01: a message published with expiration {expiration!r} is delivered "
                                    f"with it as published ({target.profile.name}); delivered with {have!r}")
    else:
        assert have == str(int(expiration)), (
            f"TTL-01: a message published with expiration {expiration!r} is delivered with the number it was "
            f"read as, {str(int(expiration))!r} (4.x: mc_amqpl renders the ttl annotation); delivered with {have!r}")


@pytest.mark.rules("TTL-02")
@pytest.mark.parametrize("kind", [CLASSIC, QUORUM])
@pytest.mark.parametrize("value", list(REFUSED_TTLS))
def test_an_invalid_x_message_ttl_is_refused(connect: Connect, names: Names, target: Target, kind: str,
                                             value: str) -> None:
    require_kind(target.profile, kind)
    judge = Judge(connect(), target, "TTL-02")
    queue = names.queue(kind)
    ttl, why = REFUSED_TTLS[value]
    arguments = {"x-message-ttl": ttl, **({} if kind == CLASSIC else {"x-queue-type": kind})}
    judge.refused(f"declaring a {kind} queue with x-message-ttl {ttl!r}",
                  QueueDeclare(queue=queue, durable=kind != CLASSIC, arguments=arguments), QueueDeclareOk,
                  ReplyCode.PRECONDITION_FAILED,
                  f"PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue '{queue}' in vhost '{target.vhost}': {why}")


@pytest.mark.rules("TTL-02")
@pytest.mark.parametrize("kind", [CLASSIC, QUORUM])
@pytest.mark.parametrize("ttl", [0, MAX_TTL])
def test_x_message_ttl_from_zero_to_ten_years_is_taken(connect: Connect, names: Names, target: Target, kind: str,
                                                       ttl: int) -> None:
    require_kind(target.profile, kind)
    judge = Judge(connect(), target, "TTL-02")
    arguments = {"x-message-ttl": ttl, **({} if kind == CLASSIC else {"x-queue-type": kind})}
    judge.ok(f"declaring a {kind} queue with x-message-ttl {ttl}",
             QueueDeclare(queue=names.queue(kind), durable=kind != CLASSIC, arguments=arguments), QueueDeclareOk)


@pytest.mark.rules("TTL-02")
@pytest.mark.parametrize("ttl", [0, 1000, -1])
def test_a_stream_refuses_x_message_ttl(connect: Connect, names: Names, target: Target, ttl: int) -> None:
    require_kind(target.profile, STREAM)
    judge = Judge(connect(), target, "TTL-02")
    queue = names.queue("stream")
    judge.refused(f"declaring a stream with x-message-ttl {ttl}",
                  QueueDeclare(queue=queue, durable=True, arguments={"x-queue-type": STREAM, "x-message-ttl": ttl}),
                  QueueDeclareOk, ReplyCode.PRECONDITION_FAILED,
                  f"PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue '{queue}' in vhost '{target.vhost}' "
                  "of queue type rabbit_stream_queue")


INTEGER_TYPES = {"byte": b"b", "unsigned byte": b"B", "short": b"s", "unsigned short": b"u",
                 "signed 32-bit": b"I", "unsigned 32-bit": b"i", "long": b"l"}  # RabbitMQ's INTEGER_ARG_TYPES


@pytest.mark.rules("TTL-02")
@pytest.mark.parametrize("kind", [CLASSIC, QUORUM])
@pytest.mark.parametrize("field", list(INTEGER_TYPES))
def test_x_message_ttl_of_any_integer_field_type_is_taken(connect: Connect, names: Names, target: Target, kind: str,
                                                          field: str) -> None:
    """200 ms encoded as each integer field type RabbitMQ's check_int_arg takes (?INTEGER_ARG_TYPES)."""
    require_kind(target.profile, kind)
    judge = Judge(connect(), target, "TTL-02")
    arguments = {"x-message-ttl": Typed(INTEGER_TYPES[field], 100), **({} if kind == CLASSIC else {"x-queue-type": kind})}
    judge.ok(f"declaring a {kind} queue with x-message-ttl 100 as a {field}",
             QueueDeclare(queue=names.queue(kind), durable=kind != CLASSIC, arguments=arguments), QueueDeclareOk)
