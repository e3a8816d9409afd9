"""Field tables and arrays: construct declarations (the source of truth) and type inference.

Rules:
- Type codes per dialect are declared once in `FIELD_TYPES`; the construct parser/builder
  and the fast path in `codec.fast_tables` are both derived from it (docs/design.md decision 1).
- RabbitMQ's dialect is the default (its 0-9-1 errata: `s` signed 16, `u` unsigned 16,
  `I` signed 32, `l` signed 64, `x` byte array, `V` void); the spec grammar is selectable.
- Decoding yields plain Python values: bool, int, float, Decimal, str (UTF-8 with
  surrogateescape, so any octets round-trip), bytes, list, dict, datetime (UTC) or
  `Timestamp` for instants a datetime cannot hold, None.
- Encoding picks the type code like pamqp (smallest signed integer first, then unsigned);
  Python floats are sent as `d` (pamqp's `f` would lose precision); `Typed` forces a code.
- A truncated or over-long entry is an error, never silently dropped (construct's
  GreedyRange inside Prefixed drops a truncated last entry: `ExhaustiveRange` does not).
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from construct import (
    Adapter,
    Bytes,
    Construct,
    Error,
    Float32b,
    Float64b,
    GreedyBytes,
    Int8sb,
    Int8ub,
    Int16sb,
    Int16ub,
    Int32sb,
    Int32ub,
    Int64sb,
    Int64ub,
    LazyBound,
    ListContainer,
    Pass,
    Prefixed,
    Struct,
    Subconstruct,
    Switch,
    this,
)

from codec.constants import Dialect
from codec.errors import EncodeError

UTC = _dt.UTC
MAX_DATETIME_SECONDS = 253402300799  # 9999-12-31T23:59:59Z, the last instant datetime holds


class Timestamp(int):
    """A 'T' value outside datetime's range, kept as seconds since the epoch."""


@dataclass(frozen=True, slots=True)
class Typed:
    """A value with an explicit type code, e.g. `Typed(b"i", 7)` for an unsigned 32-bit."""

    kind: bytes
    value: Any


def decode_text(raw: bytes) -> str:
    """AMQP strings are octets; decode UTF-8 losslessly (invalid octets survive a round trip)."""
    return raw.decode("utf-8", "surrogateescape")


def encode_text(value: str | bytes | bytearray) -> bytes:
    """Inverse of `decode_text`; bytes pass through unchanged."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return bytes(value)


def timestamp_from_wire(seconds: int) -> _dt.datetime | Timestamp:
    if 0 <= seconds <= MAX_DATETIME_SECONDS:
        return _dt.datetime.fromtimestamp(seconds, UTC)
    return Timestamp(seconds)


def timestamp_to_wire(value: _dt.datetime | int) -> int:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp())
    return int(value)


def decimal_from_wire(scale: int, mantissa: int) -> _decimal.Decimal:
    return _decimal.Decimal(mantissa).scaleb(-scale)


def decimal_to_wire(value: _decimal.Decimal) -> tuple[int, int]:
    """(scale, unsigned mantissa) as the spec's decimal-value = scale long-uint."""
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):
        raise EncodeError(f"cannot encode {value} as a decimal")
    if exponent > 0:
        scale, mantissa = 0, int(value)
    else:
        scale, mantissa = -exponent, int(value.scaleb(-exponent))
    if not 0 <= scale <= 255 or not 0 <= mantissa <= 0xFFFFFFFF:
        raise EncodeError(f"decimal {value} out of range (scale 0..255, mantissa 0..2^32-1)")
    return scale, mantissa


# --- type codes, one table per dialect ------------------------------------------------
# name, construct of the value after the type octet. Fixed-size entries are FormatFields,
# whose `fmtstr` the fast path reuses.
_LongBytes = Prefixed(Int32ub, GreedyBytes)
_ShortBytes = Prefixed(Int8ub, GreedyBytes)
_Decimal = Struct("scale" / Int8ub, "mantissa" / Int32ub)

_COMMON: dict[bytes, tuple[str, Construct]] = {
    b"t": ("bool", Int8ub),
    b"b": ("int8", Int8sb),
    b"B": ("uint8", Int8ub),
    b"u": ("uint16", Int16ub),
    b"I": ("int32", Int32sb),
    b"i": ("uint32", Int32ub),
    b"f": ("float", Float32b),
    b"d": ("double", Float64b),
    b"D": ("decimal", _Decimal),
    b"S": ("longstr", _LongBytes),
    b"T": ("timestamp", Int64ub),
    b"V": ("void", Pass),
    b"A": ("array", Pass),  # placeholder: `_declare` substitutes the recursive array
    b"F": ("table", Pass),  # placeholder: `_declare` substitutes the recursive table
}

