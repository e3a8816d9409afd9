"""AmqpDriver: a `ClientDriver` over py-amqp (`amqp.Connection`), the library under kombu/Celery.

Rules: py-amqp raises the broker's closes from the call that meets them (an operation or
`drain_events`) as `amqp.ChannelError` / `amqp.ConnectionError` subclasses carrying reply code,
text and the method's class/method id; those become `ChannelClosed` / `ConnectionClosed`, or
close events when met while running the I/O loop. Confirms are watched through the channel's
`basic_ack` / `basic_nack` events (the library shows the multiple flag), returns through
`basic_return`. py-amqp sends heartbeats only when the application calls `heartbeat_tick`
(its documented contract), so the I/O loop here calls it, as an application must.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

import amqp
import amqp.exceptions as ae

from codec import BasicProperties
from conformance.drivers import interface as di
from conformance.drivers.library import LibraryDriver, from_library, to_library

T = TypeVar("T")


def _ids(exc: ae.AMQPError) -> tuple[int, int]:
    sig = getattr(exc, "method_sig", None) or (0, 0)
    return (int(sig[0]), int(sig[1])) if len(sig) == 2 else (0, 0)


class AmqpDriver(LibraryDriver):
    client = "amqp"
    distribution = "amqp"
    api = "amqp.Connection"

    def __init__(self, timeout: float = 5.0) -> None:
        super().__init__(timeout)
        self.conn: Any = None
        self.channels: dict[int, Any] = {}

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except ae.ConsumerCancelled:
            raise  # not a close: the connection and channel stay open
        except ae.ChannelError as exc:
            if self.conn is not None and self.conn.connected:
                raise di.ChannelClosed("channel", exc.reply_code or 0, exc.reply_text or str(exc), *_ids(exc)) from None
            # py-amqp picks the class by reply code (403, 404, 405, 406 are "channel errors"), also for a
            # connection.close (at login: 403): a close that took the connection with it is the connection's
            raise di.ConnectionClosed("connection", exc.reply_code or 0, exc.reply_text or str(exc), *_ids(exc)) from None
        except ae.ConnectionError as exc:
            raise di.ConnectionClosed("connection", exc.reply_code or 0, exc.reply_text or str(exc),
                                      *_ids(exc)) from None
        except TimeoutError:  # read_timeout: a synchronous method's reply did not come
            raise di.NoReply(self.timeout, "the broker's reply (py-amqp's read_timeout)") from None
        except (OSError, ae.RecoverableConnectionError) as exc:
            raise di.ConnectionLost(f"{type(exc).__name__}: {exc}") from None

    def connect(self, url: str, options: di.ConnectOptions = di.DEFAULT_CONNECT) -> None:
        self.conn = self.make_connection(url, options)
        self._call(self.conn.connect)

    def make_connection(self, url: str, options: di.ConnectOptions) -> Any:
        """The `amqp.Connection` for `url`, not connected yet."""
        parts = urlparse(url)
        vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
        return amqp.Connection(
            host=f"{parts.hostname}:{parts.port or 5672}", userid=unquote(parts.username or "guest"),
            password=unquote(parts.password or "guest"), virtual_host=vhost, connect_timeout=self.timeout,
            read_timeout=self.timeout,  # else a synchronous method waits for ever on a broker that went silent
            heartbeat=options.heartbeat or 0, frame_max=options.frame_max, channel_max=options.channel_max,
            on_blocked=lambda reason: self.emit(di.Blocked(reason)), on_unblocked=lambda: self.emit(di.Unblocked()))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.conn is not None and self.conn.connected:
                self.conn.close()

    def open_channel(self) -> int:
        ch = self._call(self.conn.channel)
        number: int = ch.channel_id
        self.channels[number] = ch
        self.watch_returns(ch, number)
        ch.events["basic_ack"].add(lambda tag, multiple: self.confirmed(number, tag, multiple, True))
        ch.events["basic_nack"].add(lambda tag, multiple: self.confirmed(number, tag, multiple, False))
        return number

    def watch_returns(self, ch: Any, number: int) -> None:
        """Report the channel's basic.returns (py-amqp's `basic_return` listeners)."""
        ch.events["basic_return"].add(lambda exc, exchange, key, msg: self.emit(di.Returned(
            number, exc.reply_code, exc.reply_text, exchange, key, bytes(msg.body))))

    def close_channel(self, channel: int) -> None:
        self._call(self.channels[channel].close)

    def declare_queue(self, channel: int, queue: str, *, durable: bool = False, exclusive: bool = False,
                      auto_delete: bool = False, passive: bool = False,
                      arguments: Mapping[str, Any] | None = None) -> str:
        ok = self._call(lambda: self.channels[channel].queue_declare(
            queue, passive=passive, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
            arguments=dict(arguments or {})))
        return str(ok.queue)

    def declare_exchange(self, channel: int, exchange: str, kind: str = "direct", *, durable: bool = False,
                         passive: bool = False) -> None:
        self._call(lambda: self.channels[channel].exchange_declare(exchange, kind, passive=passive, durable=durable,
                                                                   auto_delete=False))

    def bind_queue(self, channel: int, queue: str, exchange: str, routing_key: str) -> None:
        self._call(lambda: self.channels[channel].queue_bind(queue, exchange, routing_key))

    def delete_queue(self, channel: int, queue: str) -> None:
        self._call(lambda: self.channels[channel].queue_delete(queue))

    def qos(self, channel: int, prefetch_count: int, global_: bool = False) -> None:
        self._call(lambda: self.channels[channel].basic_qos(0, prefetch_count, global_))

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes, *,
                properties: BasicProperties = di.NO_PROPERTIES, mandatory: bool = False) -> int | None:
        props = to_library(properties)
        if "headers" in props:
            props["application_headers"] = props.pop("headers")
        seq = self.next_seq(channel)
        self._call(lambda: self.channels[channel].basic_publish(amqp.Message(body, **props), exchange, routing_key,
                                                                mandatory=mandatory))
        return seq

    def confirm_select(self, channel: int) -> None:
        self._call(self.channels[channel].confirm_select)
        self.confirm_mode(channel)

    def _delivery(self, channel: int, msg: Any) -> di.Delivery:
        info = msg.delivery_info
        props = dict(msg.properties)
        if "application_headers" in props:
            props["headers"] = props.pop("application_headers")
        body = msg.body  # py-amqp decodes the body to str when content_encoding is set
        if isinstance(body, str):
            try:
                body = body.encode(props.get("content_encoding") or "utf-8")
            except LookupError:  # an encoding name Python does not know (kombu's "binary")
                body = body.encode("utf-8")
        body = bytes(body)
        return di.Delivery(channel, info["delivery_tag"], bool(info["redelivered"]), info["exchange"],
                           info["routing_key"], body, from_library(props), info.get("consumer_tag"),
                           info.get("message_count"))

    def consume(self, channel: int, queue: str, *, consumer_tag: str = "", no_ack: bool = False,
                exclusive: bool = False, arguments: Mapping[str, Any] | None = None) -> str:
        tag = self._call(lambda: self.channels[channel].basic_consume(
            queue, consumer_tag, no_ack=no_ack, exclusive=exclusive, arguments=dict(arguments or {}),
            callback=lambda msg: self.emit(di.Delivered(self._delivery(channel, msg))),
            on_cancel=lambda tag: self.emit(di.BrokerCancelled(channel, tag))))
        return str(tag)

    def cancel(self, channel: int, consumer_tag: str) -> None:
        self._call(lambda: self.channels[channel].basic_cancel(consumer_tag))

    def get(self, channel: int, queue: str, *, no_ack: bool = False) -> di.Delivery | None:
        msg = self._call(lambda: self.channels[channel].basic_get(queue, no_ack=no_ack))
        return None if msg is None else self._delivery(channel, msg)

    def ack(self, channel: int, delivery_tag: int, *, multiple: bool = False) -> None:
        self._call(lambda: self.channels[channel].basic_ack(delivery_tag, multiple))

    def nack(self, channel: int, delivery_tag: int, *, multiple: bool = False, requeue: bool = True) -> None:
        if not hasattr(self.channels[channel], "basic_nack"):  # py-amqp 5.x: basic.nack is not in its API
            raise di.Unsupported(f"py-amqp {amqp.__version__} has no basic_nack (Channel offers ack and reject only)")
        self._call(lambda: self.channels[channel].basic_nack(delivery_tag, multiple, requeue))

    def reject(self, channel: int, delivery_tag: int, *, requeue: bool = True) -> None:
        self._call(lambda: self.channels[channel].basic_reject(delivery_tag, requeue))

    def recover(self, channel: int, *, requeue: bool = True) -> None:
        self._call(lambda: self.channels[channel].basic_recover(requeue))

    def tx_select(self, channel: int) -> None:
        self._call(self.channels[channel].tx_select)

    def tx_commit(self, channel: int) -> None:
        self._call(self.channels[channel].tx_commit)

    def tx_rollback(self, channel: int) -> None:
        self._call(self.channels[channel].tx_rollback)

    def pump(self, timeout: float) -> None:
        if self.conn is None or not self.conn.connected:
            super().pump(min(timeout, 0.05))
            return
        try:
            self.conn.heartbeat_tick()
        except ae.ConnectionForced as exc:  # py-amqp's documented "the peer is dead": the application closes
            self.emit(di.ConnectionClosedEvent(None, f"heartbeat_tick: {exc}"))
            with contextlib.suppress(Exception):
                self.conn.collect()
            return
        try:
            self.conn.drain_events(timeout=max(timeout, 0.001))
        except TimeoutError:
            pass
        except ae.ChannelError as exc:  # how py-amqp reports a broker channel.close (no channel number)
            self.emit(di.ChannelClosedEvent(-1, exc.reply_code, exc.reply_text or str(exc)))
        except (ae.AMQPError, OSError) as exc:
            if self.conn.connected:  # raised out of drain_events, yet the connection is fine
                self.failure(exc, "drain_events")
            else:
                self.emit(di.ConnectionClosedEvent(getattr(exc, "reply_code", None),
                                                   getattr(exc, "reply_text", None) or f"{type(exc).__name__}: {exc}"))

    def state(self) -> dict[str, Any]:
        open_ = self.conn is not None and self.conn.connected
        return {"connection": "open" if open_ else "closed",
                "channels": {n: "open" if (open_ and ch.is_open) else "closed" for n, ch in self.channels.items()}}
