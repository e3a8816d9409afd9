"""Round trips for every method, the basic properties and field tables, on both codec paths."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codec import (
    METHOD_CLASSES,
    BasicProperties,
    BodyFrame,
    ContentAssembler,
    FrameReader,
    MethodFrame,
    encode_content,
)
from codec import construct_path as cp
from codec.constants import Dialect
from codec.fast_tables import TABLE_CODECS
from codec.fields import FIELD_TABLE
from codec.frames import encode_header_payload, encode_method, encode_method_payload
from tests.codec import strategies as s

ALL_METHODS = sorted(METHOD_CLASSES)


@pytest.mark.parametrize("index", ALL_METHODS, ids=[METHOD_CLASSES[i].NAME for i in ALL_METHODS])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_method_roundtrip_every_method(index: int, data: st.DataObject) -> None:
    method = data.draw(s.method_of(index))
    payload = encode_method_payload(method)
    assert payload == cp.encode_method_payload(method)
    assert cp.decode_method_payload(payload) == method
    reader = FrameReader(frame_max=0)
    reader.receive_data(encode_method(7, method))
    assert reader.frames() == [MethodFrame(7, method)]


@settings(max_examples=200, deadline=None)
@given(props=s.properties, size=st.integers(0, 2**64 - 1))
def test_properties_roundtrip(props: BasicProperties, size: int) -> None:
    payload = encode_header_payload(size, props)
    assert payload == cp.encode_header_payload(size, props)
    assert cp.decode_header_payload(payload) == (60, 0, size, props)


@pytest.mark.parametrize("dialect", list(Dialect))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_field_table_roundtrip_both_paths(dialect: Dialect, data: st.DataObject) -> None:
    table = data.draw(s.tables(dialect))
    fast = TABLE_CODECS[dialect]
    wire = fast.encode_table(table)
    assert wire == FIELD_TABLE[dialect].build(table)
    assert fast.decode_table(wire, 0) == (table, len(wire))
    assert FIELD_TABLE[dialect].parse(wire) == table


@settings(max_examples=100, deadline=None)
@given(props=s.properties, body=st.binary(max_size=3000), frame_max=st.sampled_from([0, 4096, 520, 9]))
def test_content_roundtrip_split_bodies(props: BasicProperties, body: bytes, frame_max: int) -> None:
    from codec import BasicPublish, Command

    method = BasicPublish(exchange="x", routing_key="k", mandatory=True)
    wire = encode_content(3, method, props, body, frame_max=frame_max)
    reader, assembler = FrameReader(frame_max=0), ContentAssembler()
    reader.receive_data(wire)
    frames = reader.frames()
    out = [c for f in frames if (c := assembler.feed(f)) is not None]
    assert out == [Command(3, method, props, body)]
    bodies = [f for f in frames if isinstance(f, BodyFrame)]
    assert sum(len(f.payload) for f in bodies) == len(body)
    if frame_max:
        assert all(len(f.payload) <= frame_max - 8 for f in bodies)


def test_methods_compare_by_class_not_only_values() -> None:
    from codec import ConfirmSelectOk, TxSelectOk

    assert ConfirmSelectOk() != TxSelectOk()
    assert hash(ConfirmSelectOk()) != hash(TxSelectOk())
    assert ConfirmSelectOk() == ConfirmSelectOk()
