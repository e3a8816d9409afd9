"""Differential tests: our codec against pamqp, pika and py-amqp on the same inputs.

a. We encode byte-for-byte what pamqp encodes (every method, the content header).
b. We decode what pamqp encodes.
c. We decode what pika encodes (every method, content header with all 14 properties, body).
d. We decode what py-amqp encodes (every method with argument signatures derived from our
   declarations, field tables, a published message) and py-amqp decodes what we encode.

Value strategies are per peer: each excludes only what that peer defines differently from us,
with the reason next to the exclusion. Field-table values are compared through `canon`,
which keeps the kind of a value (a bool is not the int 1, bytes are not str) and the order
of table entries.
"""

from __future__ import annotations

import calendar
import datetime as dt
import inspect
import struct
from collections.abc import Mapping
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import amqp
import amqp.method_framing
import amqp.serialization
import pamqp.body
import pamqp.commands
import pamqp.frame
import pamqp.header
import pamqp.heartbeat
import pika.frame
import pika.spec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import codec
from codec import spec
from codec.constants import Dialect
from codec.fast_tables import TABLE_CODECS
from codec.fields import MAX_DATETIME_SECONDS

# pamqp warns on constructing basic.recover-async (deprecated in 0-9-1); we still test it.
pytestmark = pytest.mark.filterwarnings("ignore:This command is deprecated in AMQP 0-9-1:DeprecationWarning")

UTC = dt.UTC
METHOD_CLASSES = list(codec.METHOD_CLASSES.values())
METHOD_IDS = [cls.NAME for cls in METHOD_CLASSES]

FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fields_of(cls: type) -> list[tuple[str, str]]:
    """(field name, domain name) of a method class, from the declarations."""
    return [(n, spec.DOMAIN_NAMES[id(d)]) for n, d in spec.METHODS_BY_NAME[cls.NAME].fields]


PROPERTY_DOMAINS = [(n, spec.DOMAIN_NAMES[id(d)]) for n, d in spec.PROPERTIES]


def decode_all(wire: bytes, dialect: Dialect = Dialect.RABBITMQ) -> list[codec.Frame]:
    reader = codec.FrameReader(frame_max=0, dialect=dialect)
    reader.receive_data(wire)
    frames = reader.frames()
    assert reader.buffered == 0
    return frames


def decode_one(wire: bytes) -> codec.Frame:
    frames = decode_all(wire)
    assert len(frames) == 1, frames
    return frames[0]


# --- value comparison -----------------------------------------------------------------
def init_params(cls: type) -> list[str]:
    """Named constructor parameters (a field-less class may inherit `(*args, **kwargs)`)."""
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    params = inspect.signature(cls.__init__).parameters.values()
    return [p.name for p in params if p.kind not in variadic][1:]


def seconds(value: dt.datetime) -> int:
    if value.tzinfo is None:  # py-amqp decodes timestamps as naive UTC
        return calendar.timegm(value.utctimetuple())
    return int(value.timestamp())


