"""Routes the publisher picks (ROUTE-13, ROUTE-14): CC and BCC headers, and direct reply-to.

Where a message went is read with basic.get on the channel that published it (a get is served
after the deliveries the channel made before it), the headers each copy arrived with included.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from codec import (
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDeclareOk,
    ReplyCode,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.routing import assert_reached, topology
from conformance.suite.steps.topology import Judge

Connect = Callable[..., RawClient]
REPLY_TO = "amq.rabbitmq.reply-to"


def _headers_seen(t: Any, label: str) -> list[tuple[str, dict[str, Any]]]:
    """(body, headers) of each message the queue labelled `label` holds (drained)."""
    got: list[tuple[str, dict[str, Any]]] = []
    while True:
        reply: Any = t.client.rpc(t.ch, BasicGet(queue=t.queues[label], no_ack=True), BasicGetOk, BasicGetEmpty,
                             timeout=t.target.timeout(5))
        if isinstance(reply.method, BasicGetEmpty):
            return got
        got.append((reply.body.decode(), dict(reply.properties.headers or {})))


@pytest.mark.rules("ROUTE-13")
def test_cc_and_bcc_add_routing_keys(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    t.exchange("x", "direct")
    for label in ("to", "cc", "bcc", "both"):
        t.queue(label)
        t.bind(label, "x", f"k-{label}")
    t.bind("both", "x", "k-cc")  # reached by the key and by CC: one copy
    t.publish("x", "k-to", "m1", headers={"CC": ["k-cc"], "BCC": ["k-bcc"], "other": 1})
    t.publish("x", "k-nowhere", "m2", headers={"CC": ["k-both", "k-both"]})
    t.publish("x", "k-to", "m3", headers={"cc": ["k-cc"], "CC": [7, "k-bcc"]})  # "cc" is no CC; 7 is ignored
    t.publish("", t.queues["to"], "m4", headers={"BCC": [t.queues["cc"]]})  # the default exchange too
    want = {"to": ["m1", "m3", "m4"], "cc": ["m1", "m4"], "bcc": ["m1", "m3"], "both": ["m1", "m2"]}
    seen = {label: _headers_seen(t, label) for label in t.queues}
    assert_reached({label: [body for body, _ in got] for label, got in seen.items()}, want, "ROUTE-13",
                   "publishes with CC and BCC headers (each queue bound with its own key, 'both' also with CC's)")
    kept = [(label, body, h) for label, got in seen.items() for body, h in got if "BCC" in h]
    assert not kept, f"ROUTE-13: the BCC header must be removed from the delivered message; it arrived in {kept}"
    m1 = {label: h for label, got in seen.items() for body, h in got if body == "m1"}
    assert all(h.get("CC") == ["k-cc"] and h.get("other") == 1 for h in m1.values()), (
        f"ROUTE-13: the CC header and the other headers must be delivered as published; m1 arrived with {m1}")


@pytest.mark.rules("ROUTE-13")
@pytest.mark.parametrize("name", ["CC", "BCC"])
def test_a_cc_header_that_is_not_an_array_is_refused(connect: Connect, names: Names, target: Target,
                                                     name: str) -> None:
    t = topology(connect, names, target)
    t.queue("q")
    Judge(t.client, target, "ROUTE-13").publish_refused(
        f"a publish whose {name} header is a longstr", "", t.queues["q"], ReplyCode.PRECONDITION_FAILED,
        f'PRECONDITION_FAILED - invalid message: {{unacceptable_type_in_header,"{name}",longstr}}',
        properties=BasicProperties(headers={name: "k"}))


@pytest.mark.rules("ROUTE-14")
def test_direct_reply_to(connect: Connect, names: Names, target: Target) -> None:
    requester = Judge(connect(), target, "ROUTE-14")
    responder = connect()
    q = names.queue("requests")
    rch = responder.channel()
    responder.rpc(rch, QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    ch = requester.channel()
    requester.ok("consuming from amq.rabbitmq.reply-to with no-ack", BasicConsume(queue=REPLY_TO, consumer_tag="replies",
                 no_ack=True), BasicConsumeOk, ch=ch)
    requester.client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)  # the request is in the queue before the get
    requester.client.send(ch, BasicPublish(exchange="", routing_key=q), BasicProperties(reply_to=REPLY_TO), b"request")
    requester.client.expect(ch, BasicAck, timeout=target.timeout(10))
    request: Any = responder.rpc(rch, BasicGet(queue=q, no_ack=True), BasicGetOk, timeout=target.timeout(5))
    token = request.properties.reply_to or ""
    assert re.fullmatch(re.escape(REPLY_TO) + r"\..+", token), (
        f"ROUTE-14: the request's reply-to must reach the responder as '{REPLY_TO}.<token>'; it arrived as {token!r}")
    responder.send(rch, BasicPublish(exchange="", routing_key=token), BasicProperties(), b"reply")
    reply: Any = requester.client.expect(ch, BasicDeliver, timeout=target.timeout(5))
    got = (reply.body, reply.method.consumer_tag, reply.method.routing_key, reply.method.redelivered)
    assert got == (b"reply", "replies", token, False), (
        f"ROUTE-14: the reply must reach the reply consumer (body, consumer tag, routing key, redelivered) = "
        f"(b'reply', 'replies', {token!r}, False); it arrived as {got}")
    tampered = token[:-5] + ("AAAAA" if not token.endswith("AAAAA") else "BBBBB")
    Judge(responder, target, "ROUTE-14").refused(
        "a passive declare of a reply-to name whose last five characters were changed", QueueDeclare(
            queue=tampered, passive=True), QueueDeclareOk, ReplyCode.NOT_FOUND,
        f"NOT_FOUND - no queue '{tampered}' in vhost '{target.vhost}'")
    requester.refused("a second reply consumer on the channel", BasicConsume(queue=REPLY_TO, consumer_tag="again",
                      no_ack=True), BasicConsumeOk, ReplyCode.PRECONDITION_FAILED,
                      "PRECONDITION_FAILED - reply consumer already set", ch=ch)


@pytest.mark.rules("ROUTE-14")
def test_direct_reply_to_needs_a_no_ack_reply_consumer(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "ROUTE-14")
    judge.refused("consuming from amq.rabbitmq.reply-to with acknowledgements",
                  BasicConsume(queue=REPLY_TO, consumer_tag="acking"), BasicConsumeOk, ReplyCode.PRECONDITION_FAILED,
                  "PRECONDITION_FAILED - reply consumer cannot acknowledge")
    q = names.queue("requests")
    judge.ok("declaring a queue", QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    judge.publish_refused("a publish with reply-to amq.rabbitmq.reply-to without a reply consumer", "", q,
                          ReplyCode.PRECONDITION_FAILED, "PRECONDITION_FAILED - fast reply consumer does not exist",
                          properties=BasicProperties(reply_to=REPLY_TO))
