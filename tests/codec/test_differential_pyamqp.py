"""Differential tests, d: our codec against py-amqp: we decode what py-amqp encodes (methods, field tables, a
published message) and py-amqp decodes what we encode.

Strategies and value comparison: tests/codec/differential.py.
"""

from __future__ import annotations

import inspect
import struct
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import amqp
import amqp.method_framing
import amqp.serialization
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codec
from codec.constants import Dialect
from codec.fast_tables import TABLE_CODECS
from tests.codec.differential import (
    CHANNELS,
    FEW,
    FEWER,
    METHOD_CLASSES,
    METHOD_IDS,
    OUR_TABLES,
    PROPERTY_DOMAINS,
    PYAMQP_TABLES,
    TEXT,
    assert_fields,
    canon,
    decode_all,
    decode_one,
    fields_of,
    in_order,
    method_values,
    optional,
)

# pamqp warns on constructing basic.recover-async (deprecated in 0-9-1); we still test it.
pytestmark = pytest.mark.filterwarnings("ignore:This command is deprecated in AMQP 0-9-1:DeprecationWarning")


# --- d: py-amqp -----------------------------------------------------------------------
# py-amqp's argument-signature letters for our domain names (amqp/serialization.py).
PYAMQP_LETTERS = {
    "bit": "b",
    "octet": "o",
    "short": "B",
    "long": "l",
    "longlong": "L",
    "shortstr": "s",
    "longstr": "S",
    "table": "F",
    "timestamp": "T",
}


def argsig(cls: type) -> str:
    return "".join(PYAMQP_LETTERS[d] for _n, d in fields_of(cls))


# py-amqp's own signatures, where it declares one: what it reads (_METHODS) and the `argsig`
# defaults of what it sends.
PYAMQP_SENDS = {
    (amqp.Channel, "basic_ack"): "basic.ack",
    (amqp.Channel, "basic_cancel"): "basic.cancel",
    (amqp.Channel, "basic_consume"): "basic.consume",
    (amqp.Channel, "basic_get"): "basic.get",
    (amqp.Channel, "basic_publish"): "basic.publish",
    (amqp.Channel, "basic_qos"): "basic.qos",
    (amqp.Channel, "basic_reject"): "basic.reject",
    (amqp.Channel, "close"): "channel.close",
    (amqp.Channel, "exchange_bind"): "exchange.bind",
    (amqp.Channel, "exchange_declare"): "exchange.declare",
    (amqp.Channel, "exchange_delete"): "exchange.delete",
    (amqp.Channel, "exchange_unbind"): "exchange.unbind",
    (amqp.Channel, "queue_bind"): "queue.bind",
    (amqp.Channel, "queue_declare"): "queue.declare",
    (amqp.Channel, "queue_delete"): "queue.delete",
    (amqp.Channel, "queue_purge"): "queue.purge",
    (amqp.Channel, "queue_unbind"): "queue.unbind",
    (amqp.Connection, "_on_start"): "connection.start-ok",
    (amqp.Connection, "_on_tune"): "connection.tune-ok",
    (amqp.Connection, "_on_tune_sent"): "connection.open",
    (amqp.Connection, "close"): "connection.close",
}
# Where py-amqp reads fewer fields than there are (a prefix), or reads a different type.
PYAMQP_READS_DIFFERENTLY = {
    "basic.cancel": "s",  # ignores nowait
    "basic.nack": "Lb",  # ignores requeue
    "channel.open-ok": "",  # ignores the reserved channel-id
    "connection.open-ok": "",  # ignores the reserved known-hosts
    "connection.blocked": "",  # ignores the reason
    "connection.secure": "s",  # py-amqp bug: the challenge is a longstr ('S')
}


def test_pyamqp_argument_signatures_match_ours() -> None:
    by_name = {cls.NAME: cls for cls in METHOD_CLASSES}
    by_ids = {(cls.CLASS_ID, cls.METHOD_ID): cls for cls in METHOD_CLASSES}
    for (owner, function), name in PYAMQP_SENDS.items():
        default = inspect.signature(getattr(owner, function)).parameters["argsig"].default
        assert default == argsig(by_name[name]), (owner.__name__, function)
    read = {**amqp.Channel._METHODS, **amqp.Connection._METHODS}
    assert len(read) >= 30
    for ids, method in read.items():
        cls = by_ids[ids]
        ours = argsig(cls)
        expected = PYAMQP_READS_DIFFERENTLY.get(cls.NAME, ours)
        assert (method.args or "") == expected, cls.NAME
        if cls.NAME != "connection.secure":
            assert ours.startswith(expected), cls.NAME
        assert method.content == cls.HAS_CONTENT, cls.NAME


def pyamqp_method(cls: type, channel: int, values: dict[str, Any]) -> bytes:
    payload = struct.pack(">HH", cls.CLASS_ID, cls.METHOD_ID) + amqp.serialization.dumps(
        argsig(cls), list(values.values())
    )
    return codec.encode_frame(1, channel, payload)


