"""PikaDriver: a `ClientDriver` over pika's BlockingConnection (the API most pika users write).

Rules: the broker's closes arrive as pika's ChannelClosedByBroker / ConnectionClosedByBroker and
become `ChannelClosed` / `ConnectionClosed` (pika keeps no class/method id: 0/0); callbacks
(consumers, broker cancels, returns, blocked) become events; in confirm mode basic_publish
blocks until the broker confirms (feature "confirms-block-publish"): a NackError becomes
`Confirmed(ack=False)`, an UnroutableError a `Returned` then `Confirmed(ack=True)` (pika also
hands that return to the channel's return callback, later: in confirm mode the callback's copy
is not reported again; a return that comes after its ack, pika keeps and raises with the next
publish's UnroutableError, which is then the driver's report of it). An
exception from `process_data_events` that is not a close is a `ClientFailure`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pika
import pika.exceptions as pe

from codec import BasicProperties
from conformance.drivers import interface as di
from conformance.drivers.library import LibraryDriver, from_library, plain, to_library

T = TypeVar("T")
AWAITED = "the broker's reply, or in confirm mode the publish's confirm (pika waits for either without a bound)"


class _Expired(Exception):
    """Raised by the timer that bounds a blocking pika call (`PikaDriver._bounded`)."""


class PikaDriver(LibraryDriver):
    client = "pika"
    distribution = "pika"
    api = "BlockingConnection"
    features = frozenset({"confirms-block-publish"})

    def __init__(self, timeout: float = 5.0) -> None:
        super().__init__(timeout)
        self.conn: Any = None
        self.channels: dict[int, Any] = {}

    def _call(self, fn: Callable[[], T]) -> T:
        """Run a pika call, bounded by the driver's timeout once connected (`_bounded`), its
        exceptions turned into the interface's."""
        try:
            return fn() if self.conn is None else self._bounded(fn, AWAITED)
        except pe.ChannelClosedByBroker as exc:
            raise di.ChannelClosed("channel", exc.reply_code, exc.reply_text, 0, 0) from None
        except pe.ConnectionClosedByBroker as exc:
            raise di.ConnectionClosed("connection", exc.reply_code, exc.reply_text, 0, 0) from None
        except (pe.StreamLostError, pe.AMQPHeartbeatTimeout, pe.IncompatibleProtocolError) as exc:
            raise di.ConnectionLost(f"{type(exc).__name__}: {exc}") from None

    def connect(self, url: str, options: di.ConnectOptions = di.DEFAULT_CONNECT) -> None:
        params = pika.URLParameters(url)
        for name in ("heartbeat", "frame_max", "channel_max"):
            if getattr(options, name) is not None:
                setattr(params, name, getattr(options, name))
        params.connection_attempts = 1
        params.socket_timeout = self.timeout
        params.stack_timeout = self.timeout  # the whole bring-up: TCP and the AMQP handshake
        self.conn = self._call(lambda: pika.BlockingConnection(params))
        self.conn.add_on_connection_blocked_callback(lambda _c, frame: self.emit(di.Blocked(frame.method.reason)))
        self.conn.add_on_connection_unblocked_callback(lambda _c, _f: self.emit(di.Unblocked()))
        self.conn._impl.add_on_close_callback(self._on_connection_closed)

    def _on_connection_closed(self, _conn: Any, reason: Exception) -> None:
        code = getattr(reason, "reply_code", None)
        self.emit(di.ConnectionClosedEvent(code, getattr(reason, "reply_text", None) or f"{type(reason).__name__}: {reason}"))

    def close(self) -> None:
        """Close within the driver's timeout: a broker that does not answer connection.close has
        its TCP connection dropped (pika would wait for close-ok until the heartbeat gave up)."""
        if self.conn is None or not self.conn.is_open:
            return
        try:
            self._bounded(self.conn.close, "connection.close-ok")
        except di.NoReply:
            with contextlib.suppress(Exception):
                self.conn._impl._terminate_stream(ConnectionAbortedError(f"no close-ok within {self.timeout} s"))
                self.conn.process_data_events(time_limit=0)
        except Exception:  # closing what the broker may already have closed
            pass

    def open_channel(self) -> int:
        ch = self._call(self.conn.channel)
        number: int = ch.channel_number
        self.channels[number] = ch
        ch.add_on_cancel_callback(lambda frame: self.emit(di.BrokerCancelled(number, frame.method.consumer_tag)))
        ch.add_on_return_callback(lambda _ch, method, _props, body: None if number in self.published else self.emit(
            di.Returned(number, method.reply_code, method.reply_text, method.exchange, method.routing_key, body)))
        ch._impl.add_on_close_callback(lambda _impl, reason: self.emit(di.ChannelClosedEvent(
            number, getattr(reason, "reply_code", None), getattr(reason, "reply_text", str(reason)))))
        return number

    def close_channel(self, channel: int) -> None:
        self._call(self.channels[channel].close)

    def declare_queue(self, channel: int, queue: str, *, durable: bool = False, exclusive: bool = False,
                      auto_delete: bool = False, passive: bool = False,
                      arguments: Mapping[str, Any] | None = None) -> str:
        ok = self._call(lambda: self.channels[channel].queue_declare(
            queue, passive=passive, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
            arguments=dict(arguments or {})))
        name: str = ok.method.queue
        return name

    def declare_exchange(self, channel: int, exchange: str, kind: str = "direct", *, durable: bool = False,
                         passive: bool = False) -> None:
        self._call(lambda: self.channels[channel].exchange_declare(exchange, kind, passive=passive, durable=durable))

    def bind_queue(self, channel: int, queue: str, exchange: str, routing_key: str) -> None:
        self._call(lambda: self.channels[channel].queue_bind(queue, exchange, routing_key))

    def delete_queue(self, channel: int, queue: str) -> None:
        self._call(lambda: self.channels[channel].queue_delete(queue))

    def qos(self, channel: int, prefetch_count: int, global_: bool = False) -> None:
        self._call(lambda: self.channels[channel].basic_qos(prefetch_count=prefetch_count, global_qos=global_))

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes, *,
                properties: BasicProperties = di.NO_PROPERTIES, mandatory: bool = False) -> int | None:
        seq = self.next_seq(channel)
        props = pika.BasicProperties(**to_library(properties))
        try:
            self._call(lambda: self.channels[channel].basic_publish(
                exchange, routing_key, body, props, mandatory=mandatory))
        except pe.NackError:
            self.confirmed_seqs(channel, [seq or 0], ack=False)
            return seq
        except pe.UnroutableError as exc:
            for message in exc.messages:
                m = message.method
                self.emit(di.Returned(channel, m.reply_code, m.reply_text, m.exchange, m.routing_key, message.body))
            self.confirmed_seqs(channel, [seq or 0], ack=True)
            return seq
        if seq is not None:
            self.confirmed_seqs(channel, [seq], ack=True)
        return seq

    def _bounded(self, fn: Callable[[], T], awaited: str) -> T:
        """Run a call pika does not bound: a synchronous method waits for its reply (and, in
        confirm mode, basic_publish for the confirm) without a time limit, until the heartbeat
        gives up (two intervals: 120 s at RabbitMQ's default). A timer on pika's own I/O loop
        (which runs while it waits) ends the wait after the driver's timeout: `NoReply`
        (interface rules)."""
        def expire() -> None:
            raise _Expired

        timer = self.conn._impl.ioloop.call_later(self.timeout, expire)
        try:
            return fn()
        except _Expired:
            raise di.NoReply(self.timeout, awaited) from None
        finally:
            self.conn._impl.ioloop.remove_timeout(timer)

    def confirm_select(self, channel: int) -> None:
        self._call(self.channels[channel].confirm_delivery)
        self.confirm_mode(channel)

    def consume(self, channel: int, queue: str, *, consumer_tag: str = "", no_ack: bool = False,
                exclusive: bool = False, arguments: Mapping[str, Any] | None = None) -> str:
        def on_message(_ch: Any, method: Any, props: Any, body: bytes) -> None:
            self.emit(di.Delivered(di.Delivery(channel, method.delivery_tag, method.redelivered, method.exchange,
                                               method.routing_key, body, self._props(props), method.consumer_tag)))

        tag: str = self._call(lambda: self.channels[channel].basic_consume(
            queue, on_message, auto_ack=no_ack, exclusive=exclusive, consumer_tag=consumer_tag or None,
            arguments=dict(arguments or {})))
        return tag

    @staticmethod
    def _props(props: Any) -> BasicProperties:
        found = from_library(props)
        headers = plain(props.headers) if props.headers is not None else None
        return found._replace(headers=headers)

    def cancel(self, channel: int, consumer_tag: str) -> None:
        self._call(lambda: self.channels[channel].basic_cancel(consumer_tag))

    def get(self, channel: int, queue: str, *, no_ack: bool = False) -> di.Delivery | None:
        method, props, body = self._call(lambda: self.channels[channel].basic_get(queue, auto_ack=no_ack))
        if method is None:
            return None
        return di.Delivery(channel, method.delivery_tag, method.redelivered, method.exchange, method.routing_key,
                           body, self._props(props), None, method.message_count)

    def ack(self, channel: int, delivery_tag: int, *, multiple: bool = False) -> None:
        self._call(lambda: self.channels[channel].basic_ack(delivery_tag, multiple))

    def nack(self, channel: int, delivery_tag: int, *, multiple: bool = False, requeue: bool = True) -> None:
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
        if self.conn is None or not self.conn.is_open:
            super().pump(min(timeout, 0.05))
            return
        with contextlib.suppress(pe.ConnectionClosedByBroker, pe.StreamLostError, pe.AMQPHeartbeatTimeout,
                                 pe.ConnectionWrongStateError):  # reported by the close callback
            self.conn.process_data_events(time_limit=timeout)

    def state(self) -> dict[str, Any]:
        return {"connection": "open" if self.conn is not None and self.conn.is_open else "closed",
                "channels": {n: "open" if ch.is_open else "closed" for n, ch in self.channels.items()}}
