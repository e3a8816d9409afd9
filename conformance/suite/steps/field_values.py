"""Message properties and field values drawn over their whole range (MSG-01), and the check that
a message comes back with the property octets it was published with.

Rules:
- Every field-value type is drawn with its type code forced (`Typed`), over the type's whole
  range: integers from their minimum to their maximum, floats of every finite value of their
  width (subnormals and -0.0 among them), decimals of every scale (0..255) and mantissa
  (0..2^32-1), strings and byte arrays of any octets, timestamps from 0 to 2^64-1, void, and
  tables and arrays nested in each other. NaN and the infinities are not sent: RabbitMQ closes
  the connection 541 on them (an Erlang float has neither; MSG-01's text), so they are not a
  pass-through question.
- The type codes are the dialect's: RabbitMQ's adds 's', 'l' and 'x' to the ones the spec's
  grammar shares with it ('L' is left out: RabbitMQ answers it as 'l' from 3.13, MSG-01.e).
- A value's boundaries (each end of its range, zero, one step inside each end, the smallest and
  largest subnormal and normal float, the empty and the longest string) are a strategy of their
  own, drawn beside the values between, so an edge is tried in many examples, not left to
  chance; `EXTREMES` are two whole property sets at the ends of every range, tried first on
  every run.
- Every basic property is drawn. The ones a broker checks are drawn from what it accepts, as
  this rule is about what passes through, not what is refused: user-id absent or the
  connection's user (MSG-02), expiration a number from one hour to ten years in its canonical
  form (TTL-01: 4.x delivers the number it read), delivery-mode 1 or 2 up to 3.12 (MSG-03).
- Field names are any octets, up to 255, but for a leading "x-" and the CC and BCC keys, which
  RabbitMQ reads as its own (x-death, sender-selected routing keys; BCC is removed): those are
  other rules' subjects.
- Sizes are bounded (a few entries a table, 64 octets a long string) so a content header stays
  well inside the smallest frame_max a broker offers.
"""

from __future__ import annotations

import contextlib
import decimal
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from codec import BasicProperties, Command, Typed
from codec.fields import decimal_from_wire, decode_text, encode_text
from codec.frames import encode_header_payload
from codec.wire_properties import WireProperties, headers_in_key_order, headers_table, table_entries
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Target

EXAMPLES = 40  # per run: each example is three round trips of one message on a live broker
VALUE_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                          suppress_health_check=list(HealthCheck),
                          phases=(Phase.explicit, Phase.generate, Phase.shrink))

FLOAT32_MAX = struct.unpack(">f", b"\x7f\x7f\xff\xff")[0]
FLOAT32_EDGES = (0.0, -0.0, 2.0**-149, 2.0**-126 - 2.0**-149, 2.0**-126, 1.0, FLOAT32_MAX, -FLOAT32_MAX)
DOUBLE_EDGES = (0.0, -0.0, 5e-324, 2.0**-1022 - 5e-324, 2.0**-1022, 1.0, 1.7976931348623157e308,
                -1.7976931348623157e308)
INTEGER_RANGES: dict[bytes, tuple[int, int]] = {
    b"b": (-(2**7), 2**7 - 1), b"B": (0, 2**8 - 1), b"s": (-(2**15), 2**15 - 1), b"u": (0, 2**16 - 1),
    b"I": (-(2**31), 2**31 - 1), b"i": (0, 2**32 - 1), b"l": (-(2**63), 2**63 - 1), b"T": (0, 2**64 - 1),
}
RABBITMQ_ONLY = frozenset(b"slx")  # RabbitMQ's errata codes (the spec's grammar reads 's' as a shortstr)
LONG_STRING = 64  # octets at most in a drawn long string or byte array
TEN_YEARS_MS = 315_360_000_000  # rabbit_misc:check_expiry's maximum (TTL-01)
HOUR_MS = 3_600_000


