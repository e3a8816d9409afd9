"""Fast field-table and field-array codec, derived from `codec.fields.FIELD_TYPES`.

Rules: the struct format of every fixed-size type code is read from the construct
declaration (`FormatField.fmtstr`), so no wire fact is restated here; value conversion
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

Decoder = Callable[[bytes, int], tuple[dict[str, Any], int]]
Encoder = Callable[[Any], bytes]


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

    # -- decoding ------------------------------------------------------------------
    def decode_table(self, p: bytes, o: int, limit: int = -1) -> tuple[dict[str, Any], int]:
        (size,) = _U32.unpack_from(p, o)
        o += 4
        end = o + size
        if end > (len(p) if limit < 0 else limit):
            raise FrameSyntaxError("field table longer than its frame", data=p, offset=o - 4)
        result: dict[str, Any] = {}
        fixed_structs = self.fixed
        while o < end:
            n = p[o]
            key = p[o + 1 : o + 1 + n].decode("utf-8", "surrogateescape")
            o += 1 + n
            if o >= end:
                raise FrameSyntaxError("truncated field-table entry", data=p, offset=o)
            kind = p[o]
            # Inline the two commonest kinds (long string, plain fixed-size number): a
            # method call per entry is a third of the table time (py-amqp does the same).
            if kind == 0x53:
                (n,) = _U32.unpack_from(p, o + 1)
                o += 5 + n
                if o > end:
                    raise FrameSyntaxError("truncated long string", data=p, offset=end)
                result[key] = p[o - n : o].decode("utf-8", "surrogateescape")
                continue
            fixed = fixed_structs.get(kind)
            if fixed is not None and kind != 0x74 and kind != 0x54:
                o += 1 + fixed.size
                if o > end:
                    raise FrameSyntaxError("truncated field value", data=p, offset=end)
                (result[key],) = fixed.unpack_from(p, o - fixed.size)
                continue
            result[key], o = self._value(p, o, end)
        if o != end:
            raise FrameSyntaxError("field-table entry overruns the table", data=p, offset=end)
        return result, o

    def decode_array(self, p: bytes, o: int, limit: int = -1) -> tuple[list[Any], int]:
        (size,) = _U32.unpack_from(p, o)
        o += 4
        end = o + size
        if end > (len(p) if limit < 0 else limit):
            raise FrameSyntaxError("field array longer than its frame", data=p, offset=o - 4)
        items = []
        while o < end:
            value, o = self._value(p, o, end)
            items.append(value)
        if o != end:
            raise FrameSyntaxError("field-array item overruns the array", data=p, offset=end)
        return items, o

    def decode_value(self, p: bytes, o: int, end: int) -> tuple[Any, int]:
        """One field value (type octet first) at `o`, ending by `end`: (value, next offset)."""
        return self._value(p, o, end)

    def _value(self, p: bytes, o: int, end: int) -> tuple[Any, int]:
        kind = p[o]
        o += 1
        fixed = self.fixed.get(kind)
        if fixed is not None:
            if o + fixed.size > end:
                raise FrameSyntaxError("truncated field value", data=p, offset=o)
            (value,) = fixed.unpack_from(p, o)
            o += fixed.size
            if kind == 0x74:  # t
                return value != 0, o
            if kind == 0x54:  # T
                return timestamp_from_wire(value), o
            return value, o
        if kind == 0x53 or (kind == 0x78 and self.x_is_bytes):  # S, x
            if o + 4 > end:
                raise FrameSyntaxError("truncated long string", data=p, offset=o)
            (n,) = _U32.unpack_from(p, o)
            raw = p[o + 4 : o + 4 + n]
            o += 4 + n
            if o > end:
                raise FrameSyntaxError("truncated long string", data=p, offset=end)
            return (decode_text(raw) if kind == 0x53 else raw), o
        if kind == 0x46:  # F
            if o + 4 > end:
                raise FrameSyntaxError("truncated nested table", data=p, offset=o)
            return self.decode_table(p, o, end)
        if kind == 0x41:  # A
            if o + 4 > end:
                raise FrameSyntaxError("truncated nested array", data=p, offset=o)
            return self.decode_array(p, o, end)
        if kind == 0x56:  # V
            return None, o
        if kind == 0x44:  # D
            if o + 5 > end:
                raise FrameSyntaxError("truncated decimal", data=p, offset=o)
            scale, mantissa = _DECIMAL.unpack_from(p, o)
            return decimal_from_wire(scale, mantissa), o + 5
        if kind == 0x73 and self.s_is_shortstr:  # s in the 0-9-1 grammar
            if o >= end:
                raise FrameSyntaxError("truncated short string", data=p, offset=o)
            n = p[o]
            raw = p[o + 1 : o + 1 + n]
            o += 1 + n
            if o > end:
                raise FrameSyntaxError("truncated short string", data=p, offset=end)
            return decode_text(raw), o
        raise FrameSyntaxError(f"unknown field type {bytes([kind])!r}", data=p, offset=o - 1)

    # -- encoding ------------------------------------------------------------------
    def encode_table(self, table: Any) -> bytes:
        if not table:
            return b"\x00\x00\x00\x00"
        pieces: list[bytes] = []
        append = pieces.append
        by_class = self._by_class
        for key, value in table.items():
            raw = key.encode("utf-8", "surrogateescape") if key.__class__ is str else bytes(key)
            if len(raw) > 255:
                raise EncodeError(f"field name of {len(raw)} octets exceeds 255")
            append(_LENGTH_OCTET[len(raw)])
            append(raw)
            encoder = by_class.get(value.__class__)
            append(encoder(value) if encoder is not None else self.encode_value(value))
        body = b"".join(pieces)
        return _U32.pack(len(body)) + body

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
