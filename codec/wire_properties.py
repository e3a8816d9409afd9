"""Content properties that keep the octets they arrived in (message pass-through).

Rules:
- A decoded field table loses its type codes: `1.32` sent as `f` (float) decodes to a Python
  float that re-encodes as `d` (double), an unsigned byte `B` 7 re-encodes as signed `b`, an
  `I` 5 as `b`. A broker must deliver the properties as published (RabbitMQ keeps the content
  header's binary, `#content.properties_bin`, and re-sends it unchanged), so decoding keeps
  the wire image next to the decoded values: `WireProperties.raw` is the property flags and
  property list exactly as received (a content-header payload from octet 12 on).
- Encoders send `raw` instead of re-encoding (`codec.frames.encode_header_payload`).
- `_replace` (a copy with changes, the only way the broker edits properties) re-encodes only
  what changed: properties named in the change are encoded afresh; a replaced headers table
  keeps the received octets of every entry whose value is the same object as before (the
  copy-and-edit idiom `dict(old)`), so untouched entries keep their type codes, as
  RabbitMQ's typed tables do when it adds `x-death` or `x-delivery-count`.
- The decoded view is what compares: a `WireProperties` equals the `BasicProperties` with
  the same values (the wire image is evidence, not identity).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from codec._generated import BasicProperties, decode_properties, encode_properties
from codec.errors import FrameSyntaxError
from codec.fast_tables import RABBITMQ_TABLES, TableCodec

_FLAGS = struct.Struct(">H")
_U32 = struct.Struct(">I")
_CONTENT_TYPE, _CONTENT_ENCODING, _HEADERS = 0x8000, 0x4000, 0x2000


class WireProperties(BasicProperties):
    """`BasicProperties` as received, with `raw`: their flags and property list octets."""

    # A tuple subclass cannot declare slots; `raw` lives in the instance dict. The class
    # default covers instances made by tuple machinery (`_make`): they are encoded afresh.
    raw: bytes | None = None

    @classmethod
    def received(cls, properties: BasicProperties, raw: bytes) -> WireProperties:
        """`properties` decoded from `raw` (flags + property list, as on the wire)."""
        wire = tuple.__new__(cls, properties)
        wire.raw = raw
        return wire

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BasicProperties) and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((BasicProperties.__name__, tuple.__hash__(self)))

    def __repr__(self) -> str:
        return "WireProperties(" + ", ".join(f"{k}={v!r}" for k, v in self.fields().items()) + ")"

    def _replace(self, **changes: Any) -> BasicProperties:  # type: ignore[override]
        plain = BasicProperties(**{**self.fields(), **changes})
        if self.raw is None:
            return plain
        old_headers, old_table = self.headers, headers_table(self.raw)

        def table_encoder(table: Mapping[str, Any]) -> bytes:
            if table is old_headers and old_table is not None:
                return old_table
            return splice_table(table, old_headers, old_table)

        flags, body = encode_properties(plain, table_encoder)
        return WireProperties.received(plain, _FLAGS.pack(flags) + body)


def decode_image(raw: bytes, codec: TableCodec = RABBITMQ_TABLES) -> WireProperties:
    """Properties from their image (flags + property list), e.g. as a store kept them."""
    (flags,) = _FLAGS.unpack_from(raw)
    properties, end = decode_properties(raw, 2, flags, codec.decode_table)
    if end != len(raw):
        raise FrameSyntaxError("octets after the property list", data=raw, offset=end)
    return WireProperties.received(properties, raw)


def _headers_span(raw: bytes) -> tuple[int, int] | None:
    """(start, end) of the headers table (length prefix included) inside an image, or None."""
    (flags,) = _FLAGS.unpack_from(raw)
    o = 2
    for flag in (_CONTENT_TYPE, _CONTENT_ENCODING):
        if flags & flag:
            o += 1 + raw[o]
    if not flags & _HEADERS:
        return None
    (size,) = _U32.unpack_from(raw, o)
    return o, o + 4 + size


def headers_table(raw: bytes) -> bytes | None:
    """The headers table (length prefix included) inside a property image, or None."""
    span = _headers_span(raw)
    return None if span is None else raw[span[0] : span[1]]


def headers_in_key_order(raw: bytes, codec: TableCodec = RABBITMQ_TABLES) -> bytes:
    """The image with its top-level headers entries in key order (octet-wise), a repeated key
    once (its first entry), each entry's octets kept: what RabbitMQ 4.x delivers, since it
    re-encodes the typed table after `lists:usort` by key (mc_amqpl:protocol_state, MSG-01)."""
    span = _headers_span(raw)
    if span is None:
        return raw
    table = raw[span[0] : span[1]]
    first: dict[bytes, bytes] = {}
    for name, value in _entry_list(table, codec):
        first.setdefault(name, value)
    body = b"".join(bytes((len(k),)) + k + first[k] for k in sorted(first))
    return raw[: span[0]] + _U32.pack(len(body)) + body + raw[span[1] :]


def _entry_list(table: bytes, codec: TableCodec) -> list[tuple[bytes, bytes]]:
    """(field name octets, value octets with the type octet) of every entry, in order."""
    entries: list[tuple[bytes, bytes]] = []
    end = 4 + _U32.unpack_from(table)[0]
    o = 4
    while o < end:
        name_end = o + 1 + table[o]
        _value, next_entry = codec.decode_value(table, name_end, end)
        entries.append((table[o + 1 : name_end], table[name_end:next_entry]))
        o = next_entry
    if o != end:
        raise FrameSyntaxError("field-table entry overruns the table", data=table, offset=end)
    return entries


def table_entries(table: bytes, codec: TableCodec = RABBITMQ_TABLES) -> dict[str, bytes]:
    """Field name -> its value's octets (type octet included) in an encoded table."""
    return {k.decode("utf-8", "surrogateescape"): v for k, v in _entry_list(table, codec)}


def splice_table(table: Mapping[str, Any], old: Mapping[str, Any] | None, old_table: bytes | None,
                 codec: TableCodec = RABBITMQ_TABLES) -> bytes:
    """Encode `table`, reusing the received octets of every entry `old` holds unchanged."""
    kept = table_entries(old_table, codec) if old and old_table is not None else {}
    pieces: list[bytes] = []
    for key, value in table.items():
        name = key.encode("utf-8", "surrogateescape")
        if old is not None and key in kept and old.get(key) is value:
            pieces += (bytes((len(name),)), name, kept[key])
        else:
            pieces.append(codec.encode_table({key: value})[4:])
    body = b"".join(pieces)
    return _U32.pack(len(body)) + body


__all__ = ["WireProperties", "decode_image", "headers_in_key_order", "headers_table", "splice_table", "table_entries"]
