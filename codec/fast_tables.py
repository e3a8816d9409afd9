"""Fast field-table and field-array codec, derived from `codec.fields.FIELD_TYPES`.

Rules: the struct format of every fixed-size type code is read from the construct
declaration (`FormatField.fmtstr`), so no wire fact is restated here; values are read through
a 256-entry table of readers indexed by the type octet, built from the declarations; value conversion
and type inference are the shared functions of `codec.fields`. Decoders thread an offset
through one `bytes` object (py-amqp's technique) and raise `FrameSyntaxError` on any
overrun, unknown type code or trailing octets; property tests pin this module to the
construct path on valid, malformed and truncated input.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import struct
from collections.abc import Callable
from typing import Any

from construct import FormatField

from codec.constants import Dialect
from codec.errors import EncodeError, FrameSyntaxError
from codec.fields import (
    FIELD_TYPES,
    INTEGER_CODES,
    Timestamp,
    Typed,
    decimal_from_wire,
    decimal_to_wire,
    decode_text,
    infer_kind,
    timestamp_from_wire,
    timestamp_to_wire,
    value_to_wire,
)

_U32 = struct.Struct(">I")
_DECIMAL = struct.Struct(">BI")
_DOUBLE = struct.Struct(">d")
_U64 = struct.Struct(">Q")
_LENGTH_OCTET = tuple(bytes((i,)) for i in range(256))
NAMES_KEPT = 4096  # encoded field names a codec remembers before it starts over

Decoder = Callable[[bytes, int], tuple[dict[str, Any], int]]
Encoder = Callable[[Any], bytes]
Reader = Callable[[bytes, int, int], tuple[Any, int]]  # (payload, offset after the type octet, end)


def _truth(octet: int) -> bool:
    return octet != 0


def _fixed_reader(fixed: struct.Struct, convert: Callable[[Any], Any] | None) -> Reader:
    size, unpack = fixed.size, fixed.unpack_from

    def read(p: bytes, o: int, end: int) -> tuple[Any, int]:
        if o + size > end:
            raise FrameSyntaxError("truncated field value", data=p, offset=o)
        (value,) = unpack(p, o)
        return (value if convert is None else convert(value)), o + size

    return read


def _long_string_reader(convert: Callable[[bytes], Any] | None) -> Reader:
    def read(p: bytes, o: int, end: int) -> tuple[Any, int]:
        if o + 4 > end:
            raise FrameSyntaxError("truncated long string", data=p, offset=o)
        (n,) = _U32.unpack_from(p, o)
        raw = p[o + 4 : o + 4 + n]
        o += 4 + n
        if o > end:
            raise FrameSyntaxError("truncated long string", data=p, offset=end)
        return (raw if convert is None else convert(raw)), o

    return read


def _short_string_reader(p: bytes, o: int, end: int) -> tuple[Any, int]:
    if o >= end:
        raise FrameSyntaxError("truncated short string", data=p, offset=o)
    n = p[o]
    raw = p[o + 1 : o + 1 + n]
    o += 1 + n
    if o > end:
        raise FrameSyntaxError("truncated short string", data=p, offset=end)
    return decode_text(raw), o


def _void_reader(p: bytes, o: int, end: int) -> tuple[Any, int]:
    return None, o


def _decimal_reader(p: bytes, o: int, end: int) -> tuple[Any, int]:
    if o + 5 > end:
        raise FrameSyntaxError("truncated decimal", data=p, offset=o)
    scale, mantissa = _DECIMAL.unpack_from(p, o)
    return decimal_from_wire(scale, mantissa), o + 5


def _fixed_structs(dialect: Dialect) -> dict[int, struct.Struct]:
    """type octet -> struct for every fixed-size type, from the construct declarations."""
    return {
        kind[0]: struct.Struct(sub.fmtstr)
        for kind, (_name, sub) in FIELD_TYPES[dialect].items()
        if isinstance(sub, FormatField)
    }


class TableCodec:
    """Decoder and encoder of tables and arrays for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.fixed = _fixed_structs(dialect)
        self.codes = frozenset(k[0] for k in FIELD_TYPES[dialect])
        self.x_is_bytes = b"x" in FIELD_TYPES[dialect]
        self.s_is_shortstr = FIELD_TYPES[dialect].get(b"s", ("",))[0] == "shortstr"
        self._bytes_kind = b"x" if self.x_is_bytes else b"S"
        self._by_class = self._class_encoders()
        # type octet -> (size, unpack) of the plain fixed-size numbers (not t, T), for the inline reads
        self._plain: list[tuple[int, Callable[[bytes, int], tuple[Any, ...]]] | None] = [None] * 256
        for code, fixed in self.fixed.items():
            if code not in (0x74, 0x54):
                self._plain[code] = (fixed.size, fixed.unpack_from)
        self._readers = self._value_readers()
        self._names: dict[str, bytes] = {}  # encoded field names (see `_name`)

    # -- decoding ------------------------------------------------------------------
    # Every value is read by `readers[type octet]` (a list of 256, None = unknown code), built
    # once from the declarations; a table entry or array item whose type is a long string or a
    # plain fixed-size number is read inline instead, since a call per value is a third of the
    # decoding time (py-amqp inlines the same way).
    def decode_table(self, p: bytes, o: int, limit: int = -1) -> tuple[dict[str, Any], int]:
        (size,) = _U32.unpack_from(p, o)
        o += 4
        end = o + size
        if end > (len(p) if limit < 0 else limit):
            raise FrameSyntaxError("field table longer than its frame", data=p, offset=o - 4)
        result: dict[str, Any] = {}
        plain, readers, unpack_u32 = self._plain, self._readers, _U32.unpack_from
        while o < end:
            n = p[o]
            key = p[o + 1 : o + 1 + n].decode("utf-8", "surrogateescape")
            o += 1 + n
            if o >= end:
                raise FrameSyntaxError("truncated field-table entry", data=p, offset=o)
            kind = p[o]
            if kind == 0x53:  # S
                (n,) = unpack_u32(p, o + 1)
                o += 5 + n
                if o > end:
                    raise FrameSyntaxError("truncated long string", data=p, offset=end)
                result[key] = p[o - n : o].decode("utf-8", "surrogateescape")
                continue
            fixed = plain[kind]
            if fixed is not None:
                size, unpack = fixed
                o += 1 + size
                if o > end:
                    raise FrameSyntaxError("truncated field value", data=p, offset=end)
                (result[key],) = unpack(p, o - size)
                continue
            if kind == 0x46:  # F: a nested table, without the reader's call
                if o + 5 > end:
                    raise FrameSyntaxError("truncated nested table", data=p, offset=o + 1)
                result[key], o = self.decode_table(p, o + 1, end)
                continue
            if kind == 0x74:  # t
                o += 2
                if o > end:
                    raise FrameSyntaxError("truncated field value", data=p, offset=end)
                result[key] = p[o - 1] != 0
                continue
            if kind == 0x41:  # A
                if o + 5 > end:
                    raise FrameSyntaxError("truncated nested array", data=p, offset=o + 1)
                result[key], o = self.decode_array(p, o + 1, end)
                continue
            reader = readers[kind]
            if reader is None:
                raise FrameSyntaxError(f"unknown field type {bytes([kind])!r}", data=p, offset=o)
            result[key], o = reader(p, o + 1, end)
        if o != end:
            raise FrameSyntaxError("field-table entry overruns the table", data=p, offset=end)
        return result, o

    def decode_array(self, p: bytes, o: int, limit: int = -1) -> tuple[list[Any], int]:
        (size,) = _U32.unpack_from(p, o)
        o += 4
        end = o + size
        if end > (len(p) if limit < 0 else limit):
            raise FrameSyntaxError("field array longer than its frame", data=p, offset=o - 4)
        items: list[Any] = []
        append, plain, readers, unpack_u32 = items.append, self._plain, self._readers, _U32.unpack_from
        while o < end:
            kind = p[o]
            fixed = plain[kind]
            if fixed is not None:
                size, unpack = fixed
                o += 1 + size
                if o > end:
                    raise FrameSyntaxError("truncated field value", data=p, offset=end)
                append(unpack(p, o - size)[0])
                continue
            if kind == 0x53:  # S
                (n,) = unpack_u32(p, o + 1)
                o += 5 + n
                if o > end:
                    raise FrameSyntaxError("truncated long string", data=p, offset=end)
                append(p[o - n : o].decode("utf-8", "surrogateescape"))
                continue
            if kind == 0x46:  # F
                if o + 5 > end:
                    raise FrameSyntaxError("truncated nested table", data=p, offset=o + 1)
                value, o = self.decode_table(p, o + 1, end)
                append(value)
                continue
            reader = readers[kind]
            if reader is None:
                raise FrameSyntaxError(f"unknown field type {bytes([kind])!r}", data=p, offset=o)
            value, o = reader(p, o + 1, end)
            append(value)
        if o != end:
            raise FrameSyntaxError("field-array item overruns the array", data=p, offset=end)
        return items, o

    def decode_value(self, p: bytes, o: int, end: int) -> tuple[Any, int]:
        """One field value (type octet first) at `o`, ending by `end`: (value, next offset)."""
        reader = self._readers[p[o]]
        if reader is None:
            raise FrameSyntaxError(f"unknown field type {bytes([p[o]])!r}", data=p, offset=o)
        return reader(p, o + 1, end)

    def _value_readers(self) -> list[Reader | None]:
        """type octet -> reader of the value after it; fixed sizes from the declarations."""
        readers: list[Reader | None] = [None] * 256
        for code, fixed in self.fixed.items():
            convert = {0x74: _truth, 0x54: timestamp_from_wire}.get(code)  # t, T
            readers[code] = _fixed_reader(fixed, convert)
        readers[0x53] = _long_string_reader(decode_text)  # S
        if self.x_is_bytes:
            readers[0x78] = _long_string_reader(None)  # x: the octets as they are
        if self.s_is_shortstr:
            readers[0x73] = _short_string_reader  # s in the 0-9-1 grammar
        readers[0x46] = self._nested(self.decode_table, "truncated nested table")  # F
        readers[0x41] = self._nested(self.decode_array, "truncated nested array")  # A
        readers[0x56] = _void_reader  # V
        readers[0x44] = _decimal_reader  # D
        return readers

    @staticmethod
    def _nested(decode: Callable[[bytes, int, int], tuple[Any, int]], what: str) -> Reader:
        def read(p: bytes, o: int, end: int) -> tuple[Any, int]:
            if o + 4 > end:
                raise FrameSyntaxError(what, data=p, offset=o)
            return decode(p, o, end)

        return read

    # -- encoding ------------------------------------------------------------------
    def encode_table(self, table: Any) -> bytes:
        if not table:
            return b"\x00\x00\x00\x00"
        pieces: list[bytes] = []
        append = pieces.append
        by_class, names = self._by_class, self._names
        for key, value in table.items():
            name = names.get(key) if key.__class__ is str else None
            append(name if name is not None else self._name(key))
            encoder = by_class.get(value.__class__)
            append(encoder(value) if encoder is not None else self.encode_value(value))
        body = b"".join(pieces)
        return _U32.pack(len(body)) + body

    def _name(self, key: Any) -> bytes:
        """A field name as a short string (length octet + octets); str names are remembered:
        header names repeat from message to message (`_names`, at most `NAMES_KEPT`)."""
        raw = key.encode("utf-8", "surrogateescape") if key.__class__ is str else bytes(key)
        if len(raw) > 255:
            raise EncodeError(f"field name of {len(raw)} octets exceeds 255")
        name = _LENGTH_OCTET[len(raw)] + raw
        if key.__class__ is str:
            if len(self._names) >= NAMES_KEPT:
                self._names.clear()
            self._names[key] = name
        return name

    def encode_array(self, items: Any) -> bytes:
        by_class = self._by_class
        body = b"".join(
            [e(v) if (e := by_class.get(v.__class__)) is not None else self.encode_value(v) for v in items]
        )
        return _U32.pack(len(body)) + body

    def encode_value(self, value: Any) -> bytes:
        """Type octet + encoded value; the code comes from `codec.fields.infer_kind`.

        The general path: `_by_class` holds exact-class shortcuts for the common Python
        types, each checked against this function by the property tests.
        """
        kind = infer_kind(value, self.dialect)
        raw = value.value if isinstance(value, Typed) else value
        code = kind[0]
        fixed = self.fixed.get(code)
        declared = FIELD_TYPES[self.dialect].get(kind)
        if declared is None:
            raise EncodeError(f"type code {kind!r} is not part of the {self.dialect.value} dialect")
        wire = value_to_wire(declared[0], raw)
        if fixed is not None:
            try:
                return kind + fixed.pack(wire)
            except struct.error as exc:
                raise EncodeError(f"value {raw!r} does not fit type {kind!r}: {exc}") from None
        if code == 0x53 or code == 0x78:  # S, x
            data: bytes = wire
            return kind + _U32.pack(len(data)) + data
        if code == 0x46:
            return kind + self.encode_table(raw)
        if code == 0x41:
            return kind + self.encode_array(raw)
        if code == 0x56:
            return kind
        if code == 0x44:
            return kind + _DECIMAL.pack(wire["scale"], wire["mantissa"])
        if code == 0x73 and self.s_is_shortstr:
            if len(wire) > 255:
                raise EncodeError("short string over 255 octets")
            short: bytes = wire
            return kind + bytes((len(short),)) + short
        raise EncodeError(f"type code {kind!r} is not part of the {self.dialect.value} dialect")

    def _class_encoders(self) -> dict[type, Callable[[Any], bytes]]:
        """Exact-class shortcuts for the common types (pika's technique: check the common
        types first, once). Everything else goes through `encode_value`."""
        int_codes = [(kind, low, high, struct.Struct(FIELD_TYPES[self.dialect][kind][1].fmtstr))
                     for kind, low, high in INTEGER_CODES[self.dialect]]
        str_kind = b"S"

        def enc_str(v: str) -> bytes:
            raw = v.encode("utf-8", "surrogateescape")
            return str_kind + _U32.pack(len(raw)) + raw

        first_kind, first_low, first_high, first_packer = int_codes[0]
        small = {v: first_kind + first_packer.pack(v) for v in range(first_low, first_high + 1)}

        def enc_int(v: int) -> bytes:
            hit = small.get(v)
            if hit is not None:
                return hit
            for kind, low, high, packer in int_codes:
                if low <= v <= high:
                    return kind + packer.pack(v)
            return self.encode_value(v)  # raises the range error

        bytes_kind = self._bytes_kind

        def enc_bytes(v: bytes | bytearray) -> bytes:
            return bytes_kind + _U32.pack(len(v)) + v

        def enc_decimal(v: _decimal.Decimal) -> bytes:
            return b"D" + _DECIMAL.pack(*decimal_to_wire(v))

        def enc_datetime(v: _dt.datetime) -> bytes:
            return b"T" + _U64.pack(timestamp_to_wire(v))

        return {
            str: enc_str,
            int: enc_int,
            bool: lambda v: b"t\x01" if v else b"t\x00",
            dict: lambda v: b"F" + self.encode_table(v),
            list: lambda v: b"A" + self.encode_array(v),
            bytes: enc_bytes,
            bytearray: enc_bytes,
            _decimal.Decimal: enc_decimal,
            _dt.datetime: enc_datetime,
            type(None): lambda v: b"V",
            float: lambda v: b"d" + _DOUBLE.pack(v),
        }


TABLE_CODECS = {dialect: TableCodec(dialect) for dialect in Dialect}
RABBITMQ_TABLES = TABLE_CODECS[Dialect.RABBITMQ]

__all__ = ["TABLE_CODECS", "RABBITMQ_TABLES", "TableCodec", "Timestamp", "Decoder", "Encoder"]
