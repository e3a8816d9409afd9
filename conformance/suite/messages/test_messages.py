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
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    BasicReturn,
    Command,
    QueueDeclare,
    QueueDeclareOk,
    Typed,
)
from codec.frames import encode_header_payload
from codec.wire_properties import WireProperties, headers_in_key_order, headers_table, table_entries
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target

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


def assert_same_octets(sent: BasicProperties, got: Command, target: Target) -> None:
    """The delivered property octets are the published ones (on RabbitMQ 3.13 and 4.x, MSG-01's
    variant: the top-level headers entries may come in key order); on a difference, name them."""
    assert isinstance(got.properties, WireProperties) and got.properties.raw is not None, got
    published = encode_header_payload(len(got.body), sent)[12:]
    if got.properties.raw == published:
        return
    key_order_allowed = target.profile.rabbitmq and target.profile.expect("MSG-01").startswith("variant:")
    if key_order_allowed and got.properties.raw == headers_in_key_order(published):
        return
    want = table_entries(headers_table(published) or bytes(4))
    have = table_entries(headers_table(got.properties.raw) or bytes(4))
    changed = {k: (v.hex(" "), have.get(k, b"").hex(" ")) for k, v in want.items() if have.get(k) != v}
    order = "" if changed or list(want) == list(have) else f"; the entries came in another order: {list(have)}"
    raise AssertionError(f"properties changed in transit; headers entries (sent, delivered): {changed}{order}; "
                         f"decoded as {got.properties.headers}")


def _queue(client: RawClient, names: Names) -> tuple[int, str]:
    ch = client.channel()
    queue = names.queue("props")
    client.rpc(ch, QueueDeclare(queue=queue, exclusive=True), QueueDeclareOk)
    return ch, queue


@pytest.mark.rules("MSG-01")
def test_get_delivers_every_field_type_unchanged(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch, queue = _queue(client, names)
    props = every_type_properties(target)
    client.send(ch, BasicPublish(routing_key=queue), props, b"body")
    got = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk)
    assert_same_octets(props, got, target)


@pytest.mark.rules("MSG-01")
def test_consumer_gets_every_field_type_unchanged(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch, queue = _queue(client, names)
    client.rpc(ch, BasicConsume(queue=queue, no_ack=True), BasicConsumeOk)
    props = every_type_properties(target)
    client.send(ch, BasicPublish(routing_key=queue), props, b"body")
    assert_same_octets(props, client.expect(ch, BasicDeliver), target)


@pytest.mark.rules("MSG-01")
def test_returned_message_keeps_every_field_type(connect: Connect, names: Names, target: Target) -> None:
    client = connect()
    ch = client.channel()
    props = every_type_properties(target)
    client.send(ch, BasicPublish(routing_key=names.queue("nowhere"), mandatory=True), props, b"body")
    assert_same_octets(props, client.expect(ch, BasicReturn), target)
