"""Named faults at the edges of a value's range: each changes what a message is delivered with
(the `delivered_properties` policy), whether it is taken, the level it waits at, how an unknown
delivery tag is named, how many deliveries a prefetch count allows, how a refused prefetch size is
named, which channel numbers open, which x-expires or length limit a queue takes, only for values at one end of
their range, so only a check that draws values across the whole range (MSG-01, MSG-03, PRI-01,
ACK-03, PC-12, QOS-01, QOS-02, ERR-04, QUEUE-07, LEN-01) can see them. Part of the table of
reference_broker/faults.py, which says what a fault is and how it is switched on.

Rules:
- A fault changes one property, or the top-level headers entries of one type, and keeps every
  other octet as received (`WireProperties._replace` re-encodes only what changed).
- Each is a bug a broker could have: a signed type where the protocol has an unsigned one, a
  length octet read as signed, a value normalised on the way, a float flushed to zero.
"""

from __future__ import annotations

import decimal
import struct
from collections.abc import Callable
from typing import Any

from codec import AmqpError, BasicProperties, ReplyCode, Typed
from codec.fields import decimal_from_wire, decode_text, encode_text
from codec.wire_properties import WireProperties, headers_table, table_entries
from reference_broker.core import texts
from reference_broker.core.state import QUORUM, Message, Queue
from reference_broker.fault_type import Fault

SHORTSTR_PROPERTIES = ("content_type", "content_encoding", "correlation_id", "reply_to", "expiration",
                       "message_id", "message_type", "user_id", "app_id", "cluster_id")
INT64_MAX = 2**63 - 1


def _timestamp_signed(props: BasicProperties) -> BasicProperties:
    """The timestamp kept as a signed 64-bit number: one of 2^63 or more is delivered as 2^63 - 1."""
    ts = props.timestamp
    return props._replace(timestamp=INT64_MAX) if isinstance(ts, int) and ts > INT64_MAX else props


def _shortstr_cut(props: BasicProperties) -> BasicProperties:
    """A short string's length octet read as signed: one over 127 octets is cut to 127."""
    changes: dict[str, Any] = {name: decode_text(encode_text(value)[:127]) for name in SHORTSTR_PROPERTIES
               if isinstance(value := getattr(props, name), str) and len(encode_text(value)) > 127}
    return props._replace(**changes) if changes else props


def _entries_changed(change: Callable[[bytes], Typed | None]) -> Callable[[BasicProperties], BasicProperties]:
    """A policy that replaces each top-level headers entry `change` gives a value for (by its
    octets, type octet first), keeping the others' octets."""
    def policy(props: BasicProperties) -> BasicProperties:
        raw = props.raw if isinstance(props, WireProperties) else None
        table = headers_table(raw) if raw is not None else None
        if table is None or props.headers is None:
            return props
        changed = {k: new for k, octets in table_entries(table).items() if (new := change(octets)) is not None}
        if not changed:
            return props
        headers: dict[str, Any] = {k: changed.get(k, v) for k, v in props.headers.items()}
        return props._replace(headers=headers)
    return policy


def _empty_longstr(octets: bytes) -> Typed | None:
    """An empty long string delivered as void."""
    return Typed(b"V", None) if octets == b"S\x00\x00\x00\x00" else None


def _decimal_normalised(octets: bytes) -> Typed | None:
    """A decimal's trailing zeros removed (scale 2, mantissa 150 -> scale 1, mantissa 15)."""
    if octets[:1] != b"D":
        return None
    scale, mantissa = struct.unpack(">BI", octets[1:6])
    if scale == 0 or mantissa % 10:
        return None
    while scale and not mantissa % 10:
        scale, mantissa = scale - 1, mantissa // 10
    value: decimal.Decimal = decimal_from_wire(scale, mantissa)
    return Typed(b"D", value)


FLOAT_LAYOUTS = {b"f": (">I", 23, 0xFF), b"d": (">Q", 52, 0x7FF)}  # word, fraction bits, exponent mask


def _subnormal_flushed(octets: bytes) -> Typed | None:
    """A subnormal float or double delivered as zero of its type."""
    kind = octets[:1]
    if kind not in FLOAT_LAYOUTS:
        return None
    word_format, fraction_bits, exponent_mask = FLOAT_LAYOUTS[kind]
    (word,) = struct.unpack(word_format, octets[1:])
    subnormal = (word >> fraction_bits) & exponent_mask == 0 and word & ((1 << fraction_bits) - 1) != 0
    return Typed(kind, 0.0) if subnormal else None


def _delivery_mode_clamped(props: BasicProperties) -> BasicProperties:
    """A delivery-mode above 2 delivered as 2."""
    mode = props.delivery_mode
    return props._replace(delivery_mode=2) if mode is not None and mode > 2 else props