FIELD_TYPES: dict[Dialect, dict[bytes, tuple[str, Construct]]] = {
    Dialect.RABBITMQ: {
        **_COMMON,
        b"s": ("int16", Int16sb),
        b"l": ("int64", Int64sb),
        # Decoded, never sent: RabbitMQ reads 'L' as signed 64 too (rabbit_binary_parser,
        # rabbitmq-server#1093); py-amqp sends integers beyond 32 bits with it.
        b"L": ("int64", Int64sb),
        b"x": ("bytes", _LongBytes),
    },
    Dialect.AMQP_0_9_1: {
        **_COMMON,
        b"U": ("int16", Int16sb),
        b"L": ("int64", Int64sb),
        b"l": ("uint64", Int64ub),
        b"s": ("shortstr", _ShortBytes),
    },
}

# The names RabbitMQ gives the field types it reads (rabbit_binary_parser parse_table), as its
# reply texts show them ("received the value '5' of type 'byte' but current is none").
RABBITMQ_TYPE_NAMES: dict[bytes, str] = {
    b"t": "bool", b"b": "byte", b"B": "unsignedbyte", b"s": "short", b"u": "unsignedshort",
    b"I": "signedint", b"i": "unsignedint", b"l": "long", b"f": "float", b"d": "double",
    b"D": "decimal", b"S": "longstr", b"T": "timestamp", b"V": "void", b"x": "binary",
    b"A": "array", b"F": "table",
}

_INTEGER_CLASS = frozenset(b"bBsuIilLD")  # rabbit_misc:type_class: integers (and decimal) are one class
_FLOAT_CLASS = frozenset(b"fd")


def rabbitmq_type_class(value: Any) -> str:
    """The class RabbitMQ compares an argument's type by (rabbit_misc:type_class/1)."""
    kind = infer_kind(value)
    return "int" if kind[0] in _INTEGER_CLASS else "float" if kind[0] in _FLOAT_CLASS else kind.decode()


def _plain(value: Any) -> Any:
    value = value.value if isinstance(value, Typed) else value
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else value


def rabbitmq_equivalent(current: Any, received: Any) -> bool:
    """Whether RabbitMQ takes two values of one argument as equal on redeclaration
    (rabbit_misc:assert_args_equivalence1: both absent, or the same type class and value)."""
    if current is None or received is None:
        return current is received
    return rabbitmq_type_class(current) == rabbitmq_type_class(received) and _plain(current) == _plain(received)


def rabbitmq_value_text(value: Any, other: Any) -> str:
    """How RabbitMQ writes one side of an inequivalent argument (rabbit_misc val/1): "none" when
    absent; '<value>' when both sides are present, whatever their types (assert_args_equivalence1
    passes the bare values on); the value with its field type when the other side is absent."""
    if value is None:
        return "none"
    plain = _plain(value)
    shown = str(plain).lower() if isinstance(plain, bool) else str(plain)
    if other is not None:
        return f"'{shown}'"
    return f"the value '{shown}' of type '{RABBITMQ_TYPE_NAMES[infer_kind(value)]}'"


# Integer codes tried in order, smallest first (pamqp's order for RabbitMQ).
INTEGER_CODES: dict[Dialect, tuple[tuple[bytes, int, int], ...]] = {
    Dialect.RABBITMQ: (
        (b"b", -(2**7), 2**7 - 1),
        (b"s", -(2**15), 2**15 - 1),
        (b"u", 0, 2**16 - 1),
        (b"I", -(2**31), 2**31 - 1),
        (b"i", 0, 2**32 - 1),
        (b"l", -(2**63), 2**63 - 1),
    ),
    Dialect.AMQP_0_9_1: (
        (b"b", -(2**7), 2**7 - 1),
        (b"U", -(2**15), 2**15 - 1),
        (b"u", 0, 2**16 - 1),
        (b"I", -(2**31), 2**31 - 1),
        (b"i", 0, 2**32 - 1),
        (b"L", -(2**63), 2**63 - 1),
        (b"l", 0, 2**64 - 1),
    ),
}


def infer_kind(value: Any, dialect: Dialect = Dialect.RABBITMQ) -> bytes:
    """The type code `value` is sent with. Both codec paths use this one function."""
    if isinstance(value, Typed):
        return value.kind
    if isinstance(value, bool):
        return b"t"
    if isinstance(value, Timestamp):
        return b"T"
    if isinstance(value, int):
        for kind, low, high in INTEGER_CODES[dialect]:
            if low <= value <= high:
                return kind
        raise EncodeError(f"integer {value} does not fit any field type")
    if isinstance(value, float):
        return b"d"
    if isinstance(value, _decimal.Decimal):
        return b"D"
    if isinstance(value, str):
        return b"S"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"x" if dialect is Dialect.RABBITMQ else b"S"
    if isinstance(value, _dt.datetime):
        return b"T"
    if isinstance(value, Mapping):
        return b"F"
    if isinstance(value, (list, tuple)):
        return b"A"
    if value is None:
        return b"V"
    raise EncodeError(f"no field type for {type(value).__name__} value {value!r}")


