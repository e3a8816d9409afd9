"""The edge faults (reference_broker/faults_edges.py): each changes a message, a level or a text
only at its edge, and keeps every other octet."""

from __future__ import annotations

import decimal

from codec import BasicProperties, Typed
from codec.frames import encode_header_payload
from codec.wire_properties import WireProperties, decode_image, headers_table, table_entries
from reference_broker.faults import BY_NAME

OTHERS = {"u": Typed(b"u", 7), "f": Typed(b"f", 1.5)}  # entries no fault touches


def received(props: BasicProperties) -> WireProperties:
    return decode_image(encode_header_payload(0, props)[12:])


def delivered(fault: str, props: BasicProperties) -> dict[str, bytes]:
    policy = BY_NAME[fault].substitutes["delivered_properties"]
    out = policy(received(props))
    table = headers_table(encode_header_payload(0, out)[12:])
    return {**table_entries(table or bytes(4)), "timestamp": repr(out.timestamp).encode(),
            "app_id": (out.app_id or "").encode(), "mode": repr(out.delivery_mode).encode()}


def entry(fault: str, value: Typed) -> bytes:
    return delivered(fault, BasicProperties(headers={**OTHERS, "v": value}))["v"]


def test_each_fault_changes_only_its_edge() -> None:
    assert delivered("timestamp_signed", BasicProperties(timestamp=2**63 - 1))["timestamp"] == b"9223372036854775807"
    assert delivered("timestamp_signed", BasicProperties(timestamp=2**63))["timestamp"] == b"9223372036854775807"
    assert len(delivered("shortstr_cut_at_127", BasicProperties(app_id="a" * 127))["app_id"]) == 127
    assert len(delivered("shortstr_cut_at_127", BasicProperties(app_id="a" * 128))["app_id"]) == 127
    assert entry("empty_longstr_as_void", Typed(b"S", b"")) == b"V"
    assert entry("empty_longstr_as_void", Typed(b"S", b"a")) == b"S\x00\x00\x00\x01a"
    assert entry("decimal_normalised", Typed(b"D", decimal.Decimal("1.50"))) == b"D\x01\x00\x00\x00\x0f"
    assert entry("decimal_normalised", Typed(b"D", decimal.Decimal("1.5"))) == b"D\x01\x00\x00\x00\x0f"
    assert entry("decimal_normalised", Typed(b"D", decimal.Decimal(0).scaleb(-3))) == b"D\x00" + bytes(4)
    assert entry("subnormal_flushed", Typed(b"f", 2.0**-149)) == b"f" + bytes(4)
    assert entry("subnormal_flushed", Typed(b"d", 5e-324)) == b"d" + bytes(8)
    assert entry("subnormal_flushed", Typed(b"f", 2.0**-126)) == b"f\x00\x80\x00\x00"  # the smallest normal stays
    assert delivered("delivery_mode_clamped", BasicProperties(delivery_mode=3))["mode"] == b"2"
    assert delivered("delivery_mode_clamped", BasicProperties(delivery_mode=0))["mode"] == b"0"


def test_the_other_entries_keep_their_octets() -> None:
    sent = table_entries(headers_table(encode_header_payload(0, BasicProperties(headers=OTHERS))[12:]) or bytes(4))
    for fault in ("empty_longstr_as_void", "decimal_normalised", "subnormal_flushed"):
        got = delivered(fault, BasicProperties(headers={**OTHERS, "v": Typed(b"S", b"")}))
        assert {k: got[k] for k in OTHERS} == sent, fault


def test_a_4x_broker_with_the_refusal_fault_refuses_like_3x() -> None:
    refused = BY_NAME["odd_delivery_mode_refused"].substitutes["delivery_mode_refused"]
    assert [m for m in range(256) if refused(m, "4.3")] == [0, *range(3, 256)]


def test_the_rule_refuses_odd_modes_only_as_3x_does() -> None:
    from reference_broker.core.rules import Rules

    refused = Rules().delivery_mode_refused
    for emulates in ("3.10", "3.12"):
        assert [m for m in range(256) if not refused(m, emulates)] == [1, 2]
    assert not any(refused(m, "4.3") for m in range(256))


def test_the_signed_tag_fault_changes_only_tags_above_2_63() -> None:
    named = BY_NAME["unknown_tag_named_signed"].substitutes["unknown_tag"]
    assert named(2**63 - 1, False).text.endswith("unknown delivery tag 9223372036854775807")
    assert named(2**64 - 1, False).text.endswith("unknown delivery tag -1")