def canon(value: Any) -> Any:
    """A comparable form that keeps the kind of each value and the order of table entries."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", int(value))
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, Decimal):
        return ("decimal", value)  # Decimal == is numeric: 1.50 == 1.5
    if isinstance(value, (bytes, bytearray)):
        return ("bytes", bytes(value))
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, dt.datetime):
        return ("timestamp", seconds(value))
    if value is None:
        return ("void",)
    if isinstance(value, (list, tuple)):
        return ("array", [canon(v) for v in value])
    if isinstance(value, Mapping):
        return ("table", [(k, canon(v)) for k, v in value.items()])
    raise TypeError(f"no canonical form for {value!r}")


def assert_fields(decoded: Any, expected: dict[str, Any]) -> None:
    """Decoded method/properties fields equal `expected`; tables through `canon`."""
    got = decoded.fields()
    assert list(got) == list(expected), "expected values must be in declaration order"
    for name, value in expected.items():
        if isinstance(value, Mapping):
            assert canon(got[name]) == canon(value), name
        else:
            assert got[name] == value, name
            assert type(got[name]) is type(value) or value is None, (name, got[name], value)


# --- strategies -----------------------------------------------------------------------
# No lone surrogates: pamqp, pika and py-amqp encode str as strict UTF-8 (we would send them
# with surrogateescape, which is our own round-trip extension, not shared behaviour).
TEXT = st.text(st.characters(codec="utf-8"), max_size=30)
LONG_TEXT = st.text(st.characters(codec="utf-8"), max_size=80)
KEYS = st.text(st.characters(codec="utf-8"), max_size=20)  # <= 80 octets: pamqp truncates > 128
UINT = {"octet": 8, "short": 16, "long": 32, "longlong": 64, "timestamp": 64}
# pamqp checks exchange and queue names against its regex (and 127 characters).
PAMQP_NAME = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:@#,/+ ", max_size=127)
PAMQP_NAMED_FIELDS = {"exchange", "queue", "destination", "source"}
# pamqp's constructors validate deprecated/reserved fields to one value.
PAMQP_FIXED = {
    "ticket": 0,
    "capabilities": "",
    "insist": False,
    "known_hosts": "",
    "out_of_band": "0",  # pamqp insists on "0" (pika and py-amqp send "")
    "channel_id": b"0",
    "cluster_id": "",  # basic.get-empty
}

INT_RANGES = [  # every table integer width, so each type code gets exercised
    (-(2**7), 2**7 - 1),
    (-(2**15), 2**15 - 1),
    (0, 2**16 - 1),
    (-(2**31), 2**31 - 1),
    (0, 2**32 - 1),
    (-(2**63), 2**63 - 1),
]
TABLE_INTS = st.one_of([st.integers(lo, hi) for lo, hi in INT_RANGES])
# py-amqp writes integers outside +-2147483647 as 'L', which the RabbitMQ dialect does not
# have (see test_pyamqp_large_ints_are_L); -2147483648 is one of them (py-amqp's bound is
# off by one), so the common ground is +-(2^31 - 1).
PYAMQP_INTS = st.integers(-(2**31) + 1, 2**31 - 1)
# Decimals: we send and read the mantissa unsigned (the spec's `decimal-value = scale
# long-uint`, and RabbitMQ's parser: `"D", Before:8/unsigned, After:32/unsigned`); pamqp, pika
# and py-amqp send and read it signed, so only 0 <= mantissa < 2^31 is shared. Negative
# values are excluded for the same reason (we refuse to encode them).
NEG_EXP_DECIMALS = st.builds(
    lambda m, e: Decimal(m).scaleb(-e), st.integers(0, 2**31 - 1), st.integers(0, 20)
)
POS_EXP_DECIMALS = st.builds(lambda m, e: Decimal(m).scaleb(e), st.integers(0, 9999), st.integers(1, 5))
DECIMALS = NEG_EXP_DECIMALS | POS_EXP_DECIMALS
# Timestamps at whole seconds, UTC, within what datetime holds (we decode those to datetime).
DATETIMES = st.integers(0, MAX_DATETIME_SECONDS).map(lambda s: dt.datetime.fromtimestamp(s, UTC))


def sort_keys(value: Any) -> Any:
    """pamqp writes table entries sorted by key; we keep insertion order."""
    if isinstance(value, dict):
        return {k: sort_keys(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [sort_keys(v) for v in value]
    return value


def tables(*scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    leaves = st.one_of(st.booleans(), TEXT, DATETIMES, st.none(), *scalars)
    values = st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
        max_leaves=8,
    )
    return st.dictionaries(KEYS, values, max_size=5)


# Excluded for pamqp: float (pamqp sends 32-bit 'f', we send 'd'), bytes (pamqp refuses them;
# a bytearray is 'x' in both).
PAMQP_TABLES = tables(TABLE_INTS, DECIMALS, st.binary(max_size=16).map(bytearray)).map(sort_keys)
# Excluded for pika: float (pika cannot encode it); bytes are 'x' in both.
PIKA_TABLES = tables(TABLE_INTS, DECIMALS, st.binary(max_size=16))
# Excluded for py-amqp: bytes (py-amqp sends them as 'S', so they come back as str) and
# decimals with a positive exponent (py-amqp packs the negative scale and fails).
PYAMQP_TABLES = tables(PYAMQP_INTS, NEG_EXP_DECIMALS, st.floats(allow_nan=False))
# What we send and py-amqp reads back identically: anything but a mantissa >= 2^31.
OUR_TABLES = tables(TABLE_INTS, DECIMALS, st.floats(allow_nan=False), st.binary(max_size=16))


def field_strategy(name: str, domain: str, peer: str) -> st.SearchStrategy[Any]:
    """Our value for one method field, within what `peer` encodes the way we do."""
    if peer == "pamqp":
        if name in PAMQP_FIXED:
            return st.just(PAMQP_FIXED[name])
        if name in PAMQP_NAMED_FIELDS:
            return PAMQP_NAME
        if domain == "longlong":  # pamqp packs longlong signed ('>q')
            return st.integers(0, 2**63 - 1)
    if domain in UINT:
        return st.integers(0, 2 ** UINT[domain] - 1)
    if domain == "bit":
        return st.booleans()
    if domain == "shortstr":
        return TEXT
    if domain == "longstr":
        return LONG_TEXT.map(str.encode)  # our longstr fields are bytes
    assert domain == "table", domain
    return {"pamqp": PAMQP_TABLES, "pika": PIKA_TABLES, "amqp": PYAMQP_TABLES, "ours": OUR_TABLES}[peer]


def in_order(strategies: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """fixed_dictionaries, keys in declaration order (Hypothesis does not keep the order)."""
    names = list(strategies)
    return st.fixed_dictionaries(strategies).map(lambda d: {n: d[n] for n in names})


def method_values(cls: type, peer: str) -> st.SearchStrategy[dict[str, Any]]:
    return in_order({n: field_strategy(n, d, peer) for n, d in fields_of(cls)})


CHANNELS = st.integers(0, 65535)
BODY_SIZES = st.integers(0, 2**64 - 1)


# --- a/b: pamqp -----------------------------------------------------------------------
def camel(name: str) -> str:
    """Our name to pamqp's and pika's: basic.get-ok -> Basic.GetOk."""
    class_name, method_name = name.split(".")
    return f"{class_name.capitalize()}.{''.join(w.capitalize() for w in method_name.split('-'))}"


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


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


# pamqp omits a property whose value is "" (as if absent), so present strings are non-empty;
# it requires cluster_id to be empty (absent) and delivery_mode to be 1 or 2.
PAMQP_PROPERTIES = in_order(
    {
        n: {
            "shortstr": _optional(st.text(st.characters(codec="utf-8"), min_size=1, max_size=30)),
            "table": _optional(PAMQP_TABLES),
            "octet": _optional(st.integers(0, 255)),
            "timestamp": _optional(st.integers(0, MAX_DATETIME_SECONDS)),
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
        n: _optional(
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
        n: _optional(
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
