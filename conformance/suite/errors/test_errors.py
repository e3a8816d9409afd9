"""Channel and connection errors over the wire (RULES.md §0 ERR-01..03); their texts (§7 ERR-04):
test_error_texts.py.

Closes are compared by scope, code and class/method id; ERR-01 is about the reply texts, so
those tests assert the texts too (not on the plain 0-9-1 profile, whose texts are free-form).
Texts not spelled out in the catalogue are RabbitMQ's, checked live on 3.10.8 and in the source
at HEAD (`rabbit_reader`, `rabbit_command_assembler`).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

import pytest

from codec import (
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicPublish,
    BasicQos,
    BasicRecover,
    ChannelClose,
    ChannelFlow,
    ChannelOpen,
    ConnectionClose,
    Method,
    QueueDeclare,
    QueueDeclareOk,
    ReplyCode,
    encode_body,
    encode_frame,
    encode_header,
    encode_method,
)
from codec.constants import METHOD_IDS
from codec.frames import encode_method_payload
from conformance.drivers.raw import (
    ChannelClosed,
    ConnectionClosed,
    ConnectionLost,
    RawClient,
)
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import non_strict, not_applicable
from conformance.suite.steps.replies import (
    Trigger,
    assert_limited,
    provoke,
    publish_then,
    raw,
    send,
    texts_checked,
)
from conformance.suite.steps.wire import (
    inbound,
    outcome,
    pump,
    reopen_channel,
    sync,
    wait_channel_closed,
)

Connect = Callable[..., RawClient]


# -- ERR-01 ----------------------------------------------------------------------------------
BUILT_TEXTS: dict[str, tuple[Trigger, tuple[str, int, int, int]]] = {
    "404-passive-declare": (send(QueueDeclare(queue="amqpc.err01.missing", passive=True)), ("channel", ReplyCode.NOT_FOUND, *METHOD_IDS["queue.declare"])),
    "406-unknown-tag": (send(BasicAck(delivery_tag=77)), ("channel", ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["basic.ack"])),
    "504-second-open": (send(ChannelOpen()), ("connection", ReplyCode.CHANNEL_ERROR, *METHOD_IDS["channel.open"])),
    "540-prefetch-size": (send(BasicQos(prefetch_size=1)), ("connection", ReplyCode.NOT_IMPLEMENTED, *METHOD_IDS["basic.qos"])),
    "505-method-for-header": (publish_then(lambda ch: encode_method(ch, BasicQos())), ("connection", ReplyCode.UNEXPECTED_FRAME, *METHOD_IDS["basic.publish"])),
}


@pytest.mark.rules("ERR-01")
@pytest.mark.clauses("ERR-01.a", "ERR-01.c")
@pytest.mark.parametrize("case", list(BUILT_TEXTS))
def test_reply_text_is_constant_dash_explanation(connect: Connect, target: Target, case: str) -> None:
    trigger, expected = BUILT_TEXTS[case]
    if expected[1] == ReplyCode.NOT_IMPLEMENTED and not target.profile.rabbitmq:
        not_applicable("which methods raise 540 is broker-specific")
    client = connect()
    closed = provoke(client, client.channel(), trigger, 0.2)
    assert outcome(closed) == expected  # the ids are those of the failing method
    if target.profile.expect("ERR-01").startswith("variant:reply text is free-form"):
        return
    assert closed.text.startswith(f"{ReplyCode(closed.code).name} - "), closed.text


@pytest.mark.rules("ERR-01")
@pytest.mark.clauses("ERR-01.d")
@pytest.mark.parametrize("frame", ["header-without-method", "unknown-frame-type"])
def test_errors_outside_method_handling_carry_zero_ids(connect: Connect, frame: str) -> None:
    client = connect()
    make = (lambda ch: encode_header(ch, 3)) if frame == "header-without-method" else \
        (lambda ch: encode_frame(9, ch, b"abc"))
    closed = provoke(client, client.channel(), raw(make), 0.2)
    assert (closed.scope, closed.class_id, closed.method_id) == ("connection", 0, 0)
    assert closed.code == (ReplyCode.UNEXPECTED_FRAME if frame == "header-without-method" else ReplyCode.FRAME_ERROR)


@pytest.mark.rules("ERR-01")
@pytest.mark.clauses("ERR-01.b")
def test_a_long_reply_text_is_limited_to_255(connect: Connect, names: Names, target: Target) -> None:
    queue = (names.prefix + ".long.").ljust(255, "n")  # shortstr maximum: the text cannot fit
    client = connect()
    closed = provoke(client, client.channel(), send(QueueDeclare(queue=queue, passive=True)), 0.2)
    assert outcome(closed) == ("channel", ReplyCode.NOT_FOUND, *METHOD_IDS["queue.declare"])
    if not target.profile.expect("ERR-01").startswith("variant:reply text is free-form"):
        assert_limited(target, closed.text, f"NOT_FOUND - no queue '{queue}' in vhost '{target.vhost}'")


# -- ERR-02 ----------------------------------------------------------------------------------
# Each case: a trigger made for the test's queue, and the expected (scope, code, class, method).
SOFT: dict[str, tuple[Callable[[str], Trigger], tuple[str, int, int, int]]] = {
    "404": (lambda q: send(QueueDeclare(queue=f"{q}.missing", passive=True)), ("channel", ReplyCode.NOT_FOUND, *METHOD_IDS["queue.declare"])),
    "406": (lambda q: send(BasicAck(delivery_tag=5)), ("channel", ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["basic.ack"])),
    "405": (lambda q: send(QueueDeclare(queue=q, passive=True)), ("channel", ReplyCode.RESOURCE_LOCKED, *METHOD_IDS["queue.declare"])),
    "403": (lambda q: send(BasicConsume(queue=q, exclusive=True)), ("channel", ReplyCode.ACCESS_REFUSED, *METHOD_IDS["basic.consume"])),
}


@pytest.mark.rules("ERR-02")
@pytest.mark.clauses("ERR-02.a")
@pytest.mark.parametrize("case", list(SOFT))
def test_soft_errors_close_only_their_channel(connect: Connect, names: Names, case: str) -> None:
    client, owner = connect(), connect()
    queue = names.queue()
    if case == "405":  # another connection's exclusive queue
        owner.rpc(owner.channel(), QueueDeclare(queue=queue, exclusive=True), QueueDeclareOk)
    else:  # a queue with a consumer (for the exclusive-consume conflict)
        setup = client.channel()
        client.rpc(setup, QueueDeclare(queue=queue), QueueDeclareOk)
        client.rpc(setup, BasicConsume(queue=queue, consumer_tag="holder"), BasicConsumeOk)
    other, ch = client.channel(), client.channel()
    make, expected = SOFT[case]
    closed = provoke(client, ch, make(queue), 0.2)
    assert outcome(closed) == expected
    sync(client, other)  # the connection and the other channels carry on
    assert client.connection_closed is None


def _twice(method: Method) -> Trigger:
    def trigger(client: RawClient, ch: int) -> None:
        client.send(ch, method)
        client.send(ch, method)
    return trigger


HARD: dict[str, tuple[Callable[[str], Trigger], tuple[str, int, int, int], bool]] = {
    # bool: a RabbitMQ-specific 540 (not-applicable on the plain 0-9-1 profile)
    "530-reused-tag": (lambda q: _twice(BasicConsume(queue=q, consumer_tag="t")), ("connection", ReplyCode.NOT_ALLOWED, *METHOD_IDS["basic.consume"]), False),
    "503-client-deliver": (lambda q: send(BasicDeliver(consumer_tag="t", delivery_tag=1), b"x"),
                           ("connection", ReplyCode.COMMAND_INVALID, *METHOD_IDS["basic.deliver"]), False),
    "504-second-open": (lambda q: send(ChannelOpen()), ("connection", ReplyCode.CHANNEL_ERROR, *METHOD_IDS["channel.open"]), False),
    "540-prefetch-size": (lambda q: send(BasicQos(prefetch_size=1)), ("connection", ReplyCode.NOT_IMPLEMENTED, *METHOD_IDS["basic.qos"]), True),
    "540-immediate": (lambda q: send(BasicPublish(routing_key=q, immediate=True), b"x"),
                      ("connection", ReplyCode.NOT_IMPLEMENTED, *METHOD_IDS["basic.publish"]), True),
    "540-recover-no-requeue": (lambda q: send(BasicRecover(requeue=False)), ("connection", ReplyCode.NOT_IMPLEMENTED, *METHOD_IDS["basic.recover"]), True),
    "540-flow-off": (lambda q: send(ChannelFlow(active=False)), ("connection", ReplyCode.NOT_IMPLEMENTED, *METHOD_IDS["channel.flow"]), True),
}


@pytest.mark.rules("ERR-02")
@pytest.mark.clauses("ERR-02.c", "ERR-02.d")
@pytest.mark.parametrize("case", list(HARD))
def test_hard_errors_on_a_channel_close_the_connection(connect: Connect, names: Names, target: Target,
                                                       case: str) -> None:
    make, expected, rabbitmq_only = HARD[case]
    if rabbitmq_only and not target.profile.rabbitmq:
        not_applicable("which methods raise 540 is broker-specific")
    client = connect()
    queue = names.queue()
    client.rpc(client.channel(), QueueDeclare(queue=queue), QueueDeclareOk)
    ch = client.channel(7)  # a channel other than 1: the close still comes on channel 0
    closed = provoke(client, ch, make(queue), 0.2)
    assert outcome(closed) == expected
    assert any(isinstance(c.method, ConnectionClose) for c in client.pending(0))


def _truncated(ch: int) -> bytes:
    return encode_frame(1, ch, struct.pack(">HH", *METHOD_IDS["basic.qos"]) + b"\x00")  # basic.qos needs 7 octets


def _bad_table_type(ch: int) -> bytes:
    payload = encode_method_payload(QueueDeclare(queue="amqpc.err02.table", arguments={"xa": "v"}))
    at = payload.index(b"\x02xa") + 3  # the value's type octet ('S')
    return encode_frame(1, ch, payload[:at] + b"Z" + payload[at + 1:])


MALFORMED: dict[str, tuple[Callable[[int], bytes], tuple[str, int, int, int] | None]] = {
    # None: RabbitMQ (3.10.8 live) resets the TCP connection without connection.close
    "truncated-method": (_truncated, ("connection", ReplyCode.FRAME_ERROR, *METHOD_IDS["basic.qos"])),
    "bad-frame-end": (lambda ch: encode_method(ch, BasicQos())[:-1] + b"\x00", ("connection", ReplyCode.FRAME_ERROR, 0, 0)),
    "unknown-frame-type": (lambda ch: encode_frame(9, ch, b"abc"), ("connection", ReplyCode.FRAME_ERROR, 0, 0)),
    "unknown-method-id": (lambda ch: encode_frame(1, ch, struct.pack(">HH", 60, 99)), None),
    "unknown-class-id": (lambda ch: encode_frame(1, ch, struct.pack(">HH", 99, 10)), None),
    "unknown-table-type": (_bad_table_type, None),
}


@pytest.mark.rules("ERR-02", "ERR-04")
@pytest.mark.clauses("ERR-02.c", "ERR-02.e", "ERR-02.i", "ERR-04.h", "ERR-04.j")
@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_input_closes_the_connection(connect: Connect, target: Target, case: str) -> None:
    make, expected = MALFORMED[case]
    client = connect()
    ch = client.channel()
    client.send_raw(make(ch), channel=ch)
    try:
        sync(client, ch)
    except ConnectionClosed as closed:
        if expected is not None:
            assert outcome(closed) == expected
            if case == "truncated-method" and texts_checked(target):
                assert closed.text.startswith("FRAME_ERROR - cannot decode "), (
                    f"ERR-04: a method frame whose arguments cannot be decoded gives 'FRAME_ERROR - cannot decode "
                    f"<<...>>'; the broker sent {closed.text!r}")
        else:  # any hard error on channel 0 will do
            assert closed.scope == "connection" and ReplyCode(closed.code).is_hard_error, closed
        return
    except ConnectionLost:
        if expected is None and target.profile.rabbitmq:
            return  # RabbitMQ's own behaviour for undecodable method/table ids (live 3.10.8)
        if expected is None:
            non_strict("the connection was dropped without connection.close")
        raise
    raise AssertionError(f"{case}: the broker answered the round trip as if nothing happened")


@pytest.mark.rules("ERR-02", "ERR-04")
@pytest.mark.clauses("ERR-02.c", "ERR-04.i")
def test_body_larger_than_declared(connect: Connect, target: Target) -> None:
    """Before 4.3.0 (live 3.10.8 and 4.0.5) RabbitMQ keeps waiting for the rest of the body, so
    the next method frame is a 505; from 4.3.0 (`rabbit_command_assembler`, live 4.3.6) and the
    catalogue: 501 at once."""
    client = connect()
    ch = client.channel()
    client.send_raw(encode_method(ch, BasicPublish(routing_key="x")) + encode_header(ch, 3)
                    + encode_body(ch, b"abcdef"), channel=ch)
    with pytest.raises(ConnectionClosed) as closed:
        sync(client, ch)
    if target.profile.rabbitmq and not target.profile.at_least("4.3"):
        assert outcome(closed.value) == ("connection", ReplyCode.UNEXPECTED_FRAME, *METHOD_IDS["basic.publish"])
        if texts_checked(target):
            assert closed.value.text == "UNEXPECTED_FRAME - expected content body, got non content body frame instead"
        return
    assert outcome(closed.value) == ("connection", ReplyCode.FRAME_ERROR, *METHOD_IDS["basic.publish"])
    if texts_checked(target):
        want = "FRAME_ERROR - content body frame exceeds remaining content size"
        assert closed.value.text == want, f"ERR-04: from 4.3.0 the text is {want!r}; the broker sent {closed.value.text!r}"


@pytest.mark.rules("ERR-02")
@pytest.mark.clauses("ERR-02.f")
def test_channel_method_on_channel_zero_closes_the_connection(connect: Connect, target: Target) -> None:
    """RabbitMQ answers 504 "unexpected method in connection state running" (live 3.10.8,
    HEAD `rabbit_reader:handle_method0/2`); any hard error keeps to ERR-02."""
    client = connect()
    client.send(0, BasicQos(prefetch_count=1))
    with pytest.raises(ConnectionClosed) as closed:
        sync(client, client.channel())
    assert closed.value.scope == "connection" and closed.value.code in (ReplyCode.COMMAND_INVALID, ReplyCode.CHANNEL_ERROR), closed.value
    if target.profile.rabbitmq:
        got = (closed.value.code, closed.value.text)
        want = (ReplyCode.CHANNEL_ERROR, "CHANNEL_ERROR - unexpected method in connection state running")
        assert got == want, f"ERR-02: RabbitMQ answers a basic.qos on channel 0 with connection.close {want}; got {got}"


# -- ERR-03 ----------------------------------------------------------------------------------
@pytest.mark.rules("ERR-03")
@pytest.mark.clauses("ERR-03.a", "ERR-03.b")
def test_methods_after_a_broker_channel_close_are_ignored(connect: Connect, names: Names,
                                                          target: Target) -> None:
    """One write: an error (406), a queue.declare, a channel.close. The broker has sent its
    channel.close before reading the rest: the declare is dropped, the close answered."""
    client = connect()
    ch = client.channel()
    queue = names.queue()
    client.send_raw(encode_method(ch, BasicAck(delivery_tag=99)) + encode_method(ch, QueueDeclare(queue=queue))
                    + encode_method(ch, BasicGet(queue=queue)) + encode_method(ch, ChannelClose(ReplyCode.REPLY_SUCCESS, "bye", 0, 0)),
                    channel=ch)
    closed = wait_channel_closed(client, ch, target.timeout(5))
    assert outcome(closed) == ("channel", ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["basic.ack"])
    deadline = time.monotonic() + target.timeout(5)  # our close's close-ok may come later on a busy broker
    while "ChannelCloseOk" not in (replies := [type(f.method).__name__ for f in inbound(client, ch)
                                               if hasattr(f, "method")]) and time.monotonic() < deadline:
        pump(client, 0.05)
    assert replies[-2:] == ["ChannelClose", "ChannelCloseOk"], (
        f"ERR-03: after its channel.close the broker drops the declare and get sent behind the error and "
        f"answers our channel.close with close-ok; on channel {ch} it sent {replies}")  # our close answered
    fresh = client.channel()
    with pytest.raises(ChannelClosed) as missing:
        client.rpc(fresh, QueueDeclare(queue=queue, passive=True), QueueDeclareOk)
    assert missing.value.code == ReplyCode.NOT_FOUND  # the declare after the error was ignored


@pytest.mark.rules("ERR-03")
@pytest.mark.clauses("ERR-03.c")
def test_close_ok_ends_the_closed_channel(connect: Connect, target: Target) -> None:
    """The client answers the broker's channel.close with channel.close-ok (the driver does):
    the channel has ended, so its number opens again and works."""
    client = connect()
    ch = client.channel()
    client.send(ch, BasicAck(delivery_tag=99))
    closed = wait_channel_closed(client, ch, target.timeout(5))
    assert outcome(closed)[:2] == ("channel", ReplyCode.PRECONDITION_FAILED)
    reopen_channel(client, ch)
    sync(client, ch)
    assert client.connection_closed is None, (
        f"ERR-03: channel.close-ok ends the closed channel, so channel {ch} can be opened again; the broker closed "
        f"the connection: {client.connection_closed}")
