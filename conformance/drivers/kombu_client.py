"""KombuDriver: a `ClientDriver` over kombu (`kombu.Connection` on its py-amqp transport).

Rules: connections, declarations, publishing (`Producer`, with `on_return`), consuming
(`Consumer` with callbacks) and `SimpleQueue`-style gets go through kombu's own API; settling
by delivery tag and the confirm events use the py-amqp channel kombu hands out (kombu's
`Message.ack` does the same). kombu tells the application about a broker cancel by raising
`ConsumerCancelled` out of `drain_events`: that is reported as the cancel notice.
Heartbeats: the application calls `heartbeat_check` (kombu's contract), so the I/O loop does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import amqp.exceptions as ae
import kombu

from codec import BasicProperties
from conformance.drivers import interface as di
from conformance.drivers.amqp_client import AmqpDriver
from conformance.drivers.library import to_library


class KombuDriver(AmqpDriver):
    client = "kombu"
    distribution = "kombu"
    api = "kombu.Connection, Producer, Consumer"

    def __init__(self, timeout: float = 5.0) -> None:
        super().__init__(timeout)
        self.kombu: Any = None
        self.consumers: dict[str, Any] = {}
        self.producers: dict[tuple[Any, str], Any] = {}  # (the py-amqp channel, exchange) -> its Producer

    def connect(self, url: str, options: di.ConnectOptions = di.DEFAULT_CONNECT) -> None:
        # kombu hands transport options to py-amqp's Connection: read_timeout bounds every synchronous
        # method (else a call waits for ever on a broker that went silent, as py-amqp's driver says)
        transport_options: dict[str, Any] = {"read_timeout": self.timeout}
        if options.frame_max is not None:
            transport_options["frame_max"] = options.frame_max
        self.kombu = kombu.Connection(url.replace("amqp://", "pyamqp://", 1), heartbeat=options.heartbeat or 0,
                                      connect_timeout=self.timeout, transport_options=transport_options)
        self._call(lambda: self.kombu.ensure_connection(max_retries=1))
        self.conn = self.kombu.connection  # the py-amqp connection underneath
        self.conn.on_blocked = lambda reason: self.emit(di.Blocked(reason))
        self.conn.on_unblocked = lambda: self.emit(di.Unblocked())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.kombu is not None:
                self.kombu.release()

    def declare_queue(self, channel: int, queue: str, *, durable: bool = False, exclusive: bool = False,
                      auto_delete: bool = False, passive: bool = False,
                      arguments: Mapping[str, Any] | None = None) -> str:
        q = kombu.Queue(queue, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
                        queue_arguments=dict(arguments or {}), no_declare=False)
        bound = q(self.channels[channel])
        self._call(lambda: bound.queue_declare(passive=passive))
        return str(bound.name)

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes, *,
                properties: BasicProperties = di.NO_PROPERTIES, mandatory: bool = False) -> int | None:
        props = to_library(properties)
        headers = props.pop("headers", None)
        producer = self._producer(channel, exchange)
        seq = self.next_seq(channel)
        self._call(lambda: producer.publish(body, routing_key=routing_key, mandatory=mandatory, headers=headers,
                                            serializer=None, content_type=props.pop("content_type", None),
                                            content_encoding=props.pop("content_encoding", None), **props))
        return seq

    def watch_returns(self, ch: Any, number: int) -> None:
        """Nothing on the channel itself: kombu reports returns to the Producer's on_return (`_producer`)."""

    def _producer(self, channel: int, exchange: str) -> Any:
        """One kombu Producer per channel and exchange: each Producer adds its on_return to the
        channel's listeners, so one per publish would report a return once per earlier publish."""
        key = (self.channels[channel], exchange)
        if key not in self.producers:
            target = kombu.Exchange(exchange, no_declare=True) if exchange else None
            self.producers[key] = kombu.Producer(
                self.channels[channel], exchange=target, auto_declare=False,
                on_return=lambda exc, ex, rk, msg: self.emit(di.Returned(channel, exc.reply_code, exc.reply_text, ex,
                                                                         rk, bytes(msg.body))))
        return self.producers[key]

    def consume(self, channel: int, queue: str, *, consumer_tag: str = "", no_ack: bool = False,
                exclusive: bool = False, arguments: Mapping[str, Any] | None = None) -> str:
        def on_message(message: Any) -> None:
            self.emit(di.Delivered(self._delivery(channel, message)))

        q = kombu.Queue(queue, no_declare=True, consumer_arguments=dict(arguments or {}))
        consumer = kombu.Consumer(self.channels[channel], queues=[q], no_ack=no_ack, auto_declare=False,
                                  on_message=on_message, tag_prefix=consumer_tag or None)
        self._call(consumer.consume)
        tag = str(consumer._active_tags.get(queue))
        self.consumers[tag] = consumer
        return tag

    def cancel(self, channel: int, consumer_tag: str) -> None:
        consumer = self.consumers.pop(consumer_tag, None)
        if consumer is None:
            super().cancel(channel, consumer_tag)
        else:
            self._call(consumer.cancel)

    def _delivery(self, channel: int, message: Any) -> di.Delivery:
        """kombu's Message carries py-amqp's delivery_info, properties (headers apart) and body."""
        if isinstance(message, kombu.Message):
            raw = type("Raw", (), {})()
            raw.delivery_info = message.delivery_info
            raw.properties = {**message.properties, "application_headers": message.headers or None}
            raw.body = message.body
            message = raw
        return super()._delivery(channel, message)

    def get(self, channel: int, queue: str, *, no_ack: bool = False) -> di.Delivery | None:
        bound = kombu.Queue(queue, no_declare=True)(self.channels[channel])
        message = self._call(lambda: bound.get(no_ack=no_ack, accept=None))
        return None if message is None else self._delivery(channel, message)

    def pump(self, timeout: float) -> None:
        if self.kombu is None or self.conn is None or not self.conn.connected:
            super(AmqpDriver, self).pump(min(timeout, 0.05))
            return
        try:
            self.kombu.heartbeat_check()
        except ae.ConnectionForced as exc:
            self.emit(di.ConnectionClosedEvent(None, f"heartbeat_check: {exc}"))
            with contextlib.suppress(Exception):
                self.conn.collect()
            return
        try:
            self.kombu.drain_events(timeout=max(timeout, 0.001))
        except TimeoutError:
            pass
        except ae.ConsumerCancelled as exc:  # kombu's notice of a broker basic.cancel (its text is the tag)
            tag = str(exc.reply_text)
            consumer = self.consumers.pop(tag, None)
            self.emit(di.BrokerCancelled(consumer.channel.channel_id if consumer is not None else -1, tag))
        except ae.ChannelError as exc:
            self.emit(di.ChannelClosedEvent(-1, exc.reply_code, exc.reply_text or str(exc)))
        except (ae.AMQPError, OSError) as exc:
            if self.conn.connected:
                self.failure(exc, "drain_events")
            else:
                self.emit(di.ConnectionClosedEvent(getattr(exc, "reply_code", None),
                                                   getattr(exc, "reply_text", None) or f"{type(exc).__name__}: {exc}"))
