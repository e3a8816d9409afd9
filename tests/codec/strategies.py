"""Hypothesis strategies derived from the codec's declarations (codec.spec)."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from hypothesis import strategies as st

from codec import METHOD_CLASSES, BasicProperties
from codec.constants import Dialect
from codec.fields import MAX_DATETIME_SECONDS, UTC, Timestamp, Typed
from codec.spec import DOMAIN_NAMES, METHODS_BY_INDEX, PROPERTIES

# Any octets survive as str through surrogateescape; most examples are plain text.
shortstr = st.one_of(
    st.text(max_size=40).filter(lambda s: len(s.encode("utf-8", "surrogateescape")) <= 255),
    st.binary(max_size=255).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
field_name = st.binary(max_size=64).map(lambda b: b.decode("utf-8", "surrogateescape"))

DOMAIN_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "octet": st.integers(0, 2**8 - 1),
    "short": st.integers(0, 2**16 - 1),
    "long": st.integers(0, 2**32 - 1),
    "longlong": st.integers(0, 2**64 - 1),
    "timestamp": st.integers(0, 2**64 - 1),
    "shortstr": shortstr,
    "longstr": st.binary(max_size=300),
    "bit": st.booleans(),
}


def scalar_values(dialect: Dialect = Dialect.RABBITMQ) -> st.SearchStrategy[Any]:
    low = -(2**63)
    high = 2**63 - 1 if dialect is Dialect.RABBITMQ else 2**64 - 1
    return st.one_of(
        st.booleans(),
        st.integers(low, high),
        st.floats(allow_nan=False),
        st.builds(lambda m, s: decimal.Decimal(m).scaleb(-s), st.integers(0, 2**32 - 1), st.integers(0, 20)),
        st.binary(max_size=40).map(lambda b: b.decode("utf-8", "surrogateescape")),
        st.binary(max_size=40) if dialect is Dialect.RABBITMQ else st.none(),
        st.integers(0, MAX_DATETIME_SECONDS).map(lambda s: dt.datetime.fromtimestamp(s, UTC)),
        st.integers(MAX_DATETIME_SECONDS + 1, 2**64 - 1).map(Timestamp),
        st.none(),
    )


def field_values(dialect: Dialect = Dialect.RABBITMQ) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalar_values(dialect),
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(field_name, children, max_size=4),
        ),
        max_leaves=12,
    )


def tables(dialect: Dialect = Dialect.RABBITMQ) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(field_name, field_values(dialect), max_size=6)


def domain_strategy(domain: Any) -> st.SearchStrategy[Any]:
    name = DOMAIN_NAMES[id(domain)]
    return tables() if name == "table" else DOMAIN_STRATEGIES[name]


def method_of(index: int) -> st.SearchStrategy[Any]:
    decl = METHODS_BY_INDEX[index]
    cls = METHOD_CLASSES[index]
    return st.builds(cls, **{name: domain_strategy(dom) for name, dom in decl.fields})


any_method = st.sampled_from(sorted(METHOD_CLASSES)).flatmap(method_of)

properties = st.builds(
    BasicProperties,
    **{name: st.none() | domain_strategy(dom) for name, dom in PROPERTIES},
)


# Every type code of RabbitMQ's dialect with a value of its own range, forced with `Typed`
# so the wire carries exactly that code (what a client like pika, py-amqp or a Java client
# may send): widths and signedness, float vs double, decimal, timestamp, bytes, void.
TYPED_SCALARS: dict[bytes, st.SearchStrategy[Any]] = {
    b"t": st.booleans(),
    b"b": st.integers(-(2**7), 2**7 - 1),
    b"B": st.integers(0, 2**8 - 1),
    b"s": st.integers(-(2**15), 2**15 - 1),
    b"u": st.integers(0, 2**16 - 1),
    b"I": st.integers(-(2**31), 2**31 - 1),
    b"i": st.integers(0, 2**32 - 1),
    b"l": st.integers(-(2**63), 2**63 - 1),
    b"L": st.integers(-(2**63), 2**63 - 1),
    b"f": st.floats(width=32),
    b"d": st.floats(),
    b"D": st.builds(lambda m, s: decimal.Decimal(m).scaleb(-s), st.integers(0, 2**32 - 1), st.integers(0, 255)),
    b"S": st.binary(max_size=40),
    b"x": st.binary(max_size=40),
    b"T": st.integers(0, 2**64 - 1),
    b"V": st.none(),
}


def typed_field_values() -> st.SearchStrategy[Any]:
    """Field values that carry their type code, nested in tables (`F`) and arrays (`A`)."""
    scalars = st.one_of(*(strategy.map(lambda v, k=kind: Typed(k, v)) for kind, strategy in TYPED_SCALARS.items()))
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4).map(lambda v: Typed(b"A", v)),
            st.dictionaries(field_name, children, max_size=4).map(lambda v: Typed(b"F", v)),
        ),
        max_leaves=12,
    )


typed_tables = st.dictionaries(field_name, typed_field_values(), max_size=6)
