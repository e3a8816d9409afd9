"""WireProperties: decoded properties that keep their octets (codec/wire_properties.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codec import BasicProperties, FrameReader, HeaderFrame, Typed, encode_header
from codec.frames import encode_header_payload
from codec.wire_properties import WireProperties, decode_image, headers_table, table_entries
from tests.codec.strategies import field_name, typed_field_values, typed_tables


def read_back(properties: BasicProperties) -> WireProperties:
    reader = FrameReader(frame_max=0)
    reader.receive_data(encode_header(1, 0, properties))
    (frame,) = reader.frames()
    assert isinstance(frame, HeaderFrame) and isinstance(frame.properties, WireProperties)
    return frame.properties


@settings(max_examples=150)
@given(headers=typed_tables, content_type=st.none() | st.text(max_size=20))
def test_decoded_properties_encode_to_the_octets_they_came_in(headers: dict[str, Any],
                                                              content_type: str | None) -> None:
    sent = BasicProperties(content_type=content_type, headers=headers, priority=4)
    wire = read_back(sent)
    assert wire.raw == encode_header_payload(0, sent)[12:]
    assert encode_header_payload(0, wire) == encode_header_payload(0, sent)
    assert repr(decode_image(wire.raw)) == repr(wire)  # repr: NaN is not equal to itself


@settings(max_examples=100)
@given(headers=typed_tables, key=field_name, value=typed_field_values())
def test_replace_keeps_every_untouched_entry(headers: dict[str, Any], key: str, value: Any) -> None:
    wire = read_back(BasicProperties(headers=headers, app_id="a"))
    assert wire.headers is not None
    edited = wire._replace(headers={**wire.headers, key: value}, app_id=None)
    assert isinstance(edited, WireProperties) and edited.raw is not None and edited.app_id is None
    before = table_entries(headers_table(wire.raw or b"") or b"")
    after = table_entries(headers_table(edited.raw) or b"")
    assert {k: v for k, v in after.items() if k != key} == {k: v for k, v in before.items() if k != key}
    assert after[key] == encode_header_payload(0, BasicProperties(headers={key: value}))[12 + 2 + 4 + 1 + len(
        key.encode("utf-8", "surrogateescape")):]


def test_a_float_stays_a_float() -> None:
    """The issue's example: 1.32 sent as 'f' must not come back as the double 1.3200000524520874."""
    wire = read_back(BasicProperties(headers={"f": Typed(b"f", 1.32), "B": Typed(b"B", 7)}))
    assert table_entries(headers_table(wire.raw or b"") or b"") == {"f": b"f?\xa8\xf5\xc3", "B": b"B\x07"}