# --- construct declarations -----------------------------------------------------------
class ExhaustiveRange(Subconstruct):  # type: ignore[misc]
    """Parse `subcon` until the (prefixed) stream ends; a partial last item is an error."""

    def _parse(self, stream: Any, context: Any, path: str) -> ListContainer:
        items = ListContainer()
        start = stream.tell()
        end = stream.seek(0, 2)
        stream.seek(start)
        while stream.tell() < end:
            items.append(self.subcon._parsereport(stream, context, path))
        return items

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        for item in obj:
            self.subcon._build(item, stream, context, path)
        return obj


class _ValueAdapter(Adapter):  # type: ignore[misc]
    """{kind, value} Container <-> plain Python value."""

    def __init__(self, subcon: Construct, dialect: Dialect) -> None:
        super().__init__(subcon)
        self.dialect = dialect

    def _decode(self, obj: Any, context: Any, path: str) -> Any:
        return value_from_wire(FIELD_TYPES[self.dialect][obj.kind][0], obj.value)

    def _encode(self, obj: Any, context: Any, path: str) -> Any:
        kind = infer_kind(obj, self.dialect)
        if kind not in FIELD_TYPES[self.dialect]:
            raise EncodeError(f"type code {kind!r} is not part of the {self.dialect.value} dialect")
        raw = obj.value if isinstance(obj, Typed) else obj
        return {"kind": kind, "value": value_to_wire(FIELD_TYPES[self.dialect][kind][0], raw)}


def value_from_wire(name: str, raw: Any) -> Any:
    """Python value of a parsed field of type `name` (a FIELD_TYPES name; shared by both paths)."""
    if name == "bool":
        return raw != 0
    if name in ("longstr", "shortstr"):
        return decode_text(raw)
    if name == "bytes":
        return bytes(raw)
    if name == "timestamp":
        return timestamp_from_wire(raw)
    if name == "decimal":
        return decimal_from_wire(raw.scale, raw.mantissa)
    if name == "array":
        return list(raw)
    return raw


def value_to_wire(name: str, value: Any) -> Any:
    """Inverse of `value_from_wire`: what the construct for type `name` builds from."""
    if name == "bool":
        return 1 if value else 0
    if name in ("longstr", "shortstr", "bytes"):
        return encode_text(value) if isinstance(value, str) else bytes(value)
    if name == "timestamp":
        return timestamp_to_wire(value)
    if name == "decimal":
        scale, mantissa = decimal_to_wire(value)
        return {"scale": scale, "mantissa": mantissa}
    if name == "void":
        return None
    return value


class _TableAdapter(Adapter):  # type: ignore[misc]
    def _decode(self, obj: Any, context: Any, path: str) -> dict[str, Any]:
        return {decode_text(entry.key): entry.value for entry in obj}

    def _encode(self, obj: Any, context: Any, path: str) -> list[dict[str, Any]]:
        return [{"key": encode_text(k), "value": v} for k, v in obj.items()]


def _field_value(dialect: Dialect, table: Construct, array: Construct) -> Construct:
    cases = {}
    for kind, (_name, subcon) in FIELD_TYPES[dialect].items():
        if kind == b"F":
            subcon = table
        elif kind == b"A":
            subcon = array
        cases[kind] = subcon
    inner = Struct("kind" / Bytes(1), "value" / Switch(this.kind, cases, default=Error))
    return _ValueAdapter(inner, dialect)


def _declare(dialect: Dialect) -> tuple[Construct, Construct]:
    """(table, array) constructs for one dialect; the value construct refers back lazily."""
    holder: dict[str, Construct] = {}
    table = _TableAdapter(
        Prefixed(
            Int32ub,
            ExhaustiveRange(
                Struct("key" / _ShortBytes, "value" / LazyBound(lambda: holder["value"]))
            ),
        )
    )
    array = Prefixed(Int32ub, ExhaustiveRange(LazyBound(lambda: holder["value"])))
    holder["value"] = _field_value(dialect, table, array)
    return table, array


_DECLARED = {dialect: _declare(dialect) for dialect in Dialect}
FIELD_TABLE: dict[Dialect, Construct] = {d: pair[0] for d, pair in _DECLARED.items()}
FIELD_ARRAY: dict[Dialect, Construct] = {d: pair[1] for d, pair in _DECLARED.items()}

FieldTable = Mapping[str, Any]
