"""The message-lifecycle deviations `DeviantProxy` can apply (`deviations.DEVIATIONS` lists them with
the others).

Each one makes the broker mis-hear the client, or the client mis-read the broker, in one place of a
message's life: a per-message TTL never reaches the broker, a dead-lettered message arrives without
its x-death record, or a queue's dead-letter routing key is heard as another.
"""

from __future__ import annotations

from typing import Any

from codec import BasicProperties, HeaderFrame, QueueDeclare, encode_header
from conformance.interpose.frames import Frame
from tests.conformance.deviant import HEADER, Deviation, Io, encode

DLRK = "x-dead-letter-routing-key"


def header_of(frame: Frame) -> HeaderFrame | None:
    decoded = frame.decoded if frame.type == HEADER else None
    return decoded if isinstance(decoded, HeaderFrame) and decoded.properties is not None else None


def rewritten(header: HeaderFrame, **changes: Any) -> bytes:
    assert header.properties is not None
    properties = BasicProperties._make(header.properties)._replace(**changes)  # encoded afresh, not as received
    return encode_header(header.channel, header.body_size, properties)


class ExpirationStripped(Deviation):
    name, area, rules = "expiration_stripped", "ttl", ("TTL-03", "TTL-04", "TTL-05")
    description = "a published message's expiration property is removed on the way: per-message TTLs never apply"

    def client(self, frame: Frame, io: Io) -> None:
        header = header_of(frame)
        if header is not None and header.properties is not None and header.properties.expiration is not None:
            io.record(self.name)
            io.to_broker(rewritten(header, expiration=None))
            return
        io.to_broker(frame.raw)


class XDeathDropped(Deviation):
    name, area, rules = "x_death_dropped", "deadletter", ("DLX-02", "DLX-07")
    description = "a delivered message's x-death header is removed: dead-lettered messages carry no record"

    def broker(self, frame: Frame, io: Io) -> None:
        header = header_of(frame)
        headers = header.properties.headers if header is not None and header.properties is not None else None
        if header is not None and headers and "x-death" in headers:
            io.record(self.name)
            kept = {k: v for k, v in headers.items() if k != "x-death"}
            io.to_client(rewritten(header, headers=kept or None))
            return
        io.to_client(frame.raw)


class DeadLetterKeyRewritten(Deviation):
    name, area, rules = "dead_letter_key_rewritten", "deadletter", ("DLX-01", "DLX-06")
    description = "queue.declare's x-dead-letter-routing-key is heard with a suffix: dead-lettered messages go astray"

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, QueueDeclare) and m.arguments and isinstance(m.arguments.get(DLRK), str):
            io.record(self.name)
            arguments = {**m.arguments, DLRK: m.arguments[DLRK] + ".astray"}
            io.to_broker(encode(frame.channel, m._replace(arguments=arguments)))
            return
        io.to_broker(frame.raw)
