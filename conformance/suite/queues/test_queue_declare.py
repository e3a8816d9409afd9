"""Declaring queues (QUEUE-01..04): inequivalent flags and arguments, passive declares and their
counts, server-named queues and the reserved amq. prefix.

Arguments are sent with the field types the project's codec picks (the smallest integer type
that holds the value, longstr for text) unless a test names one (`Typed`); RabbitMQ's texts name
the type it received, so the expected texts are built from the same values
(`steps.topology.inequivalent`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from codec import (
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    QueueDeclare,
    QueueDeclareOk,
    ReplyCode,
    Typed,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.topology import Judge, flag, inequivalent

Connect = Callable[..., RawClient]
SERVER_NAMED = re.compile(r"amq\.gen-[A-Za-z0-9_-]{22}")


def _what(name: str, target: Target) -> str:
    return f"queue '{name}' in vhost '{target.vhost}'"


@pytest.mark.rules("QUEUE-01")
@pytest.mark.parametrize("differs", ["durable", "auto_delete"])
def test_a_queue_redeclared_with_another_flag_is_refused(connect: Connect, names: Names, target: Target,
                                                         differs: str) -> None:
    judge = Judge(connect(), target, "QUEUE-01")
    q = names.queue("q")
    declared: dict[str, Any] = {"durable": False, "auto_delete": True} if differs == "durable" else {"durable": True}
    judge.ok(f"declaring a queue ({declared})", QueueDeclare(queue=q, **declared), QueueDeclareOk)
    judge.publish_confirmed(q, "kept")
    received = not declared.get(differs, False)
    text = (f"PRECONDITION_FAILED - inequivalent arg '{differs}' for {_what(q, target)}: received {flag(received)} "
            f"but current is {flag(not received)}")
    judge.refused(f"redeclaring it with {differs} {received}", QueueDeclare(queue=q, **{**declared, differs: received}),
                  QueueDeclareOk, ReplyCode.PRECONDITION_FAILED, text)
    reply = judge.ok("redeclaring it as it is", QueueDeclare(queue=q, **declared), QueueDeclareOk)
    got = (reply.method.queue, reply.method.message_count, reply.method.consumer_count)
    assert got == (q, 1, 0), (f"QUEUE-01: an equal redeclaration must answer the queue's name and counts "
                              f"({q!r}, 1 message, 0 consumers); the broker answered {got}")


@pytest.mark.rules("QUEUE-01")
def test_an_exclusive_queues_durable_flag_is_ignored(connect: Connect, names: Names, target: Target) -> None:
    if not target.profile.rabbitmq:
        not_applicable("QUEUE-01's variant on the 0-9-1 profile: the specification does not make an exclusive "
                       "queue transient")
    judge = Judge(connect(), target, "QUEUE-01")
    q = names.queue("q")
    judge.ok("declaring an exclusive queue with durable set", QueueDeclare(queue=q, exclusive=True, durable=True),
             QueueDeclareOk)
    judge.ok("redeclaring it without durable (an exclusive queue is never durable)",
             QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    judge.ok("redeclaring it with durable again", QueueDeclare(queue=q, exclusive=True, durable=True), QueueDeclareOk)


ARGUMENT_CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {  # case -> (arg, declared, redeclared)
    "x-message-ttl added": ("x-message-ttl", {}, {"x-message-ttl": 1000}),
    "x-message-ttl dropped": ("x-message-ttl", {"x-message-ttl": 1000}, {}),
    "x-message-ttl changed": ("x-message-ttl", {"x-message-ttl": 1000}, {"x-message-ttl": 2000}),
    "x-expires added": ("x-expires", {}, {"x-expires": 100000}),
    "x-max-length added": ("x-max-length", {}, {"x-max-length": 5}),
    "x-max-length-bytes added": ("x-max-length-bytes", {}, {"x-max-length-bytes": 5000}),
    "x-dead-letter-exchange added": ("x-dead-letter-exchange", {}, {"x-dead-letter-exchange": "dlx"}),
    "x-dead-letter-routing-key changed": ("x-dead-letter-routing-key",
                                          {"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "a"},
                                          {"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "b"}),
    # compared before the dead-letter arguments are checked: RabbitMQ answers "inequivalent arg", not
    # routing_key_but_no_dlx_defined (live on 3.10.8, 4.0.5 and 4.3.6; Java's
    # DeadLetterExchange.redeclareQueueWithRoutingKeyButNoDeadLetterExchange)
    "x-dead-letter-routing-key added without a DLX": ("x-dead-letter-routing-key", {},
                                                      {"x-dead-letter-routing-key": "x"}),
    "x-max-priority added": ("x-max-priority", {}, {"x-max-priority": 5}),
    "x-overflow added": ("x-overflow", {}, {"x-overflow": "reject-publish"}),
    "x-message-ttl as text": ("x-message-ttl", {"x-message-ttl": 1000}, {"x-message-ttl": "1000"}),
    "x-queue-mode added": ("x-queue-mode", {}, {"x-queue-mode": "lazy"}),
    "x-single-active-consumer added": ("x-single-active-consumer", {}, {"x-single-active-consumer": True}),
}


@pytest.mark.rules("QUEUE-02")
@pytest.mark.parametrize("case", list(ARGUMENT_CASES))
def test_a_queue_argument_that_differs_is_refused(connect: Connect, names: Names, target: Target, case: str) -> None:
    judge = Judge(connect(), target, "QUEUE-02")
    arg, declared, redeclared = ARGUMENT_CASES[case]
    q = names.queue("q")
    judge.ok(f"declaring a queue with {declared or 'no arguments'}", QueueDeclare(queue=q, exclusive=True,
             arguments=declared), QueueDeclareOk)
    judge.refused(f"redeclaring it with {redeclared or 'no arguments'}",
                  QueueDeclare(queue=q, exclusive=True, arguments=redeclared), QueueDeclareOk,
                  ReplyCode.PRECONDITION_FAILED, inequivalent(arg, _what(q, target), redeclared.get(arg), declared.get(arg)))


@pytest.mark.rules("QUEUE-02")
def test_equal_arguments_of_any_integer_width_and_other_arguments_pass(connect: Connect, names: Names,
                                                                      target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-02")
    q = names.queue("q")
    judge.ok("declaring a queue with x-message-ttl 1000 (a short) and x-foo", QueueDeclare(
        queue=q, exclusive=True, arguments={"x-message-ttl": 1000, "x-foo": "a"}), QueueDeclareOk)
    for what, arguments in (("x-message-ttl 1000 as a signed 32-bit integer", {"x-message-ttl": Typed(b"I", 1000),
                                                                              "x-foo": "a"}),
                            ("x-message-ttl 1000 as a long", {"x-message-ttl": Typed(b"l", 1000)}),
                            ("x-foo changed", {"x-message-ttl": 1000, "x-foo": "b"}),
                            ("x-bar added", {"x-message-ttl": 1000, "x-bar": 1})):
        judge.ok(f"redeclaring it with {what}", QueueDeclare(queue=q, exclusive=True, arguments=arguments),
                 QueueDeclareOk)


@pytest.mark.rules("QUEUE-02")
def test_the_same_dead_letter_arguments_pass(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-02")
    q = names.queue("q")
    dead_letter = {"x-dead-letter-exchange": names.exchange("dlx"), "x-dead-letter-routing-key": "dlrk"}
    for what, arguments in (("x-dead-letter-exchange", {"x-dead-letter-exchange": dead_letter["x-dead-letter-exchange"]}),
                            ("x-dead-letter-exchange and x-dead-letter-routing-key", dead_letter)):
        queue = f"{q}-{len(arguments)}"
        for step in ("declaring a queue with", "redeclaring it with the same"):
            judge.ok(f"{step} {what}", QueueDeclare(queue=queue, exclusive=True, arguments=arguments), QueueDeclareOk)


@pytest.mark.rules("QUEUE-02")
def test_the_queue_type_is_compared(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-02")
    q = names.queue("q")
    judge.ok("declaring a queue without x-queue-type", QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    judge.ok("redeclaring it with x-queue-type classic", QueueDeclare(queue=q, exclusive=True,
             arguments={"x-queue-type": "classic"}), QueueDeclareOk)
    expectation = target.profile.expect("QUEUE-02")
    current = None if "keeps no x-queue-type" in expectation else "classic"
    judge.refused("redeclaring it with x-queue-type quorum", QueueDeclare(queue=q, exclusive=True,
                  arguments={"x-queue-type": "quorum"}), QueueDeclareOk, ReplyCode.PRECONDITION_FAILED,
                  inequivalent("x-queue-type", _what(q, target), "quorum", current))


@pytest.mark.rules("QUEUE-03")
def test_a_passive_declare_answers_the_counts(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-03")
    client = judge.client
    q = names.queue("q")
    ch = client.channel()
    client.rpc(ch, QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    for n in range(4):
        client.send(ch, BasicPublish(exchange="", routing_key=q), BasicProperties(), f"m{n}".encode())
    client.rpc(ch, BasicGet(queue=q), BasicGetOk, timeout=target.timeout(5))  # one delivered, unacked
    counts = judge.queue_counts(q)
    assert counts == (3, 0), (f"QUEUE-03: a passive declare of a queue holding 3 ready messages and 1 delivered "
                              f"unacknowledged, without consumers, must answer (3, 0); the broker answered {counts}")
    consumer = client.channel()
    client.rpc(consumer, BasicQos(prefetch_count=1), BasicQosOk)
    client.rpc(consumer, BasicConsume(queue=q, consumer_tag="c"), BasicConsumeOk)
    client.expect(consumer, BasicDeliver, timeout=target.timeout(5))
    reply = judge.ok("a passive declare naming other flags (durable, auto-delete)",
                     QueueDeclare(queue=q, passive=True, durable=True, auto_delete=True), QueueDeclareOk)
    got = (reply.method.message_count, reply.method.consumer_count)
    assert got == (2, 1), (f"QUEUE-03: with 2 ready messages and one consumer, a passive declare must answer "
                           f"(2, 1); the broker answered {got}")
    client.close_channel(consumer)  # the queue goes at teardown without a consumer (QUEUE-10 judges that case)
    missing = names.queue("missing")
    judge.refused("a passive declare of a missing queue", QueueDeclare(queue=missing, passive=True), QueueDeclareOk,
                  ReplyCode.NOT_FOUND, f"NOT_FOUND - no queue '{missing}' in vhost '{target.vhost}'")
    if judge.pinned:
        declared = judge.channel()  # the channel's last queue is not what "" names in a declare
        client.rpc(declared, QueueDeclare(queue=q, passive=True), QueueDeclareOk)
        judge.refused("a passive declare of the empty name on a channel that declared a queue",
                      QueueDeclare(queue="", passive=True), QueueDeclareOk, ReplyCode.NOT_FOUND,
                      f"NOT_FOUND - no queue '' in vhost '{target.vhost}'", ch=declared)


@pytest.mark.rules("QUEUE-04")
def test_server_named_queues_and_the_reserved_prefix(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "QUEUE-04")
    reply = judge.ok("declaring a queue with an empty name", QueueDeclare(queue="", exclusive=True), QueueDeclareOk)
    name = reply.method.queue
    if judge.pinned:
        assert SERVER_NAMED.fullmatch(name), (f"QUEUE-04: a server-named queue's name must be 'amq.gen-' and 22 "
                                              f"URL-safe base64 characters; the broker named it {name!r}")
    else:
        assert name, "QUEUE-04: a declare with an empty name must answer the name the broker chose; it answered ''"
    assert judge.queue_exists(name), f"QUEUE-04: the server-named queue {name!r} does not exist"
    other = judge.ok("declaring another queue with an empty name", QueueDeclare(queue="", exclusive=True),
                     QueueDeclareOk).method.queue
    assert other != name, f"QUEUE-04: two server-named queues got the same name {name!r}"
    reserved = f"amq.{names.queue('reserved')}"
    judge.refused("declaring a queue named amq.*", QueueDeclare(queue=reserved, exclusive=True), QueueDeclareOk,
                  ReplyCode.ACCESS_REFUSED, f"ACCESS_REFUSED - queue name '{reserved}' contains reserved prefix 'amq.*'")
    judge.refused("a passive declare of a missing amq.* queue", QueueDeclare(queue=reserved, passive=True),
                  QueueDeclareOk, ReplyCode.NOT_FOUND, f"NOT_FOUND - no queue '{reserved}' in vhost '{target.vhost}'")