def drawn(examples: int) -> settings:
    """The settings of a drawn value test: `examples` derandomized examples (the same broker gets the
    same values), no deadline or database, explicit examples first, a failure shrunk."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck),
                    phases=(Phase.explicit, Phase.generate, Phase.shrink))


def ranged(low: int, high: int) -> st.SearchStrategy[int]:
    """Integers of [low, high] with its ends, zero and one step inside each end as first-class draws."""
    edges = sorted({low, low + 1, high - 1, high, *([0] if low <= 0 <= high else [])})
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def _octets(longest: int) -> st.SearchStrategy[bytes]:
    """Any octets up to `longest`, the empty and the longest string as first-class draws."""
    return st.one_of(st.sampled_from([b"", bytes(range(256))[:longest]]), st.binary(max_size=longest))


def _decimals() -> st.SearchStrategy[decimal.Decimal]:
    return st.builds(decimal_from_wire, ranged(0, 255), ranged(0, 2**32 - 1))


def _typed(code: bytes, values: st.SearchStrategy[Any]) -> st.SearchStrategy[Typed]:
    return values.map(lambda v: Typed(code, v))


def scalars(rabbitmq: bool) -> st.SearchStrategy[Typed]:
    """A field value of every scalar type code of the dialect, its code forced."""
    kinds: list[st.SearchStrategy[Typed]] = [
        _typed(b"t", st.booleans()),
        *(_typed(code, ranged(*bounds)) for code, bounds in INTEGER_RANGES.items()
          if rabbitmq or code[0] not in RABBITMQ_ONLY),
        _typed(b"f", st.sampled_from(FLOAT32_EDGES) | st.floats(width=32, allow_nan=False, allow_infinity=False)),
        _typed(b"d", st.sampled_from(DOUBLE_EDGES) | st.floats(allow_nan=False, allow_infinity=False)),
        _typed(b"D", _decimals()),
        _typed(b"S", _octets(LONG_STRING)),
        st.just(Typed(b"V", None)),
    ]
    if rabbitmq:
        kinds.append(_typed(b"x", _octets(LONG_STRING)))
    return st.one_of(kinds)


def field_names() -> st.SearchStrategy[str]:
    """Field names of any octets (0 to 255), but none RabbitMQ reads as its own."""
    return _octets(255).filter(lambda k: not k.startswith(b"x-") and k not in (b"CC", b"BCC")).map(decode_text)


def field_values(rabbitmq: bool) -> st.SearchStrategy[Typed]:
    """Any field value, tables and arrays nested in each other."""
    return st.recursive(
        scalars(rabbitmq),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4).map(lambda v: Typed(b"A", v)),
            st.dictionaries(field_names(), inner, max_size=4).map(lambda v: Typed(b"F", v)),
        ),
        max_leaves=12,
    )


def _shortstr() -> st.SearchStrategy[str | None]:
    return st.none() | _octets(255).map(decode_text)


def property_sets(rabbitmq: bool, user: str, any_mode: bool) -> st.SearchStrategy[BasicProperties]:
    """Every basic property, each absent or drawn over its range (delivery-mode 0..255 where the
    broker takes any, else 1 or 2: MSG-03)."""
    def optional(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.none() | inner

    return st.builds(
        BasicProperties,
        content_type=_shortstr(), content_encoding=_shortstr(),
        headers=optional(st.dictionaries(field_names(), field_values(rabbitmq), max_size=6)),
        delivery_mode=optional(ranged(0, 255) if any_mode else st.sampled_from([1, 2])),
        priority=optional(ranged(0, 255)),
        correlation_id=_shortstr(), reply_to=_shortstr(),
        expiration=optional(ranged(HOUR_MS, TEN_YEARS_MS).map(str)),
        message_id=_shortstr(), timestamp=optional(ranged(0, 2**64 - 1)), message_type=_shortstr(),
        user_id=st.sampled_from([None, user]), app_id=_shortstr(), cluster_id=_shortstr(),
    )


def extremes(rabbitmq: bool, user: str, any_mode: bool) -> tuple[BasicProperties, BasicProperties]:
    """Two property sets at the ends of every range: every property and every type code at its
    minimum (empty strings and tables, zeros), then at its maximum (255-octet strings, the
    largest numbers, nesting of every kind)."""
    codes = [c for c in INTEGER_RANGES if rabbitmq or c[0] not in RABBITMQ_ONLY]
    low = {f"min-{c.decode()}": Typed(c, INTEGER_RANGES[c][0]) for c in codes}
    high = {f"max-{c.decode()}": Typed(c, INTEGER_RANGES[c][1]) for c in codes}
    low |= {"f": Typed(b"f", -FLOAT32_MAX), "d": Typed(b"d", -DOUBLE_EDGES[-2]), "sub": Typed(b"f", 2.0**-149),
            "D": Typed(b"D", decimal_from_wire(0, 0)), "S": Typed(b"S", b""), "A": Typed(b"A", []),
            "F": Typed(b"F", {}), "": Typed(b"V", None)}
    deep = Typed(b"A", [Typed(b"F", {"F": Typed(b"F", {"A": Typed(b"A", [Typed(b"F", {"V": Typed(b"V", None)})])})})])
    high |= {"f": Typed(b"f", FLOAT32_MAX), "d": Typed(b"d", DOUBLE_EDGES[-2]), "-0": Typed(b"d", -0.0),
             "D": Typed(b"D", decimal_from_wire(255, 2**32 - 1)), "D0": Typed(b"D", decimal_from_wire(255, 0)),
             "n" * 255: Typed(b"S", bytes(range(256))[:LONG_STRING]), "deep": deep}
    longest = decode_text(bytes(range(255)))
    least = BasicProperties(content_type="", content_encoding="", headers=low, delivery_mode=0 if any_mode else 1,
                            priority=0, correlation_id="", reply_to="", expiration=str(HOUR_MS), message_id="",
                            timestamp=0, message_type="", user_id=None, app_id="", cluster_id="")
    most = BasicProperties(content_type=longest, content_encoding=longest, headers=high,
                           delivery_mode=255 if any_mode else 2, priority=255, correlation_id=longest, reply_to=longest,
                           expiration=str(TEN_YEARS_MS), message_id=longest, timestamp=2**64 - 1, message_type=longest,
                           user_id=user, app_id=longest, cluster_id=longest)
    return least, most


def _shown(value: Any) -> str:
    """A value for a person: a long string by its length and its first octets."""
    if isinstance(value, str | bytes) and len(value) > 24:
        octets = value if isinstance(value, bytes) else encode_text(value)
        return f"<{len(octets)} octets: {octets[:8].hex(' ')} ... {octets[-4:].hex(' ')}>"
    if isinstance(value, Typed):
        return f"{value.kind.decode()}:{_shown(value.value)}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_shown(k)}: {_shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return repr(value)


def shown(props: BasicProperties) -> str:
    """The properties present, each value short enough to read."""
    return "BasicProperties(" + ", ".join(f"{k}={_shown(v)}" for k, v in props.fields().items()
                                          if v is not None) + ")"


def smaller(props: BasicProperties) -> list[BasicProperties]:
    """Each property set with one property, or one top-level headers entry, left out."""
    fields = BasicProperties(*props).fields()
    sets = [BasicProperties(**{**fields, name: None}) for name, value in fields.items() if value is not None]
    for key in props.headers or {}:
        sets.append(BasicProperties(**{**fields, "headers": {k: v for k, v in (props.headers or {}).items()
                                                              if k != key}}))
    return sets


def reduced(props: BasicProperties, fails: Callable[[BasicProperties], bool], budget: int = 200) -> BasicProperties:
    """The smallest part of a failing property set that still fails, found by leaving out one
    property or headers entry at a time while the failure stays (at most `budget` tries)."""
    tries = 0
    progress = True
    while progress and tries < budget:
        progress = False
        for candidate in smaller(props):
            tries += 1
            if fails(candidate):
                props, progress = candidate, True
                break
    return props


def differences(sent: BasicProperties, got: WireProperties) -> str:
    """What changed between the published properties and the delivered ones, for a person: each
    property whose decoded value differs, and each headers entry whose octets differ."""
    assert got.raw is not None
    published = encode_header_payload(0, sent)[12:]
    props = {name: f"{_shown(value)} -> {_shown(got.fields()[name])}"
             for name, value in BasicProperties(*sent).fields().items()
             if name != "headers" and value != got.fields()[name]}
    sent_table, got_table = headers_table(published), headers_table(got.raw)
    want = table_entries(sent_table or bytes(4))
    have = table_entries(got_table or bytes(4))
    entries = {k: (v.hex(" "), have[k].hex(" ") if k in have else "absent") for k, v in want.items() if have.get(k) != v}
    notes = [f"entries added: {sorted(set(have) - set(want))}"] if set(have) - set(want) else []
    if (sent_table is None) != (got_table is None):
        notes.append("a headers table " + ("delivered though none was sent" if sent_table is None else
                                           "sent, none delivered"))
    if not entries and not notes and list(want) != list(have):
        notes.append(f"the entries came in another order: {list(have)}")
    return "; ".join([f"properties (sent -> delivered): {props or 'the same'}",
                      f"headers entries (sent octets, delivered octets): {entries or 'the same'}", *notes])


def assert_same_octets(sent: BasicProperties, got: Command, target: Target, how: str = "") -> None:
    """The delivered property octets are the published ones (on RabbitMQ 3.13 and 4.x, MSG-01's
    variant: the top-level headers entries may come in key order); on a difference, name it."""
    assert isinstance(got.properties, WireProperties) and got.properties.raw is not None, got
    published = encode_header_payload(len(got.body), sent)[12:]
    if got.properties.raw == published:
        return
    key_order_allowed = target.profile.rabbitmq and target.profile.expect("MSG-01").startswith("variant:")
    if key_order_allowed and got.properties.raw == headers_in_key_order(published):
        return
    raise AssertionError(f"MSG-01: a message must come back{how} with the property octets it was published "
                         f"with; {differences(sent, got.properties)}")


def typed_integers(low: int, high: int, codes: Sequence[bytes]) -> st.SearchStrategy[Typed]:
    """Integers of [low, high] (ends first-class) typed with each of `codes`, within each code's range."""
    return st.one_of([_typed(code, ranged(max(low, INTEGER_RANGES[code][0]), min(high, INTEGER_RANGES[code][1])))
                      for code in codes])


