"""A tiny driver for the pure core: connections, channels and effects without sockets."""

from __future__ import annotations

from typing import Any

from codec import BasicProperties, BasicPublish, ChannelOpen, Method, QueueDeclare
from reference_broker.config import BrokerConfig
from reference_broker.core import BrokerCore, CloseConnection, Effect, Meta, Send


class Sim:
    def __init__(self, **config: Any) -> None:
        self.core = BrokerCore(BrokerConfig(**config))
        self.now = 1_000

    def connect(self, conn: int = 1, cancel_notify: bool = True, channel_max: int = 2047) -> None:
        caps = {"consumer_cancel_notify": cancel_notify}
        self.core.connection_opened(conn, "/", "guest", {"capabilities": caps}, channel_max)

    def do(self, conn: int, ch: int, method: Method, props: BasicProperties | None = None,
           body: bytes = b"") -> list[Effect]:
        effects = self.core.apply(Meta(self.now), conn, ch, method, props, body)
        return effects + self.core.flush()

    def open(self, conn: int = 1, ch: int = 1) -> None:
        assert self.do(conn, ch, ChannelOpen())

    def queue(self, name: str, conn: int = 1, ch: int = 1, **args: Any) -> None:
        self.do(conn, ch, QueueDeclare(queue=name, durable=True, arguments=args))

    def publish(self, queue: str, *bodies: bytes, conn: int = 1, ch: int = 1, **kw: Any) -> list[Effect]:
        out: list[Effect] = []
        for body in bodies:
            out += self.do(conn, ch, BasicPublish(routing_key=queue, **kw), BasicProperties(), body)
        return out


def methods(effects: list[Effect], cls: type | None = None) -> list[Any]:
    return [e.method for e in effects if isinstance(e, Send) and (cls is None or isinstance(e.method, cls))]


def sends(effects: list[Effect], cls: type) -> list[Send]:
    return [e for e in effects if isinstance(e, Send) and isinstance(e.method, cls)]


def closes(effects: list[Effect]) -> list[CloseConnection]:
    return [e for e in effects if isinstance(e, CloseConnection)]
