"""Differential tests, a/b: our codec against pamqp: byte-for-byte encoding, and decoding what pamqp encodes.

Strategies and value comparison: tests/codec/differential.py.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pamqp.body
import pamqp.commands
import pamqp.frame
import pamqp.header
import pamqp.heartbeat
import pika.frame
import pika.spec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codec
from codec.fields import MAX_DATETIME_SECONDS
from tests.codec.differential import (
    BODY_SIZES,
    CHANNELS,
    FEW,
    METHOD_CLASSES,
    METHOD_IDS,
    PAMQP_TABLES,
    PROPERTY_DOMAINS,
    UTC,
    assert_fields,
    camel,
    canon,
    decode_all,
    decode_one,
    in_order,
    init_params,
    method_values,
    optional,
)

# pamqp warns on constructing basic.recover-async (deprecated in 0-9-1); we still test it.
pytestmark = pytest.mark.filterwarnings("ignore:This command is deprecated in AMQP 0-9-1:DeprecationWarning")


# --- a/b: pamqp -----------------------------------------------------------------------
def pamqp_class(cls: type) -> Any:
    """pamqp's class by name: "basic.get-ok" -> pamqp.commands.Basic.GetOk."""
    class_name, method_name = camel(cls.NAME).split(".")
    theirs = getattr(getattr(pamqp.commands, class_name), method_name)
    assert theirs.index == cls.INDEX
    return theirs


def to_pamqp(cls: type, values: dict[str, Any]) -> Any:
    kwargs = {
        n: v.decode() if isinstance(v, bytes) else v  # pamqp's longstr is str
        for n, v in values.items()
    }
    return pamqp_class(cls)(**kwargs)


@pytest.mark.parametrize("cls", METHOD_CLASSES, ids=METHOD_IDS)
def test_pamqp_constructor_takes_our_field_names(cls: type) -> None:
    assert init_params(pamqp_class(cls)) == list(cls._fields)
    assert pamqp_class(cls).attributes() == list(cls._fields)


def test_pamqp_properties_take_our_names() -> None:
    theirs = pamqp.commands.Basic.Properties
    assert init_params(theirs) == list(codec.BasicProperties._fields) == theirs.attributes()


@pytest.mark.parametrize("cls", METHOD_CLASSES, ids=METHOD_IDS)
@FEW
@given(data=st.data(), channel=CHANNELS)
def test_encode_method_matches_pamqp(cls: type, data: st.DataObject, channel: int) -> None:
    values = data.draw(method_values(cls, "pamqp"))
    ours = cls(**values)
    assert codec.encode_method(channel, ours) == pamqp.frame.marshal(to_pamqp(cls, values), channel)


@pytest.mark.parametrize("cls", METHOD_CLASSES, ids=METHOD_IDS)
@FEW
@given(data=st.data(), channel=CHANNELS)
def test_decode_pamqp_method(cls: type, data: st.DataObject, channel: int) -> None:
    values = data.draw(method_values(cls, "pamqp"))
    frame = decode_one(pamqp.frame.marshal(to_pamqp(cls, values), channel))
    assert isinstance(frame, codec.MethodFrame)
    assert frame.channel == channel
    assert type(frame.method) is cls
    assert_fields(frame.method, values)


# pamqp omits a property whose value is "" (as if absent), so present strings are non-empty;
# it requires cluster_id to be empty (absent) and delivery_mode to be 1 or 2.
PAMQP_PROPERTIES = in_order(
    {
        n: {
            "shortstr": optional(st.text(st.characters(codec="utf-8"), min_size=1, max_size=30)),
            "table": optional(PAMQP_TABLES),
            "octet": optional(st.integers(0, 255)),
            "timestamp": optional(st.integers(0, MAX_DATETIME_SECONDS)),
        }[d]
        for n, d in PROPERTY_DOMAINS
    }
).map(
    lambda p: {
        **p,
        "cluster_id": None,
        "delivery_mode": None if p["delivery_mode"] is None else 1 + p["delivery_mode"] % 2,
    }
)


