"""The one driver interface (docs/design.md decision 10): what a client can express, in both directions.

Responsibility: declare `ClientDriver`, the operations every driver offers (the raw codec
client, the client-library drivers for pika, py-amqp, aio-pika, aiormq, kombu, and a remote
adapter for other languages), the values they take and return (`Delivery`, `ConnectOptions`,
`ClientInfo`), the events a client reports on its own (`Event`: deliveries, broker cancels,
confirms, returns, closes, flow), and the outcomes every driver raises (`Closed`, `NoReply`,
`ConnectionLost`). Message properties are codec's `BasicProperties` (declared once). The broker-side suite drives a broker through it; the
client-side suite (`conformance.client_judge`) drives client libraries through it against a
scripted broker.

Rules:
- Operations are synchronous and bounded: each returns within the driver's timeout or raises
  `NoReply`. A broker-initiated close surfaces as `ChannelClosed` / `ConnectionClosed`
  (code, text, class/method id), whatever the library's own exception is; the library's
  exception type is kept in `library_error` for the record.
- What arrives without being asked for is an `Event`, taken with `next_event(timeout)`, in the
  order the client reported it to the application. An exception that escapes the client
  library's own code (not an operation's documented outcome) is a `ClientFailure` event: it
  is the client's bug, not a broker verdict.
- Confirms are reported as the client's application sees them: one `Confirmed` per publish
  (`seq` = the client's publish counter on that channel, from 1), with `multiple` only when
  the library shows the broker's multiple flag. A driver whose publish blocks until its
  confirm says so in `features` ("confirms-block-publish"); one that reports a basic.return only
  for a publish in confirm mode says "returns-need-confirms".
- Channels are named by number. `channel_max` and friends are the driver's wish for
  connection.tune-ok; None leaves the library's default.
- `attempt(fn)` turns an operation's outcome into the model's `Ok | ChannelClosed |
  ConnectionClosed` (conformance.model.outcomes), so a machine compares a driver's result with
  the model's prediction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from codec import BasicProperties
from conformance.model import outcomes
from conformance.results.observations import (  # the outcomes and frame evidence, re-exported
    ChannelClosed,
    Closed,
    ConnectionClosed,
    ConnectionLost,
    DriverError,
    FrameRecord,
    NoReply,
    Recorder,
    Unsupported,
)

__all__ = ["Blocked", "BrokerCancelled", "ChannelClosed", "ChannelClosedEvent", "ClientDriver", "ClientFailure",
           "ClientInfo", "Closed", "Confirmed", "ConnectOptions", "ConnectionClosed", "ConnectionClosedEvent",
           "ConnectionLost", "DEFAULT_CONNECT", "Delivered", "Delivery", "DriverError", "EVENT_TYPES", "Event",
           "FrameRecord", "NO_PROPERTIES", "NoReply", "Recorder", "Returned", "Unblocked", "Unsupported", "attempt",
           "present", "wait_event"]


def attempt(operation: Callable[[], object]) -> outcomes.Outcome:
    """The model's view of an operation: Ok, or the close it ran into (ERR-02 scope)."""
    try:
        operation()
    except ChannelClosed as exc:
        return outcomes.ChannelClosed(exc.code, exc.class_id, exc.method_id)
    except ConnectionClosed as exc:
        return outcomes.ConnectionClosed(exc.code, exc.class_id, exc.method_id)
    return outcomes.OK


# -- values ------------------------------------------------------------------------------------

NO_PROPERTIES = BasicProperties()


def present(properties: BasicProperties) -> dict[str, Any]:
    """Only the properties that are set (codec's `BasicProperties`: the one declaration of them)."""
    return {name: value for name, value in properties._asdict().items() if value is not None}


@dataclass(frozen=True)
class Delivery:
    """A message as the application received it (basic.deliver or basic.get-ok)."""

    channel: int
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    body: bytes
    properties: BasicProperties = NO_PROPERTIES
    consumer_tag: str | None = None  # None for basic.get
    message_count: int | None = None  # basic.get-ok only


# -- events (reported by the client without being asked) ------------------------------------------


@dataclass(frozen=True)
class Delivered:
    KIND: ClassVar[str] = "delivered"
    delivery: Delivery


@dataclass(frozen=True)
class BrokerCancelled:
    """The library told the application that the broker cancelled a consumer (CCN-02)."""

    KIND: ClassVar[str] = "cancelled"
    channel: int
    consumer_tag: str


@dataclass(frozen=True)
class Confirmed:
    KIND: ClassVar[str] = "confirmed"
    channel: int
    seq: int
    ack: bool
    multiple: bool | None = None  # None: the library does not show it


@dataclass(frozen=True)
class Returned:
    KIND: ClassVar[str] = "returned"
    channel: int
    reply_code: int | None  # None: the library does not show it
    reply_text: str
    exchange: str
    routing_key: str
    body: bytes


@dataclass(frozen=True)
class ChannelClosedEvent:
    KIND: ClassVar[str] = "channel-closed"
    channel: int
    code: int | None  # None: the library gave no code
    text: str