@pytest.mark.parametrize("cls", METHOD_CLASSES, ids=METHOD_IDS)
@FEWER
@given(data=st.data(), channel=CHANNELS)
def test_decode_pyamqp_method(cls: type, data: st.DataObject, channel: int) -> None:
    values = data.draw(method_values(cls, "amqp"))
    frame = decode_one(pyamqp_method(cls, channel, values))
    assert isinstance(frame, codec.MethodFrame)
    assert frame.channel == channel
    assert type(frame.method) is cls
    assert_fields(frame.method, values)


@pytest.mark.parametrize("cls", METHOD_CLASSES, ids=METHOD_IDS)
@FEWER
@given(data=st.data())
def test_pyamqp_decodes_our_method(cls: type, data: st.DataObject) -> None:
    values = data.draw(method_values(cls, "ours"))
    payload = codec.frames.encode_method_payload(cls(**values))
    decoded, end = amqp.serialization.loads(argsig(cls), payload, 4)
    assert end == len(payload)
    expected = [v.decode() if isinstance(v, bytes) else v for v in values.values()]  # 'S' -> str
    assert len(decoded) == len(expected)
    for got, want in zip(decoded, expected, strict=True):
        if isinstance(want, Mapping):
            assert canon(got) == canon(want)
        else:
            assert got == want
            assert type(got) is type(want)


@FEW
@given(table=PYAMQP_TABLES)
def test_pyamqp_tables_decode_to_equal_dicts(table: dict[str, Any]) -> None:
    raw = amqp.serialization.dumps("F", [table])
    for dialect in Dialect:  # py-amqp writes only codes both dialects read the same way
        decoded, end = TABLE_CODECS[dialect].decode_table(raw, 0)
        assert end == len(raw)
        assert canon(decoded) == canon(table)


@FEW
@given(value=st.integers(-(2**63), -(2**31)) | st.integers(2**31, 2**63 - 1))
def test_pyamqp_large_ints_are_L(value: int) -> None:
    """py-amqp sends ints outside +-(2^31-1) as 'L': the spec dialect's signed 64-bit. RabbitMQ
    reads 'L' as signed 64 as well (rabbitmq-server#1093), so its dialect decodes it, and
    re-encodes the value with its own 'l'."""
    raw = amqp.serialization.dumps("F", [{"n": value}])
    assert raw[6:7] == b"L"
    assert TABLE_CODECS[Dialect.AMQP_0_9_1].decode_table(raw, 0) == ({"n": value}, len(raw))
    assert TABLE_CODECS[Dialect.RABBITMQ].decode_table(raw, 0) == ({"n": value}, len(raw))
    assert TABLE_CODECS[Dialect.RABBITMQ].encode_table({"n": value})[6:7] != b"L"  # RabbitMQ never sends L


@FEW
@given(table=OUR_TABLES)
def test_pyamqp_decodes_our_tables(table: dict[str, Any]) -> None:
    raw = TABLE_CODECS[Dialect.RABBITMQ].encode_table(table)
    (decoded,), end = amqp.serialization.loads("F", raw, 0)
    assert end == len(raw)
    assert canon(decoded) == canon(table)


# py-amqp's property names differ for two of the 14.
PYAMQP_PROPERTY_NAMES = {"headers": "application_headers", "message_type": "type"}

PYAMQP_PROPERTIES = in_order(
    {
        n: optional(
            {
                "shortstr": TEXT,
                "table": PYAMQP_TABLES,
                "octet": st.integers(0, 255),
                "timestamp": st.integers(0, 2**64 - 1),
            }[d]
        )
        for n, d in PROPERTY_DOMAINS
    }
)


@FEW
@given(props=PYAMQP_PROPERTIES, channel=st.integers(1, 65535), body=st.binary(max_size=300))
def test_decode_pyamqp_published_message(props: dict[str, Any], channel: int, body: bytes) -> None:
    """py-amqp's own frame writer (method, header, body frames) for a basic.publish."""
    written: list[bytes] = []
    connection = SimpleNamespace(frame_max=131072, bytes_sent=0)
    transport = SimpleNamespace(write=lambda data: written.append(bytes(data)))
    write_frame = amqp.method_framing.frame_writer(connection, transport)
    message = amqp.Message(
        body, **{PYAMQP_PROPERTY_NAMES.get(n, n): v for n, v in props.items() if v is not None}
    )
    publish = {"ticket": 0, "exchange": "ex", "routing_key": "rk", "mandatory": False, "immediate": False}
    args = amqp.serialization.dumps(argsig(codec.BasicPublish), list(publish.values()))
    write_frame(1, channel, (60, 40), args, message)

    frames = decode_all(b"".join(written))
    assert frames[0] == codec.MethodFrame(channel, codec.BasicPublish(**publish))
    header = frames[1]
    assert isinstance(header, codec.HeaderFrame)
    assert (header.channel, header.body_size) == (channel, len(body))
    assert_fields(header.properties, props)
    assert b"".join(f.payload for f in frames[2:] if isinstance(f, codec.BodyFrame)) == body
