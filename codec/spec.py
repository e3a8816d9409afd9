"""AMQP 0-9-1 (RabbitMQ-extended): every class, method and basic property, declared once.

Rules:
- This module is the single source of truth for field names, field types and per-method
  metadata (docs/design.md decision 1); class and method ids are codec/constants.py's.
  `codec.generate` derives the typed classes and the fast path from it;
  `codec.construct_path` parses and builds with the constructs here.
- Field names follow RabbitMQ's codegen JSON as pamqp spells them (`ticket` for reserved-1,
  `nowait`, `global_`, `exchange_type`, `message_type`); `tests/codec/test_spec_xml.py` checks
  ids, order and types against the spec XML from the Debian package amqp-specs.
- Consecutive bit fields share one octet, first bit in the least significant position
  (0-9-1 §4.2.5.2); construct's BitStruct is MSB-first, so `BitGroup` is used instead.
- Additions beyond the 2013 XML: connection.blocked/unblocked/update-secret(-ok); metadata
  corrections: basic.recover is synchronous with recover-ok (as RabbitMQ implements it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from construct import (
    Adapter,
    Construct,
    FormatField,
    GreedyBytes,
    Int8ub,
    Int16ub,
    Int32ub,
    Int64ub,
    Prefixed,
    Struct,
)

from codec.constants import METHOD_IDS, ClassId, Dialect
from codec.fields import FIELD_TABLE, decode_text, encode_text


class _ShortStrAdapter(Adapter):  # type: ignore[misc]
    def _decode(self, obj: bytes, context: Any, path: str) -> str:
        return decode_text(obj)

    def _encode(self, obj: str | bytes, context: Any, path: str) -> bytes:
        return encode_text(obj)


class BitGroup(Adapter):  # type: ignore[misc]
    """Up to 8 consecutive bit fields packed LSB-first into one octet (0-9-1 §4.2.5.2)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        super().__init__(Int8ub)
        self.names = names

    def _decode(self, obj: int, context: Any, path: str) -> dict[str, bool]:
        return {name: bool(obj >> i & 1) for i, name in enumerate(self.names)}

    def _encode(self, obj: dict[str, Any], context: Any, path: str) -> int:
        return sum(1 << i for i, name in enumerate(self.names) if obj[name])


# Domains (0-9-1 §4.2.5). Each is one construct object; the generator keys on identity.
Octet = Int8ub
Short = Int16ub
Long = Int32ub
LongLong = Int64ub
Timestamp = FormatField(">", "Q")  # a distinct object from LongLong: decoded the same
ShortStr = _ShortStrAdapter(Prefixed(Int8ub, GreedyBytes))
LongStr = Prefixed(Int32ub, GreedyBytes)
Table = FIELD_TABLE[Dialect.RABBITMQ]
Bit = object()  # marker: grouped into a BitGroup when the Struct is built

DOMAIN_NAMES: dict[int, str] = {
    id(Octet): "octet",
    id(Short): "short",
    id(Long): "long",
    id(LongLong): "longlong",
    id(Timestamp): "timestamp",
    id(ShortStr): "shortstr",
    id(LongStr): "longstr",
    id(Table): "table",
    id(Bit): "bit",
}


@dataclass(frozen=True)
class MethodDecl:
    """One method: ids, fields and the metadata of the spec XML."""

    name: str  # "basic.deliver"
    class_id: int
    method_id: int
    fields: tuple[tuple[str, Any], ...]
    synchronous: bool = False
    responses: tuple[str, ...] = ()
    content: bool = False

    @property
    def index(self) -> int:
        return self.class_id << 16 | self.method_id

    def struct(self, dialect: Dialect = Dialect.RABBITMQ) -> Construct:
        """The construct Struct of the arguments; bit runs become `BitGroup`s named `bits:N`."""
        parts: list[Construct] = []
        run: list[str] = []
        for name, domain in self.fields:
            if domain is Bit:
                run.append(name)
                if len(run) == 8:
                    parts.append(f"bits:{len(parts)}" / BitGroup(tuple(run)))
                    run = []
                continue
            if run:
                parts.append(f"bits:{len(parts)}" / BitGroup(tuple(run)))
                run = []
            parts.append(name / (FIELD_TABLE[dialect] if domain is Table else domain))
        if run:
            parts.append(f"bits:{len(parts)}" / BitGroup(tuple(run)))
        return Struct(*parts)


def _m(
    name: str,
    *fields: tuple[str, Any],
    sync: bool = False,
    responses: tuple[str, ...] = (),
    content: bool = False,
) -> MethodDecl:
    ids = METHOD_IDS[name]  # codec/constants.py
    return MethodDecl(name, ids.class_id, ids.method_id, fields, sync, responses, content)