def _zero_is_one_level(queue: Queue, message: Message, _emulates: str) -> int:
    """x-max-priority 0 is one level, as before 3.13.4, though the broker follows 4.x."""
    return queue.level(message, one_level_at_zero=True)


def _priority_signed(queue: Queue, message: Message, emulates: str) -> int:
    """A priority property read as a signed octet: 128..255 are negative, so they wait at level 0."""
    priority = message.properties.priority
    if priority is not None and priority >= 128 and queue.kind != QUORUM:
        return 0
    return queue.level(message, one_level_at_zero=emulates != "4.3")


def _tag_signed(tag: int, _multiple: bool) -> AmqpError:
    """An unknown delivery tag named as a signed 64-bit number: one above 2^63 - 1 comes out negative."""
    return AmqpError(ReplyCode.PRECONDITION_FAILED, texts.unknown_tag(tag - 2**64 if tag > INT64_MAX else tag),
                     scope="channel")


def _prefetch_signed(prefetch: int) -> int:
    """A prefetch count kept as a signed 16-bit number: one of 32768 or more is a negative window,
    so no delivery ever has room."""
    return prefetch - 2**16 if prefetch >= 2**15 else prefetch


def _size_signed(size: int) -> int:
    """A prefetch size read as a signed 32-bit number: one of 2^31 or more is named negative."""
    return size - 2**32 if size >= 2**31 else size


EDGE_FAULTS: tuple[Fault, ...] = (
    Fault("timestamp_signed", "messages", "MSG-01",
          "a timestamp property of 2^63 or more is delivered as 2^63 - 1 (kept as a signed 64-bit number)",
          {"delivered_properties": _timestamp_signed}),
    Fault("shortstr_cut_at_127", "messages", "MSG-01",
          "a short-string property over 127 octets is delivered cut to 127 (its length octet read as signed)",
          {"delivered_properties": _shortstr_cut}),
    Fault("empty_longstr_as_void", "messages", "MSG-01", "an empty long-string headers entry is delivered as void",
          {"delivered_properties": _entries_changed(_empty_longstr)}),
    Fault("decimal_normalised", "messages", "MSG-01",
          "a decimal headers entry loses its trailing zeros (scale and mantissa reduced)",
          {"delivered_properties": _entries_changed(_decimal_normalised)}),
    Fault("subnormal_flushed", "messages", "MSG-01", "a subnormal float or double headers entry is delivered as zero",
          {"delivered_properties": _entries_changed(_subnormal_flushed)}),
    Fault("delivery_mode_clamped", "messages", "MSG-03", "a delivery-mode above 2 is delivered as 2",
          {"delivered_properties": _delivery_mode_clamped}),
    Fault("unknown_tag_named_signed", "ack", "ACK-03",
          "an unknown delivery tag above 2^63 - 1 is named as a negative number (kept as signed 64 bits)",
          {"unknown_tag": _tag_signed}),
    Fault("max_message_size_off_by_one", "confirms", "PC-12",
          "a body of exactly max_message_size octets is refused 406 as too large (size >= max)",
          {"body_too_large": lambda size, limit: size >= limit}),
    Fault("max_priority_zero_one_level", "messages", "PRI-01",
          "x-max-priority 0 is one level (publish order), as before 3.13.4, though the broker follows 4.x",
          {"priority_level": _zero_is_one_level}),
    Fault("priority_read_as_signed", "messages", "PRI-01",
          "a priority of 128..255 is read as a signed octet and waits at level 0", {"priority_level": _priority_signed}),
    Fault("odd_delivery_mode_refused", "messages", "MSG-03",
          "a delivery-mode other than 1 or 2 is refused 406 as before 3.13, though the broker follows 4.x",
          {"delivery_mode_refused": lambda mode, _emulates: mode not in (1, 2)}),
    Fault("prefetch_count_signed", "qos", "QOS-02",
          "a prefetch count of 32768 or more allows no delivery (kept as a signed 16-bit number)",
          {"prefetch_window": _prefetch_signed}),
    Fault("prefetch_size_named_signed", "qos", "QOS-01",
          "a refused prefetch size of 2^31 or more is named as a negative number (read as signed 32 bits)",
          {"prefetch_size_named": _size_signed}),
    Fault("channel_number_signed", "errors", "ERR-04",
          "a channel.open on a channel numbered 32768 or more is refused 504 (the number kept as signed 16 bits)",
          {"channel_number_refused": lambda number: number >= 2**15}),
    Fault("expires_32_bit_timer", "queues", "QUEUE-07",
          "an x-expires above 2^32 - 1 ms (a 32-bit timer's limit, about 49.7 days) is refused as too large",
          {"expires_maximum": lambda: 2**32 - 1}),
    Fault("length_limit_signed_32", "limits", "LEN-01",
          "an x-max-length or x-max-length-bytes above 2^31 - 1 is refused as too large (the limit kept as a "
          "signed 32-bit number)", {"length_maximum": lambda: 2**31 - 1}),
)