def optional_priorities(longest: int) -> st.SearchStrategy[list[int | None]]:
    """1 to `longest` priority properties, each absent or 0..255 (ends first-class)."""
    return st.lists(st.none() | ranged(0, 255), min_size=1, max_size=longest)


class ExampleConnection:
    """One connection for drawn examples: a fresh channel for each example, and a new connection
    after an example that failed, so the next one (a shrink) starts on a sound connection."""

    def __init__(self, connect: Callable[[], RawClient]) -> None:
        self._connect = connect
        self._client: RawClient | None = None

    @contextlib.contextmanager
    def channel(self) -> Iterator[tuple[RawClient, int]]:
        if self._client is None:
            self._client = self._connect()
        client = self._client
        try:
            ch = client.channel()
            yield client, ch
            client.close_channel(ch)
        except BaseException:
            self._client = None  # the test's fixture closes it at teardown
            raise


def message_containers(target: Target) -> bool:
    """Whether the broker reads 0-9-1 messages into message containers (mc_amqpl, RabbitMQ 3.13 and
    4.x): they re-encode the typed headers at delivery (MSG-01) and check no delivery-mode (MSG-03).
    By the reported version, else the profile."""
    numbers = [int(p) for p in (target.profile.version or "").split(".")[:2] if p.isdigit()]
    return tuple(numbers) >= (3, 13) if len(numbers) == 2 else target.profile.at_least("4.0")


def fits(properties: BasicProperties, frame_max: int) -> bool:
    """Whether a content header with these properties fits one frame of `frame_max`."""
    return frame_max == 0 or len(encode_header_payload(0, properties)) + 8 <= frame_max


__all__: Sequence[str] = ["EXAMPLES", "VALUE_SETTINGS", "ExampleConnection", "optional_priorities", "ranged", "typed_integers", "assert_same_octets", "differences", "extremes",
                          "field_values", "fits", "message_containers", "property_sets", "reduced", "scalars",
                          "shown"]
