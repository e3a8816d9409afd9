"""Outcomes and observations: the values the model predicts and the machines compare.

Responsibility: small frozen value types, independent of any driver or socket.
- Outcomes of a client method: `Ok`, `ChannelClosed`, `ConnectionClosed`. They compare by reply
  code, class/method id and scope (the type), never by reply text (docs/design.md, conventions: fakeredis note).
- Observations of broker-sent methods, reduced to what a rule constrains: `Deliver`, `GetOk`,
  `GetEmpty`, `ServerCancel`, `Confirm`, `Return`.
Rules: ERR-02 decides the scope of an error (soft errors close the channel, hard errors the
connection); the model picks the type accordingly and the machines compare the same triple.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class Ok:
    """The method succeeded (its reply, if it has one, arrived; nothing was closed)."""

    def __repr__(self) -> str:
        return "Ok()"


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    """The broker closed the channel (a soft error, ERR-02)."""

    code: int
    class_id: int
    method_id: int
    scope: ClassVar[str] = "channel"

    def __repr__(self) -> str:
        return f"ChannelClosed({self.code}, {self.class_id}, {self.method_id})"


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The broker closed the connection (a hard error, ERR-02)."""

    code: int
    class_id: int
    method_id: int
    scope: ClassVar[str] = "connection"

    def __repr__(self) -> str:
        return f"ConnectionClosed({self.code}, {self.class_id}, {self.method_id})"


Outcome = Ok | ChannelClosed | ConnectionClosed
Closed = ChannelClosed | ConnectionClosed
OK = Ok()


@dataclass(frozen=True, slots=True)
class Deliver:
    """basic.deliver as a rule sees it (ACK-01 tag, RQ-04 flag, the message body)."""

    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    body: bytes


@dataclass(frozen=True, slots=True)
class GetOk:
    """basic.get-ok (ACK-01: it takes a tag from the same counter as basic.deliver)."""

    delivery_tag: int
    redelivered: bool
    body: bytes


@dataclass(frozen=True, slots=True)
class GetEmpty:
    """basic.get-empty."""


@dataclass(frozen=True, slots=True)
class ServerCancel:
    """A broker-sent basic.cancel (CCN-02)."""

    consumer_tag: str


@dataclass(frozen=True, slots=True)
class Confirm:
    """A broker-sent basic.ack / basic.nack on a confirm channel (PC-02, PC-04)."""

    delivery_tag: int
    multiple: bool
    nack: bool = False


@dataclass(frozen=True, slots=True)
class Return:
    """basic.return of a mandatory, unroutable message (PC-06)."""

    reply_code: int
    exchange: str
    routing_key: str
    body: bytes


GetOutcome = GetOk | GetEmpty | ChannelClosed
