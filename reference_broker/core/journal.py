"""The journal: the operations the core asks the store to keep (durability.py writes them,
reference_broker/storage.py makes them durable) and a stored message as read back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference_broker.core.state import Message


@dataclass(frozen=True, slots=True)
class Put:
    id: int
    vhost: str
    queue: str
    message: Message  # exchange, routing key, properties and body never change once enqueued


@dataclass(frozen=True, slots=True)
class Delete:
    id: int


@dataclass(frozen=True, slots=True)
class Drop:
    """A queue was deleted: every stored message of it goes."""

    vhost: str
    queue: str


@dataclass(frozen=True, slots=True)
class Definitions:
    snapshot: dict[str, Any]


StoreOp = Put | Delete | Drop | Definitions


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message row read back from the store."""

    id: int
    vhost: str
    queue: str
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes
