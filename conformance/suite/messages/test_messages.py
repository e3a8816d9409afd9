"""What the broker does to the messages it carries (MSG-01).

A message is published with properties whose headers hold every field-value type, nested in
tables and arrays, each forced to its type code; it must come back (get-ok, deliver, return)
with the same property octets. The received octets are the driver's record of the content
header (`WireProperties.raw`), so the comparison is on the wire, not on decoded values.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable

import pytest

from codec import (
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    BasicReject,
    BasicReturn,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDeclareOk,
    Typed,
)
from codec.frames import encode_frame, encode_header_payload, encode_method
from codec.wire_properties import WireProperties, headers_table, table_entries
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.field_values import assert_same_octets, message_containers
from conformance.suite.steps.queues import QUORUM, require_kind

Connect = Callable[..., RawClient]

# One value of every type code both dialects share, with values a typed decoder must keep apart
# from their look-alikes (1.32 as float vs double, 200 as unsigned vs signed byte, 5 as int32).
COMMON_TYPES: dict[str, Typed] = {
    "bool": Typed(b"t", True), "int8": Typed(b"b", -3), "uint8": Typed(b"B", 200),
    "uint16": Typed(b"u", 60000), "int32": Typed(b"I", 5), "uint32": Typed(b"i", 4_000_000_000),
    "float": Typed(b"f", 1.32), "double": Typed(b"d", 1.32),
    "decimal": Typed(b"D", decimal.Decimal("3.14")), "longstr": Typed(b"S", b"\xc3\xa9t\xc3\xa9"),
    "timestamp": Typed(b"T", 1_700_000_000), "void": Typed(b"V", None),
    "array": Typed(b"A", [Typed(b"I", 1), Typed(b"u", 2), Typed(b"f", 0.5), Typed(b"A", [Typed(b"B", 1)])]),
    "table": Typed(b"F", {"f": Typed(b"f", 2.5), "B": Typed(b"B", 255), "F": Typed(b"F", {"V": Typed(b"V", None)})}),
}
# RabbitMQ's dialect adds these (its 0-9-1 errata). 'L' is left out: RabbitMQ reads it as 'l'
# and 4.x re-encodes it as 'l' (MSG-01's text).
RABBITMQ_TYPES: dict[str, Typed] = {
    **COMMON_TYPES, "int16": Typed(b"s", -300), "int64": Typed(b"l", -(2**40)), "bytes": Typed(b"x", b"\x00\xff"),
    "nested": Typed(b"F", {"x": Typed(b"x", b"\x01"), "s": Typed(b"s", 7), "A": Typed(b"A", [Typed(b"l", 7)])}),
}


def every_type_properties(target: Target) -> BasicProperties:
    headers = RABBITMQ_TYPES if target.profile.rabbitmq else COMMON_TYPES
    return BasicProperties(content_type="application/octet-stream", headers=dict(headers), delivery_mode=1,
                           priority=1, correlation_id="c-1", message_id="m-1", timestamp=1_700_000_000,
                           app_id="amqp-conformance")


def _queue(client: RawClient, names: Names) -> tuple[int, str]:
    ch = client.channel()
    queue = names.queue("props")
    client.rpc(ch, QueueDeclare(queue=queue, exclusive=True), QueueDeclareOk)
    return ch, queue


@pytest.mark.rules("MSG-01")
@pytest.mark.clauses("MSG-01.a", "MSG-01.d")
def test_get_delivers_every_field_type_unchanged(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch, queue = _queue(client, names)
    props = every_type_properties(target)
    client.send(ch, BasicPublish(routing_key=queue), props, b"body")
    got = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk)
    assert_same_octets(props, got, target)


@pytest.mark.rules("MSG-01")
@pytest.mark.clauses("MSG-01.b", "MSG-01.d")
def test_consumer_gets_every_field_type_unchanged(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch, queue = _queue(client, names)
    client.rpc(ch, BasicConsume(queue=queue, no_ack=True), BasicConsumeOk)
    props = every_type_properties(target)
    client.send(ch, BasicPublish(routing_key=queue), props, b"body")
    assert_same_octets(props, client.expect(ch, BasicDeliver), target)


@pytest.mark.rules("MSG-01")
@pytest.mark.clauses("MSG-01.c", "MSG-01.d")
def test_returned_message_keeps_every_field_type(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch = client.channel()
    props = every_type_properties(target)
    client.send(ch, BasicPublish(routing_key=names.queue("nowhere"), mandatory=True), props, b"body")
    assert_same_octets(props, client.expect(ch, BasicReturn), target)


@pytest.mark.rules("MSG-01")
@pytest.mark.clauses("MSG-01.e", "MSG-01.f")
def test_long_L_and_an_odd_bool_octet_as_each_version_sends_them(connect: Connect, names: Names,
                                                                  target: Target) -> None:
    """RabbitMQ itself is judged by its version; a broker that emulates a RabbitMQ version (the
    reference broker) may instead pass the received octets through, as MSG-01's profile variant
    ("each entry keeps its octets") allows."""
    if not target.profile.rabbitmq:
        not_applicable("'L' and the octets a bool may hold are RabbitMQ's dialect (MSG-01)")
    client = connect()
    ch, queue = _queue(client, names)
    props = BasicProperties(headers={"L": Typed(b"L", 5), "t": Typed(b"t", True), "I": Typed(b"I", 7)})
    header = encode_header_payload(4, props)
    assert header.count(b"\x01tt\x01") == 1
    header = header.replace(b"\x01tt\x01", b"\x01tt\x02")  # the codec sends a bool as 0 or 1: octet 2 by hand
    client.send_raw(encode_method(ch, BasicPublish(routing_key=queue)) + encode_frame(2, ch, header)
                    + encode_frame(3, ch, b"body"), channel=ch)
    got = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk)
    assert isinstance(got.properties, WireProperties) and got.properties.raw is not None, got
    have = table_entries(headers_table(got.properties.raw) or bytes(4))
    sent = table_entries(headers_table(header[12:]) or bytes(4))
    reencoded = {"I": sent["I"], "L": b"l" + sent["L"][1:], "t": b"t\x01"}
    if message_containers(target):
        want, how = reencoded, "3.13 and 4.x re-encode the table: 'L' (read as signed 64) comes back as 'l', a bool octet 2 as 1"
        if target.profile.server_properties.get("product") != "RabbitMQ" and have == sent:
            return  # a broker emulating the version may keep the octets (the profile's variant: each entry keeps them)
    else:
        want, how = sent, "before 3.13 the received property octets are sent again"
    assert have == want, (f"MSG-01: {how}; headers entries (name: octets) want "
                          f"{ {k: v.hex(' ') for k, v in want.items()} }, got { {k: v.hex(' ') for k, v in have.items()} }")


@pytest.mark.rules("MSG-01")
@pytest.mark.clauses("MSG-01.g")
def test_headers_the_broker_adds_leave_the_others_typed(connect: Connect, names: Names, target: Target) -> None:
    """A quorum queue adds x-delivery-count to a message returned by basic.reject (RQ-05); every
    published entry keeps its octets beside it."""
    require_kind(target.profile, QUORUM)
    client = connect()
    ch = client.channel()
    queue = names.queue("props")
    client.rpc(ch, QueueDeclare(queue=queue, durable=True, arguments={"x-queue-type": QUORUM}), QueueDeclareOk)
    props = every_type_properties(target)
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    client.send(ch, BasicPublish(routing_key=queue), props, b"body")
    client.expect(ch, BasicAck, timeout=target.timeout(10))
    first = client.rpc(ch, BasicGet(queue=queue), BasicGetOk, timeout=target.timeout(5))
    assert isinstance(first.method, BasicGetOk)
    client.send(ch, BasicReject(delivery_tag=first.method.delivery_tag, requeue=True))
    again = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk, timeout=target.timeout(5))
    assert isinstance(again.properties, WireProperties) and again.properties.raw is not None, again
    have = table_entries(headers_table(again.properties.raw) or bytes(4))
    sent = table_entries(headers_table(encode_header_payload(len(again.body), props)[12:]) or bytes(4))
    added = sorted(set(have) - set(sent))
    changed = {k: (v.hex(" "), have.get(k, b"").hex(" ")) for k, v in sent.items() if have.get(k) != v}
    assert not changed, (f"MSG-01: where the broker adds headers ({added}), the published entries keep their "
                         f"types and octets; changed (sent, delivered): {changed}")