def pamqp_header(channel: int, body_size: int, props: dict[str, Any]) -> bytes:
    theirs = dict(props)
    if theirs["timestamp"] is not None:  # pamqp's timestamp is a datetime, ours int seconds
        theirs["timestamp"] = dt.datetime.fromtimestamp(theirs["timestamp"], UTC)
    theirs["cluster_id"] = ""
    header = pamqp.header.ContentHeader(0, body_size, pamqp.commands.Basic.Properties(**theirs))
    return pamqp.frame.marshal(header, channel)


@FEW
@given(props=PAMQP_PROPERTIES, channel=CHANNELS, body_size=BODY_SIZES)
def test_encode_header_matches_pamqp(props: dict[str, Any], channel: int, body_size: int) -> None:
    ours = codec.encode_header(channel, body_size, codec.BasicProperties(**props))
    assert ours == pamqp_header(channel, body_size, props)


@FEW
@given(props=PAMQP_PROPERTIES, channel=CHANNELS, body_size=BODY_SIZES)
def test_decode_pamqp_header(props: dict[str, Any], channel: int, body_size: int) -> None:
    frame = decode_one(pamqp_header(channel, body_size, props))
    assert isinstance(frame, codec.HeaderFrame)
    assert (frame.channel, frame.class_id, frame.weight, frame.body_size) == (channel, 60, 0, body_size)
    assert_fields(frame.properties, props)


@FEW
@given(body=st.binary(max_size=2000), channel=CHANNELS)
def test_encode_body_matches_pamqp(body: bytes, channel: int) -> None:
    theirs = pamqp.frame.marshal(pamqp.body.ContentBody(body), channel)
    assert codec.encode_body(channel, body) == theirs
    assert decode_one(theirs) == codec.BodyFrame(channel, body)


@FEW
@given(value=st.floats(width=32, allow_nan=False), channel=CHANNELS)
def test_decode_pamqp_float(value: float, channel: int) -> None:
    """pamqp sends a float as 32-bit 'f' (we send 'd', so encoding is not compared): we read
    it back exactly (every width-32 float is exact in 'f')."""
    wire = pamqp.frame.marshal(pamqp.commands.Basic.Consume(arguments={"f": value}), channel)
    frame = decode_one(wire)
    assert isinstance(frame, codec.MethodFrame)
    assert canon(frame.method.arguments) == canon({"f": value})


def test_heartbeat_and_protocol_header_match_pamqp_and_pika() -> None:
    assert (
        codec.encode_heartbeat() == pamqp.heartbeat.Heartbeat().marshal() == pika.frame.Heartbeat().marshal()
    )
    assert decode_one(pamqp.heartbeat.Heartbeat().marshal()) == codec.HeartbeatFrame(0)
    header = pamqp.header.ProtocolHeader().marshal()
    assert header == pika.frame.ProtocolHeader().marshal() == codec.PROTOCOL_HEADER
    reader = codec.FrameReader(frame_max=0, expect_protocol_header=True)
    reader.receive_data(header)
    assert reader.frames() == [codec.ProtocolHeader(codec.PROTOCOL_HEADER)]


def test_decode_pamqp_content() -> None:
    """A whole pamqp publish (method, header, two body frames) through FrameReader + assembler."""
    body = b"x" * 5000
    props = pamqp.commands.Basic.Properties(content_type="text/plain", delivery_mode=2, headers={"a": 1})
    wire = b"".join(
        [
            pamqp.frame.marshal(pamqp.commands.Basic.Publish(exchange="ex", routing_key="rk"), 3),
            pamqp.frame.marshal(pamqp.header.ContentHeader(0, len(body), props), 3),
            pamqp.frame.marshal(pamqp.body.ContentBody(body[:4000]), 3),
            pamqp.frame.marshal(pamqp.body.ContentBody(body[4000:]), 3),
        ]
    )
    assembler = codec.ContentAssembler()
    commands = [c for f in decode_all(wire) if (c := assembler.feed(f)) is not None]
    assert len(commands) == 1
    command = commands[0]
    assert command.channel == 3
    assert command.method == codec.BasicPublish(exchange="ex", routing_key="rk")
    assert command.properties == codec.BasicProperties(
        content_type="text/plain", delivery_mode=2, headers={"a": 1}
    )
    assert command.body == body
