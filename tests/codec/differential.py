"""Shared parts of the differential tests (test_differential_*.py): our codec against pamqp, pika and py-amqp on the same inputs.

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
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import codec
from codec import spec
from codec.constants import Dialect
from codec.fields import MAX_DATETIME_SECONDS

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


def camel(name: str) -> str:
    """Our name to pamqp's and pika's: basic.get-ok -> Basic.GetOk."""
    class_name, method_name = name.split(".")
    return f"{class_name.capitalize()}.{''.join(w.capitalize() for w in method_name.split('-'))}"


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy
