"""Message properties pass through the broker unchanged (PUB-08): every field-value type of
RabbitMQ's dialect, nested in tables and arrays, is delivered with the octets it was published
with; where the broker adds headers (quorum redelivery, dead-lettering) or rewrites a property
(direct reply-to), the entries it did not touch keep theirs; and so does a message restored
from durable storage.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codec import (
    BasicAck,
    BasicConsume,
    BasicGet,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    ConfirmSelect,
    ConfirmSelectOk,
    HeaderFrame,
    QueueDeclare,
    QueueDeclareOk,
    Typed,
    encode_content,
    encode_method,
)
from codec.frames import encode_header_payload
from codec.spec import PROPERTIES
from codec.wire_properties import WireProperties, decode_image, headers_table, table_entries
from conformance.drivers.raw import RawClient
from conformance.suite.messages.test_messages import RABBITMQ_TYPES
from reference_broker.core.delivery import SENDER_SELECTED
from reference_broker.server import EmbeddedBroker
from tests.codec.strategies import domain_strategy, typed_tables
from tests.conformance.test_cli_rabbitmq import rabbitmq  # noqa: F401  (fixture)
from tests.reference_broker.test_connection_engine import Client

# RabbitMQ's dialect in full, and 'L' (which the suite leaves out: RabbitMQ 4.x answers 'l').
EVERY_TYPE = {**RABBITMQ_TYPES, "int64-L": Typed(b"L", -7)}
RICH = BasicProperties(content_type="application/x", headers=EVERY_TYPE, delivery_mode=2, priority=3,
                       correlation_id="c", message_id="m", timestamp=1_700_000_000, app_id="a")

def image(properties: BasicProperties, body: bytes = b"") -> bytes:
    """What a content header carries after its body size: flags and property list."""
    return encode_header_payload(len(body), properties)[12:]


def delivered(frames: list[Any]) -> WireProperties:
    headers = [f for f in frames if isinstance(f, HeaderFrame)]
    assert headers, frames
    assert isinstance(headers[-1].properties, WireProperties)
    return headers[-1].properties


def published(client: Client, queue: str, properties: BasicProperties, body: bytes = b"b") -> None:
    assert client.send(encode_content(1, BasicPublish(routing_key=queue), properties, body)) == []


@st.composite
def any_properties(draw: st.DrawFn) -> BasicProperties:
    # expiration, user_id and the CC/BCC headers have rules of their own (the broker acts on them:
    # a CC or BCC header that is not an array of strings is refused 406, as RabbitMQ does)
    headers = draw(st.none() | typed_tables)
    values = {"headers": headers if headers is None else {k: v for k, v in headers.items() if k not in SENDER_SELECTED}}
    for name, dom in PROPERTIES:
        if name not in ("headers", "expiration", "user_id"):
            values[name] = draw(st.none() | domain_strategy(dom))
    return BasicProperties(**values)


@settings(max_examples=80, deadline=None)
@given(properties=any_properties())
def test_properties_are_delivered_byte_identical(properties: BasicProperties) -> None:
    """PUB-08: basic.get and basic.deliver carry the published property octets."""
    client = Client().opened()
    client.send(encode_method(1, QueueDeclare(queue="q")))
    published(client, "q", properties)
    published(client, "q", properties)
    sent = image(properties, b"b")
    assert delivered(client.send(encode_method(1, BasicGet(queue="q", no_ack=True)))).raw == sent
    assert delivered(client.send(encode_method(1, BasicConsume(queue="q", no_ack=True)))).raw == sent


def test_every_field_type_keeps_its_type_code() -> None:
    """The issue's example: a float stays `f`, an unsigned byte `B`, small int32s `I`."""
    client = Client().opened()
    client.send(encode_method(1, QueueDeclare(queue="q")))
    published(client, "q", RICH)
    got = delivered(client.send(encode_method(1, BasicGet(queue="q", no_ack=True))))
    assert got.raw == image(RICH, b"b")
    entries = table_entries(headers_table(got.raw) or b"")
    assert entries["float"][:1] == b"f" and entries["uint8"] == b"B\xc8"
    assert entries["array"][5:] == b"I\x00\x00\x00\x01u\x00\x02f?\x00\x00\x00A\x00\x00\x00\x02B\x01"


def _untouched_entries_kept(got: WireProperties) -> None:
    sent = table_entries(headers_table(image(RICH)) or b"")
    entries = table_entries(headers_table(got.raw or b"") or b"")
    assert {k: entries[k] for k in sent} == sent
    assert got.content_type == RICH.content_type and got.app_id == RICH.app_id