CLASS_IDS = {cls.name.lower(): int(cls) for cls in ClassId}

_close = (("reply_code", Short), ("reply_text", ShortStr), ("class_id", Short), ("method_id", Short))
_tune = (("channel_max", Short), ("frame_max", Long), ("heartbeat", Short))
_bind = (
    ("ticket", Short),
    ("destination", ShortStr),
    ("source", ShortStr),
    ("routing_key", ShortStr),
    ("nowait", Bit),
    ("arguments", Table),
)

METHODS: tuple[MethodDecl, ...] = (
    # connection (10)
    _m("connection.start", ("version_major", Octet), ("version_minor", Octet),
       ("server_properties", Table), ("mechanisms", LongStr), ("locales", LongStr),
       sync=True, responses=("connection.start-ok",)),
    _m("connection.start-ok", ("client_properties", Table), ("mechanism", ShortStr),
       ("response", LongStr), ("locale", ShortStr), sync=True),
    _m("connection.secure", ("challenge", LongStr), sync=True,
       responses=("connection.secure-ok",)),
    _m("connection.secure-ok", ("response", LongStr), sync=True),
    _m("connection.tune", *_tune, sync=True, responses=("connection.tune-ok",)),
    _m("connection.tune-ok", *_tune, sync=True),
    _m("connection.open", ("virtual_host", ShortStr), ("capabilities", ShortStr),
       ("insist", Bit), sync=True, responses=("connection.open-ok",)),
    _m("connection.open-ok", ("known_hosts", ShortStr), sync=True),
    _m("connection.close", *_close, sync=True, responses=("connection.close-ok",)),
    _m("connection.close-ok", sync=True),
    _m("connection.blocked", ("reason", ShortStr)),
    _m("connection.unblocked"),
    _m("connection.update-secret", ("new_secret", LongStr), ("reason", ShortStr),
       sync=True, responses=("connection.update-secret-ok",)),
    _m("connection.update-secret-ok", sync=True),
    # channel (20)
    _m("channel.open", ("out_of_band", ShortStr), sync=True, responses=("channel.open-ok",)),
    _m("channel.open-ok", ("channel_id", LongStr), sync=True),
    _m("channel.flow", ("active", Bit), sync=True, responses=("channel.flow-ok",)),
    _m("channel.flow-ok", ("active", Bit)),
    _m("channel.close", *_close, sync=True, responses=("channel.close-ok",)),
    _m("channel.close-ok", sync=True),
    # exchange (40)
    _m("exchange.declare", ("ticket", Short), ("exchange", ShortStr),
       ("exchange_type", ShortStr), ("passive", Bit), ("durable", Bit), ("auto_delete", Bit),
       ("internal", Bit), ("nowait", Bit), ("arguments", Table),
       sync=True, responses=("exchange.declare-ok",)),
    _m("exchange.declare-ok", sync=True),
    _m("exchange.delete", ("ticket", Short), ("exchange", ShortStr), ("if_unused", Bit),
       ("nowait", Bit), sync=True, responses=("exchange.delete-ok",)),
    _m("exchange.delete-ok", sync=True),
    _m("exchange.bind", *_bind, sync=True, responses=("exchange.bind-ok",)),
    _m("exchange.bind-ok", sync=True),
    _m("exchange.unbind", *_bind, sync=True, responses=("exchange.unbind-ok",)),
    _m("exchange.unbind-ok", sync=True),
    # queue (50)
    _m("queue.declare", ("ticket", Short), ("queue", ShortStr), ("passive", Bit),
       ("durable", Bit), ("exclusive", Bit), ("auto_delete", Bit), ("nowait", Bit),
       ("arguments", Table), sync=True, responses=("queue.declare-ok",)),
    _m("queue.declare-ok", ("queue", ShortStr), ("message_count", Long),
       ("consumer_count", Long), sync=True),
    _m("queue.bind", ("ticket", Short), ("queue", ShortStr), ("exchange", ShortStr),
       ("routing_key", ShortStr), ("nowait", Bit), ("arguments", Table),
       sync=True, responses=("queue.bind-ok",)),
    _m("queue.bind-ok", sync=True),
    _m("queue.purge", ("ticket", Short), ("queue", ShortStr), ("nowait", Bit),
       sync=True, responses=("queue.purge-ok",)),
    _m("queue.purge-ok", ("message_count", Long), sync=True),
    _m("queue.delete", ("ticket", Short), ("queue", ShortStr), ("if_unused", Bit),
       ("if_empty", Bit), ("nowait", Bit), sync=True, responses=("queue.delete-ok",)),
    _m("queue.delete-ok", ("message_count", Long), sync=True),
    _m("queue.unbind", ("ticket", Short), ("queue", ShortStr), ("exchange", ShortStr),
       ("routing_key", ShortStr), ("arguments", Table),
       sync=True, responses=("queue.unbind-ok",)),
    _m("queue.unbind-ok", sync=True),
    # basic (60)
    _m("basic.qos", ("prefetch_size", Long), ("prefetch_count", Short), ("global_", Bit),
       sync=True, responses=("basic.qos-ok",)),
    _m("basic.qos-ok", sync=True),
    _m("basic.consume", ("ticket", Short), ("queue", ShortStr), ("consumer_tag", ShortStr),
       ("no_local", Bit), ("no_ack", Bit), ("exclusive", Bit), ("nowait", Bit),
       ("arguments", Table), sync=True, responses=("basic.consume-ok",)),
    _m("basic.consume-ok", ("consumer_tag", ShortStr), sync=True),
    _m("basic.cancel", ("consumer_tag", ShortStr), ("nowait", Bit),
       sync=True, responses=("basic.cancel-ok",)),
    _m("basic.cancel-ok", ("consumer_tag", ShortStr), sync=True),
    _m("basic.publish", ("ticket", Short), ("exchange", ShortStr), ("routing_key", ShortStr),
       ("mandatory", Bit), ("immediate", Bit), content=True),
    _m("basic.return", ("reply_code", Short), ("reply_text", ShortStr),
       ("exchange", ShortStr), ("routing_key", ShortStr), content=True),
    _m("basic.deliver", ("consumer_tag", ShortStr), ("delivery_tag", LongLong),
       ("redelivered", Bit), ("exchange", ShortStr), ("routing_key", ShortStr), content=True),
    _m("basic.get", ("ticket", Short), ("queue", ShortStr), ("no_ack", Bit),
       sync=True, responses=("basic.get-ok", "basic.get-empty")),
    _m("basic.get-ok", ("delivery_tag", LongLong), ("redelivered", Bit),
       ("exchange", ShortStr), ("routing_key", ShortStr), ("message_count", Long),
       sync=True, content=True),
    _m("basic.get-empty", ("cluster_id", ShortStr), sync=True),
    _m("basic.ack", ("delivery_tag", LongLong), ("multiple", Bit)),
    _m("basic.reject", ("delivery_tag", LongLong), ("requeue", Bit)),
    _m("basic.recover-async", ("requeue", Bit)),
    _m("basic.recover", ("requeue", Bit), sync=True, responses=("basic.recover-ok",)),
    _m("basic.recover-ok", sync=True),
    _m("basic.nack", ("delivery_tag", LongLong), ("multiple", Bit), ("requeue", Bit)),
    # confirm (85), a RabbitMQ extension
    _m("confirm.select", ("nowait", Bit), sync=True, responses=("confirm.select-ok",)),
    _m("confirm.select-ok", sync=True),
    # tx (90)
    _m("tx.select", sync=True, responses=("tx.select-ok",)),
    _m("tx.select-ok", sync=True),
    _m("tx.commit", sync=True, responses=("tx.commit-ok",)),
    _m("tx.commit-ok", sync=True),
    _m("tx.rollback", sync=True, responses=("tx.rollback-ok",)),
    _m("tx.rollback-ok", sync=True),
)  # fmt: skip

METHODS_BY_NAME = {m.name: m for m in METHODS}
METHODS_BY_INDEX = {m.index: m for m in METHODS}

# Basic content properties, in property-flag order: bit 15 is the first (0-9-1 §4.2.6.1).
BASIC_CLASS_ID = int(ClassId.BASIC)
PROPERTIES: tuple[tuple[str, Any], ...] = (
    ("content_type", ShortStr),
    ("content_encoding", ShortStr),
    ("headers", Table),
    ("delivery_mode", Octet),
    ("priority", Octet),
    ("correlation_id", ShortStr),
    ("reply_to", ShortStr),
    ("expiration", ShortStr),
    ("message_id", ShortStr),
    ("timestamp", Timestamp),
    ("message_type", ShortStr),  # "type" in the XML
    ("user_id", ShortStr),
    ("app_id", ShortStr),
    ("cluster_id", ShortStr),  # "reserved" in the XML, "cluster-id" in RabbitMQ's JSON
)
PROPERTY_FLAG = {name: 1 << (15 - i) for i, (name, _d) in enumerate(PROPERTIES)}
# Flag bits 1 (no 15th property) and 0 (continuation: no second flag word exists for basic).
ILLEGAL_PROPERTY_FLAGS = 0x0003
