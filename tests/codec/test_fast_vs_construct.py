"""The generated fast path and the construct path agree on valid, malformed and truncated input.

Same value or same rejection (docs/design.md decision 1). The fast decoders are called directly
here, without the reader's fallback to the construct path.
"""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codec import CodecError
from codec import construct_path as cp
from codec._generated import DECODERS, decode_properties
from codec.constants import Dialect
from codec.fast_tables import TABLE_CODECS
from codec.fields import FIELD_TABLE
from codec.frames import encode_header_payload, encode_method_payload
from codec.spec import ILLEGAL_PROPERTY_FLAGS
from tests.codec import strategies as s

REJECTED = "rejected"
FAST_ERRORS = (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError, KeyError, CodecError)


def fast_method(payload: bytes) -> Any:
    try:
        (index,) = struct.unpack_from(">I", payload)
        method, end = DECODERS[index](payload, 4, TABLE_CODECS[Dialect.RABBITMQ].decode_table)
    except FAST_ERRORS:
        return REJECTED
    return method if end == len(payload) else REJECTED


def slow_method(payload: bytes) -> Any:
    try:
        return cp.decode_method_payload(payload)
    except CodecError:
        return REJECTED


def fast_header(payload: bytes) -> Any:
    try:
        class_id, weight, size, flags = struct.unpack_from(">HHQH", payload)
        if flags & ILLEGAL_PROPERTY_FLAGS:
            return REJECTED
        props, end = decode_properties(payload, 14, flags, TABLE_CODECS[Dialect.RABBITMQ].decode_table)
    except FAST_ERRORS:
        return REJECTED
    return (class_id, weight, size, props) if end == len(payload) else REJECTED


def slow_header(payload: bytes) -> Any:
    try:
        return cp.decode_header_payload(payload)
    except CodecError:
        return REJECTED


def same(a: Any, b: Any) -> bool:
    """Equal, or equal up to NaN (a mutated double can become NaN, which != itself)."""
    return bool(a == b) or repr(a) == repr(b)


def mutations(valid: bytes) -> st.SearchStrategy[bytes]:
    """Truncations, extensions, and byte flips of a valid payload."""
    n = len(valid)
    return st.one_of(
        st.integers(0, max(n - 1, 0)).map(lambda i: valid[:i]),
        st.binary(min_size=1, max_size=8).map(lambda extra: valid + extra),
        st.tuples(st.integers(0, max(n - 1, 0)), st.integers(0, 255)).map(
            lambda t: valid[: t[0]] + bytes([t[1]]) + valid[t[0] + 1 :] if n else valid
        ),
    )


@settings(max_examples=600, deadline=None)
@given(data=st.data())
def test_fast_method_decoder_matches_construct_on_mutated_input(data: st.DataObject) -> None:
    method = data.draw(s.any_method)
    payload = data.draw(mutations(encode_method_payload(method)))
    assert same(fast_method(payload), slow_method(payload))


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=64).map(lambda b: b"\x00\x3c\x00\x50" + b))
def test_fast_method_decoder_matches_construct_on_random_bytes(payload: bytes) -> None:
    assert same(fast_method(payload), slow_method(payload))


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_fast_header_decoder_matches_construct_on_mutated_input(data: st.DataObject) -> None:
    props = data.draw(s.properties)
    payload = data.draw(mutations(encode_header_payload(data.draw(st.integers(0, 2**64 - 1)), props)))
    if len(payload) >= 2 and payload[:2] != b"\x00\x3c":
        return  # non-basic classes are the assembler's 505, not a decoding question
    assert same(fast_header(payload), slow_header(payload))


@settings(max_examples=400, deadline=None)
@given(data=st.data(), dialect=st.sampled_from(list(Dialect)))
def test_fast_table_decoder_matches_construct_on_mutated_input(data: st.DataObject, dialect: Dialect) -> None:
    wire = data.draw(mutations(TABLE_CODECS[dialect].encode_table(data.draw(s.tables(dialect)))))
    try:
        table, end = TABLE_CODECS[dialect].decode_table(wire, 0)
        fast: Any = table if end == len(wire) else REJECTED
    except FAST_ERRORS:
        fast = REJECTED
    try:
        import io

        stream = io.BytesIO(wire)
        slow: Any = FIELD_TABLE[dialect].parse_stream(stream)
        if stream.tell() != len(wire):
            slow = REJECTED
    except Exception:
        slow = REJECTED
    assert same(fast, slow)


def test_truncated_last_table_entry_is_rejected_not_dropped() -> None:
    """The construct pitfall of docs/design.md: GreedyRange in Prefixed drops a partial entry."""
    wire = TABLE_CODECS[Dialect.RABBITMQ].encode_table({"a": 1, "b": "text"})
    short_prefix = struct.pack(">I", len(wire) - 4 - 2) + wire[4:-2]
    assert fast_method(b"\x00\x3c\x00\x14" + b"\x00\x00\x01q\x00\x00" + short_prefix) == REJECTED
    try:
        TABLE_CODECS[Dialect.RABBITMQ].decode_table(short_prefix, 0)
        raise AssertionError("fast path accepted a truncated entry")
    except CodecError:
        pass
    try:
        FIELD_TABLE[Dialect.RABBITMQ].parse(short_prefix)
        raise AssertionError("construct path accepted a truncated entry")
    except Exception as exc:
        assert "dropped" not in str(exc)


def test_remembered_field_names_stay_exact_and_bounded() -> None:
    """The encoder remembers encoded field names (they repeat across messages): the bytes are the
    construct path's, the memory is bounded, and a name over 255 octets is refused every time."""
    import pytest

    from codec.errors import EncodeError
    from codec.fast_tables import NAMES_KEPT, TableCodec

    fresh = TableCodec(Dialect.RABBITMQ)
    for i in range(NAMES_KEPT + 10):
        table = {f"k{i}": i, "x-death": "again"}
        assert fresh.encode_table(table) == FIELD_TABLE[Dialect.RABBITMQ].build(table)
    assert len(fresh._names) <= NAMES_KEPT
    for _ in range(2):
        with pytest.raises(EncodeError, match="exceeds 255"):
            fresh.encode_table({"n" * 256: 1})
    assert fresh.encode_table({b"raw": 1}) == FIELD_TABLE[Dialect.RABBITMQ].build({"raw": 1})
