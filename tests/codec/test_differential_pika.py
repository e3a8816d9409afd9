"""Differential tests, c: our codec decodes what pika encodes (every method, the content header with all 14 properties, a body).

Strategies and value comparison: tests/codec/differential.py.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pika.frame
import pika.spec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codec
from tests.codec.differential import (
    BODY_SIZES,
    CHANNELS,
    FEW,
    FEWER,
    METHOD_CLASSES,
    METHOD_IDS,
    PIKA_TABLES,
    PROPERTY_DOMAINS,
    TEXT,
    UTC,
    assert_fields,
    camel,
    decode_all,
    decode_one,
    in_order,
    init_params,
    method_values,
    optional,
)

# pamqp warns on constructing basic.recover-async (deprecated in 0-9-1); we still test it.
pytestmark = pytest.mark.filterwarnings("ignore:This command is deprecated in AMQP 0-9-1:DeprecationWarning")


# --- c: pika --------------------------------------------------------------------------
PIKA_RENAMES = {"global_": "global_qos", "exchange_type": "type", "message_type": "type"}


def pika_class(cls: type) -> Any:
    theirs = pika.spec.methods[cls.INDEX]
    assert camel(cls.NAME) == theirs.NAME
    return theirs


def to_pika(values: dict[str, Any]) -> dict[str, Any]:
    return {PIKA_RENAMES.get(n, n): v for n, v in values.items()}


@pytest.mark.parametrize("cls", METHOD_CLASSES, ids=METHOD_IDS)
def test_pika_field_names(cls: type) -> None:
    assert init_params(pika_class(cls)) == [PIKA_RENAMES.get(n, n) for n in cls._fields]


@pytest.mark.parametrize("cls", METHOD_CLASSES, ids=METHOD_IDS)
@FEWER
@given(data=st.data(), channel=CHANNELS)
def test_decode_pika_method(cls: type, data: st.DataObject, channel: int) -> None:
    values = data.draw(method_values(cls, "pika"))
    wire = pika.frame.Method(channel, pika_class(cls)(**to_pika(values))).marshal()
    frame = decode_one(wire)
    assert isinstance(frame, codec.MethodFrame)
    assert frame.channel == channel
    assert type(frame.method) is cls
    assert_fields(frame.method, values)


PIKA_PROPERTIES = in_order(
    {
        n: optional(
            {
                "shortstr": TEXT,
                "table": PIKA_TABLES,
                "octet": st.integers(0, 255),
                "timestamp": st.integers(0, 2**64 - 1),
            }[d]
        )
        for n, d in PROPERTY_DOMAINS
    }
)


@FEW
@given(props=PIKA_PROPERTIES, channel=CHANNELS, body_size=BODY_SIZES)
def test_decode_pika_header(props: dict[str, Any], channel: int, body_size: int) -> None:
    wire = pika.frame.Header(channel, body_size, pika.spec.BasicProperties(**to_pika(props))).marshal()
    frame = decode_one(wire)
    assert isinstance(frame, codec.HeaderFrame)
    assert (frame.channel, frame.class_id, frame.weight, frame.body_size) == (channel, 60, 0, body_size)
    assert_fields(frame.properties, props)


RICH_HEADERS = {
    "str": "héllo",
    "bool": True,
    "int8": -5,
    "int32": 70000,
    "int64": -(2**40),
    "bytes": b"\x00\xff",
    "decimal": Decimal("12.345"),
    "timestamp": dt.datetime(2024, 2, 29, 12, 0, 1, tzinfo=UTC),
    "void": None,
    "array": [1, "two", [3], {"four": 4}],
    "table": {"nested": {"deeper": False}},
    "empty": {},
}
ALL_PROPERTIES = {
    "content_type": "application/json",
    "content_encoding": "gzip",
    "headers": RICH_HEADERS,
    "delivery_mode": 2,
    "priority": 9,
    "correlation_id": "corr-1",
    "reply_to": "amq.rabbitmq.reply-to",
    "expiration": "60000",
    "message_id": "msg-1",
    "timestamp": 1_700_000_000,
    "message_type": "order.created",
    "user_id": "guest",
    "app_id": "app",
    "cluster_id": "cluster",
}


def test_decode_pika_publish_with_all_properties() -> None:
    assert list(ALL_PROPERTIES) == list(codec.BasicProperties._fields)
    body = bytes(range(256)) * 40  # 10240 octets, two body frames
    wire = b"".join(
        [
            pika.frame.Method(
                7, pika.spec.Basic.Publish(exchange="ex", routing_key="rk", mandatory=True)
            ).marshal(),
            pika.frame.Header(7, len(body), pika.spec.BasicProperties(**to_pika(ALL_PROPERTIES))).marshal(),
            pika.frame.Body(7, body[:8000]).marshal(),
            pika.frame.Body(7, body[8000:]).marshal(),
        ]
    )
    frames = decode_all(wire)
    assert [type(f) for f in frames] == [
        codec.MethodFrame,
        codec.HeaderFrame,
        codec.BodyFrame,
        codec.BodyFrame,
    ]
    assert frames[0] == codec.MethodFrame(
        7, codec.BasicPublish(exchange="ex", routing_key="rk", mandatory=True)
    )
    header = frames[1]
    assert isinstance(header, codec.HeaderFrame)
    assert header.body_size == len(body)
    assert_fields(header.properties, ALL_PROPERTIES)
    assembler = codec.ContentAssembler()
    commands = [c for f in frames if (c := assembler.feed(f)) is not None]
    assert len(commands) == 1
    assert commands[0].body == body