def test_quorum_redelivery_adds_its_headers_and_keeps_the_published_ones() -> None:
    client = Client().opened()
    client.send(encode_method(1, QueueDeclare(queue="qq", durable=True, arguments={"x-queue-type": "quorum"})))
    published(client, "qq", RICH)
    first = client.send(encode_method(1, BasicGet(queue="qq")))
    assert delivered(first).raw == image(RICH, b"b")
    client.send(encode_method(1, BasicNack(1, False, True)))
    again = delivered(client.send(encode_method(1, BasicGet(queue="qq"))))
    assert again.headers is not None and again.headers["x-acquired-count"] == 1
    _untouched_entries_kept(again)


def test_dead_lettering_adds_x_death_and_keeps_the_published_headers() -> None:
    client = Client().opened()
    client.send(encode_method(1, QueueDeclare(queue="dlq")))
    client.send(encode_method(1, QueueDeclare(queue="src", arguments={"x-dead-letter-exchange": "",
                                                                      "x-dead-letter-routing-key": "dlq"})))
    published(client, "src", RICH)
    client.send(encode_method(1, BasicGet(queue="src")))
    client.send(encode_method(1, BasicNack(1, False, False)))
    got = delivered(client.send(encode_method(1, BasicGet(queue="dlq", no_ack=True))))
    assert got.headers is not None and got.headers["x-death"][0]["reason"] == "rejected"
    _untouched_entries_kept(got)


def test_replace_keeps_the_image_of_what_did_not_change() -> None:
    wire = decode_image(image(RICH))
    assert wire._replace(reply_to="r").raw == image(RICH._replace(reply_to="r"))
    same_headers = wire._replace(reply_to="r")
    assert isinstance(same_headers, WireProperties) and headers_table(same_headers.raw or b"") == headers_table(
        image(RICH))
    plain = BasicProperties(content_type="t", headers={"a": 1, "b": [1.5]})
    decoded = decode_image(image(plain))
    assert decoded == plain and plain == decoded
    no_table = BasicProperties(content_type="t", priority=1)
    assert hash(decode_image(image(no_table))) == hash(no_table)


@contextlib.contextmanager
def _broker(data_dir: Path) -> Iterator[EmbeddedBroker]:
    broker = EmbeddedBroker(data_dir=str(data_dir)).start()
    try:
        yield broker
    finally:
        broker.stop()


def test_restored_message_keeps_its_property_octets(tmp_path: Path) -> None:
    """A persistent message read back from the store after a restart is still byte-identical."""
    with _broker(tmp_path) as broker, RawClient(broker.url) as client:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue="dq", durable=True), QueueDeclareOk)
        client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
        client.send(ch, BasicPublish(routing_key="dq"), RICH, b"b")
        client.expect(ch, BasicAck)  # confirmed after the store wrote it (PC-07)
    with _broker(tmp_path) as broker, RawClient(broker.url) as client:
        ch = client.channel()
        got = client.rpc(ch, BasicGet(queue="dq"), BasicGetOk)
        client.send(ch, BasicAck(1))
        assert isinstance(got.properties, WireProperties) and got.properties.raw == image(RICH, b"b")


# -- the same property against RabbitMQ 3.10.8 (marked `rabbitmq`) ---------------------------
def _finite(properties: BasicProperties) -> bool:
    """RabbitMQ closes the connection (541) on a NaN or infinite float: MSG-01's text."""
    return "nan" not in repr(properties.headers) and "inf" not in repr(properties.headers)


@pytest.mark.rabbitmq
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(properties=any_properties().filter(_finite))
def test_rabbitmq_delivers_every_field_type_byte_identical(rabbitmq: str, properties: BasicProperties) -> None:  # noqa: F811
    """3.10.8 resends the received property octets (MSG-01): the reference broker's behaviour.
    delivery_mode is kept to 1/2 (3.10.8 refuses others with 406, 4.3 accepts them)."""
    if properties.delivery_mode not in (None, 1, 2):
        properties = properties._replace(delivery_mode=2)
    with RawClient(rabbitmq) as client:
        ch = client.channel()
        queue = f"fidelity.props.{uuid.uuid4().hex[:8]}"
        client.rpc(ch, QueueDeclare(queue=queue, exclusive=True), QueueDeclareOk)
        client.send(ch, BasicPublish(routing_key=queue), properties, b"b")
        got = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk)
    assert isinstance(got.properties, WireProperties) and got.properties.raw == image(properties, b"b")