@dataclass(frozen=True)
class ConnectionClosedEvent:
    KIND: ClassVar[str] = "connection-closed"
    code: int | None  # None: lost without connection.close, or the library gave no code
    text: str


@dataclass(frozen=True)
class Blocked:
    KIND: ClassVar[str] = "blocked"
    reason: str


@dataclass(frozen=True)
class Unblocked:
    KIND: ClassVar[str] = "unblocked"


@dataclass(frozen=True)
class ClientFailure:
    """An exception escaped the client library's own code (a callback, its I/O loop)."""

    KIND: ClassVar[str] = "failure"
    type: str
    text: str
    where: str


Event = (Delivered | BrokerCancelled | Confirmed | Returned | ChannelClosedEvent | ConnectionClosedEvent
         | Blocked | Unblocked | ClientFailure)
EVENT_TYPES: dict[str, type] = {t.KIND: t for t in (Delivered, BrokerCancelled, Confirmed, Returned,  # type: ignore[attr-defined]
                                                    ChannelClosedEvent, ConnectionClosedEvent, Blocked,
                                                    Unblocked, ClientFailure)}


@dataclass(frozen=True)
class ConnectOptions:
    """What the application asks of connection.tune-ok (None: the library's default)."""

    heartbeat: int | None = None
    frame_max: int | None = None
    channel_max: int | None = None


DEFAULT_CONNECT = ConnectOptions()


@dataclass(frozen=True)
class ClientInfo:
    """Who the driver is: recorded with every result."""

    client: str  # e.g. "pika"
    version: str  # the library's version
    language: str  # "python", "node", ...
    runtime: str  # e.g. "CPython 3.11.2", "node v20.20.2"
    api: str = ""  # the library API used, e.g. "BlockingConnection"
    features: frozenset[str] = frozenset()


# -- the interface -------------------------------------------------------------------------------


@runtime_checkable
class ClientDriver(Protocol):
    """One AMQP connection driven through a client (a library, or the raw codec)."""

    def info(self) -> ClientInfo: ...

    def connect(self, url: str, options: ConnectOptions = DEFAULT_CONNECT) -> None: ...

    def close(self) -> None:
        """Close politely if open; never raises, bounded."""

    def open_channel(self) -> int: ...

    def close_channel(self, channel: int) -> None: ...

    def declare_queue(self, channel: int, queue: str, *, durable: bool = False, exclusive: bool = False,
                      auto_delete: bool = False, passive: bool = False,
                      arguments: Mapping[str, Any] | None = None) -> str:
        """queue.declare; returns the queue's name (server-named when `queue` is "")."""

    def declare_exchange(self, channel: int, exchange: str, kind: str = "direct", *, durable: bool = False,
                         passive: bool = False) -> None: ...

    def bind_queue(self, channel: int, queue: str, exchange: str, routing_key: str) -> None: ...

    def delete_queue(self, channel: int, queue: str) -> None: ...

    def qos(self, channel: int, prefetch_count: int, global_: bool = False) -> None: ...

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes, *,
                properties: BasicProperties = NO_PROPERTIES, mandatory: bool = False) -> int | None:
        """basic.publish; in confirm mode returns the publish's seq (its Confirmed event comes
        later, or before this returns when the library blocks on confirms)."""

    def confirm_select(self, channel: int) -> None: ...

    def consume(self, channel: int, queue: str, *, consumer_tag: str = "", no_ack: bool = False,
                exclusive: bool = False, arguments: Mapping[str, Any] | None = None) -> str:
        """basic.consume; deliveries come as `Delivered` events; returns the consumer tag."""

    def cancel(self, channel: int, consumer_tag: str) -> None: ...

    def get(self, channel: int, queue: str, *, no_ack: bool = False) -> Delivery | None: ...

    def ack(self, channel: int, delivery_tag: int, *, multiple: bool = False) -> None: ...

    def nack(self, channel: int, delivery_tag: int, *, multiple: bool = False, requeue: bool = True) -> None: ...

    def reject(self, channel: int, delivery_tag: int, *, requeue: bool = True) -> None: ...

    def recover(self, channel: int, *, requeue: bool = True) -> None: ...

    def tx_select(self, channel: int) -> None: ...

    def tx_commit(self, channel: int) -> None: ...

    def tx_rollback(self, channel: int) -> None: ...

    def next_event(self, timeout: float) -> Event | None:
        """The next event the client reported, waiting (and running the client) up to `timeout`."""

    def state(self) -> dict[str, Any]:
        """{"connection": "open" | "closed", "channels": {number: "open" | "closed"}} as the
        library itself tells it."""


def wait_event(driver: ClientDriver, kinds: tuple[type, ...], timeout: float,
               seen: list[Event] | None = None) -> Event | None:
    """The next event of one of `kinds` within `timeout`; every event taken meanwhile is appended
    to `seen` (so nothing the client reported is lost to the caller)."""
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        event = driver.next_event(remaining)
        if event is None:
            return None
        if seen is not None:
            seen.append(event)
        if isinstance(event, kinds):
            return event
    return None
