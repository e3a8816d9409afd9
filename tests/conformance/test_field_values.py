"""The drawn values of MSG-01 (conformance/suite/steps/field_values.py): every drawn property set
encodes and decodes to the same octets, the extreme sets hold every boundary, a failing set is
reduced to the part that fails, and a failure shows long values by their length."""

from __future__ import annotations

from hypothesis import given, settings

from codec import BasicProperties, Typed
from codec.frames import encode_header_payload
from codec.wire_properties import decode_image, headers_table, table_entries
from conformance.suite.steps.field_values import extremes, fits, property_sets, reduced, shown


@settings(max_examples=60, deadline=None)
@given(property_sets(rabbitmq=True, user="guest", any_mode=True))
def test_a_drawn_property_set_encodes_and_decodes_to_the_same_octets(props: BasicProperties) -> None:
    image = encode_header_payload(0, props)[12:]
    assert decode_image(image).raw == image
    assert fits(props, 131072)


@settings(max_examples=30, deadline=None)
@given(property_sets(rabbitmq=False, user="guest", any_mode=False))
def test_the_spec_dialect_draws_no_rabbitmq_codes_and_modes_1_or_2(props: BasicProperties) -> None:
    assert props.delivery_mode in (None, 1, 2)
    table = headers_table(encode_header_payload(0, props)[12:])
    codes = {octets[:1] for octets in table_entries(table).values()} if table else set()
    assert not codes & {b"s", b"l", b"x"}


def test_the_extreme_sets_hold_each_end_of_every_range() -> None:
    least, most = extremes(rabbitmq=True, user="guest", any_mode=True)
    assert (least.timestamp, most.timestamp) == (0, 2**64 - 1)
    assert (least.delivery_mode, most.delivery_mode, least.priority, most.priority) == (0, 255, 0, 255)
    assert least.message_id == "" and len(most.message_id.encode("utf-8", "surrogateescape")) == 255
    low = table_entries(headers_table(encode_header_payload(0, least)[12:]) or bytes(4))
    high = table_entries(headers_table(encode_header_payload(0, most)[12:]) or bytes(4))
    assert low["min-l"] == b"l\x80" + bytes(7) and high["max-T"] == b"T" + b"\xff" * 8
    assert high["D0"] == b"D\xff" + bytes(4) and high["D"] == b"D\xff" + b"\xff" * 4
    assert low["sub"] == b"f\x00\x00\x00\x01" and low[""] == b"V"
    assert "n" * 255 in (most.headers or {})
    assert extremes(rabbitmq=True, user="guest", any_mode=False)[1].delivery_mode == 2


def test_a_failing_set_is_reduced_to_the_entry_that_fails() -> None:
    props = BasicProperties(message_id="m", priority=9, headers={"a": Typed(b"I", 1), "bad": Typed(b"f", 0.5)})
    tries: list[BasicProperties] = []

    def fails(candidate: BasicProperties) -> bool:
        tries.append(candidate)
        return "bad" in (candidate.headers or {})

    assert reduced(props, fails) == BasicProperties(headers={"bad": Typed(b"f", 0.5)})
    assert len(tries) < 20


def test_long_values_are_shown_by_their_length() -> None:
    text = shown(BasicProperties(app_id="x" * 200, headers={"k": Typed(b"S", b"\x01" * 30)}))
    assert "<200 octets: 78 78" in text and "S:<30 octets: 01 01" in text and "x" * 30 not in text
