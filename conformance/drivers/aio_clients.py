"""AiormqDriver and AioPikaDriver: `ClientDriver`s over the asyncio libraries aiormq and aio-pika.

Rules: the library runs on its own event loop in a thread (docs/design.md decision 5); each operation
is a coroutine run there with the driver's timeout (`NoReply` when it does not finish). Callbacks
run on that loop and only append events. aiormq's and aio-pika's close exceptions carry their
reply code in the exception class (aiormq's EXCEPTION_MAPPING) or in their arguments; both become
`ChannelClosed` / `ConnectionClosed`. Publishes in confirm mode do not wait: the confirmation
future's outcome becomes the `Confirmed` event (the libraries expand a multiple confirm).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiormq
import aiormq.exceptions as ax
from aiormq.channel import EXCEPTION_MAPPING as CHANNEL_CODES
from aiormq.connection import EXCEPTION_MAPPING as CONNECTION_CODES
from pamqp.commands import Basic

from codec import BasicProperties
from conformance.drivers import interface as di
from conformance.drivers.library import LibraryDriver, from_library, plain, to_library

T = TypeVar("T")
_CODES: dict[type, int] = {cls: code for mapping in (CHANNEL_CODES, CONNECTION_CODES) for code, cls in mapping.items()}


def _closed(exc: BaseException) -> di.DriverError | None:
    """The interface outcome for a library close exception (None: not a close)."""
    code = _CODES.get(type(exc))
    args = list(getattr(exc, "args", ()))
    if code is None and args and isinstance(args[0], int):
        code = args[0]
    text = str(args[-1]) if args else str(exc)
    if isinstance(exc, ax.ChannelClosed):
        return di.ChannelClosed("channel", code or 0, text, 0, 0)
    if isinstance(exc, ax.ConnectionClosed):
        return di.ConnectionClosed("connection", code or 0, text, 0, 0)
    if isinstance(exc, ax.AMQPConnectionError | ConnectionError):
        return di.ConnectionLost(f"{type(exc).__name__}: {exc}")
    return None


class _AsyncDriver(LibraryDriver):
    """An event loop in a thread; `run` a coroutine on it, bounded."""

    def __init__(self, timeout: float = 5.0) -> None:
        super().__init__(timeout)
        self.loop = asyncio.new_event_loop()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="client-loop")
        self._thread.start()

    def emit(self, event: di.Event) -> None:
        super().emit(event)
        self._wake.set()

    def stop_loop(self) -> None:
        """End the client's loop once what is still pending on it has ended: a close the broker
        never answered, the library's reader and writer tasks, the closers those start as they
        unwind. Each round cancels them and gives them the driver's timeout; a task left pending
        when the loop stops is destroyed later, with "coroutine ... was never awaited" and
        "unclosed transport" warnings. Then the loop stops and is closed (once: a second close is a no-op)."""
        if self.loop.is_closed():
            return

        async def cancel_the_rest() -> None:
            for _ in range(3):  # a cancelled task may start another (aiormq's closers)
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                if not tasks:
                    break
                for task in tasks:
                    task.cancel()
                await asyncio.wait(tasks, timeout=self.timeout)
            await asyncio.sleep(0)  # the transports' connection_lost callbacks, scheduled by their close

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_the_rest(), self.loop).result(3 * self.timeout + 1)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(self.timeout)
        if not self._thread.is_alive():
            self.loop.close()

    def pump(self, timeout: float) -> None:
        self._wake.wait(timeout)
        self._wake.clear()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(self.timeout)
        except TimeoutError:
            future.cancel()
            raise di.NoReply(self.timeout, "the library's coroutine") from None
        except Exception as exc:
            mapped = _closed(exc) or self._closed_meanwhile(exc)
            if mapped is not None:
                raise mapped from None
            raise

    def _closed_meanwhile(self, exc: BaseException) -> di.DriverError | None:
        """A call that met a channel closing under it: its close, with the broker's code."""
        return None

    def watch(self, future: Any, channel: int, seq: int | None) -> None:
        """Report a publish's confirmation future as a Confirmed event when it resolves."""
        if seq is None:
            return

        def done(fut: Any) -> None:
            if fut.cancelled():
                return
            exc = fut.exception()
            ack = exc is None and not isinstance(fut.result(), Basic.Nack)
            self.confirmed_seqs(channel, [seq], ack)

        asyncio.run_coroutine_threadsafe(self._attach(future, done), self.loop)

    @staticmethod
    async def _attach(future: Any, done: Any) -> None:
        asyncio.ensure_future(future).add_done_callback(done)


def _url(url: str, options: di.ConnectOptions) -> str:
    query = {k: v for k, v in (("heartbeat", options.heartbeat), ("frame_max", options.frame_max),
                               ("channel_max", options.channel_max)) if v is not None}
    return f"{url}?{urlencode(query)}" if query else url


class AiormqDriver(_AsyncDriver):
    client = "aiormq"
    distribution = "aiormq"
    api = "aiormq.connect"
    # aiormq 7.2 hands a basic.return to the application only for a publish it tracks for a
    # confirm: on a channel without confirms it logs "Unhandled message ... returning" and drops it
    features = frozenset({"returns-need-confirms"})

    def __init__(self, timeout: float = 5.0) -> None:
        super().__init__(timeout)
        self.conn: Any = None
        self.channels: dict[int, Any] = {}
        self._using: int | None = None  # the channel of the call under way (_closed_meanwhile)

    def connect(self, url: str, options: di.ConnectOptions = di.DEFAULT_CONNECT) -> None:
        self.conn = self.run(aiormq.connect(_url(url, options)))
        self.conn.closing.add_done_callback(self._on_connection_closed)

    def _on_connection_closed(self, fut: Any) -> None:
        exc = None if fut.cancelled() else fut.exception()
        mapped = _closed(exc) if exc is not None else None
        code = mapped.code if isinstance(mapped, di.Closed) else None
        self.emit(di.ConnectionClosedEvent(code, str(exc)))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.conn is not None and not self.conn.is_closed:
                self.run(self.conn.close())
        self.stop_loop()

    def open_channel(self) -> int:
        ch = self.run(self.conn.channel(publisher_confirms=False, on_return_raises=False))
        number: int = ch.number
        self.channels[number] = ch
        ch.on_return_callbacks.add(lambda msg: self.emit(di.Returned(
            number, msg.delivery.reply_code, msg.delivery.reply_text, msg.delivery.exchange,
            msg.delivery.routing_key, bytes(msg.body))))
        ch.on_consumer_cancel_callbacks.add(lambda frame: self.emit(di.BrokerCancelled(number, frame.consumer_tag)))
        ch.closing.add_done_callback(lambda fut: self._on_channel_closed(number, fut))
        return number

    def _closed_meanwhile(self, exc: BaseException) -> di.DriverError | None:
        # aiormq raises ChannelInvalidStateError ("Channel closed by RPC timeout") for a call
        # made while the broker's channel.close is being handled: wait for the close itself
        if not isinstance(exc, ax.ChannelInvalidStateError) or self._using is None:
            return None
        channel = self.channels[self._using]

        async def reason() -> BaseException | None:
            closing = channel.closing
            await asyncio.wait([closing], timeout=self.timeout)
            if not closing.done():
                return None
            if closing.cancelled():  # aiormq cancels with the close's reason as the message
                return None
            reason: BaseException | None = closing.exception()
            return reason

        closed = asyncio.run_coroutine_threadsafe(reason(), self.loop).result(self.timeout + 1)
        return _closed(closed) if closed is not None else None

    def _ch(self, number: int) -> Any:
        """Channel `number`; one already closed raises its close with the broker's code (aiormq
        itself raises ChannelInvalidStateError, without the code, for a call on a closed channel)."""
        ch = self.channels[number]
        self._using = number
        if ch.is_closed:
            reason = ch.closing.exception() if not ch.closing.cancelled() else None
            mapped = _closed(reason) if reason is not None else None
            raise mapped if mapped is not None else di.ChannelClosed("channel", 0, f"{ch!r} is closed", 0, 0)
        return ch

    def _on_channel_closed(self, number: int, fut: Any) -> None:
        exc = None if fut.cancelled() else fut.exception()
        mapped = _closed(exc) if exc is not None else None
        self.emit(di.ChannelClosedEvent(number, mapped.code if isinstance(mapped, di.Closed) else None, str(exc)))

    def close_channel(self, channel: int) -> None:
        self.run(self._ch(channel).close())

    def declare_queue(self, channel: int, queue: str, *, durable: bool = False, exclusive: bool = False,
                      auto_delete: bool = False, passive: bool = False,
                      arguments: Mapping[str, Any] | None = None) -> str:
        ok = self.run(self._ch(channel).queue_declare(queue, passive=passive, durable=durable,
                                                           exclusive=exclusive, auto_delete=auto_delete,
                                                           arguments=dict(arguments or {})))
        return str(ok.queue)

    def declare_exchange(self, channel: int, exchange: str, kind: str = "direct", *, durable: bool = False,
                         passive: bool = False) -> None:
        self.run(self._ch(channel).exchange_declare(exchange, exchange_type=kind, passive=passive,
                                                         durable=durable))

    def bind_queue(self, channel: int, queue: str, exchange: str, routing_key: str) -> None:
        self.run(self._ch(channel).queue_bind(queue, exchange, routing_key))

    def delete_queue(self, channel: int, queue: str) -> None:
        self.run(self._ch(channel).queue_delete(queue))

    def qos(self, channel: int, prefetch_count: int, global_: bool = False) -> None:
        self.run(self._ch(channel).basic_qos(prefetch_count=prefetch_count, global_=global_))

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes, *,
                properties: BasicProperties = di.NO_PROPERTIES, mandatory: bool = False) -> int | None:
        ch = self._ch(channel)
        props = Basic.Properties(**{k: v for k, v in to_library(properties).items() if k != "type"},
                                 message_type=properties.message_type)
        seq = self.next_seq(channel)

        async def send() -> Any:  # the publish is written at once; its confirmation resolves later
            return asyncio.ensure_future(ch.basic_publish(body, exchange=exchange, routing_key=routing_key,
                                                          properties=props, mandatory=mandatory))

        future = self.run(send())
        self.watch(future, channel, seq)
        return seq

    def confirm_select(self, channel: int) -> None:
        ch = self._ch(channel)
        self.run(ch.rpc(aiormq.spec.Confirm.Select()))
        # what aiormq does when it opens a channel with publisher_confirms: the broker counts from here
        ch.publisher_confirms, ch.delivery_tag = True, 0
        self.confirm_mode(channel)

    def _delivery(self, channel: int, msg: Any, consumer: bool = True) -> di.Delivery:
        d = msg.delivery
        props = from_library(msg.header.properties)._replace(
            message_type=msg.header.properties.message_type,
            cluster_id=msg.header.properties.cluster_id or None,  # pamqp shows an absent cluster-id as ""
            headers=plain(msg.header.properties.headers) if msg.header.properties.headers is not None else None)
        return di.Delivery(channel, d.delivery_tag, bool(d.redelivered), d.exchange, d.routing_key, bytes(msg.body),
                           props, getattr(d, "consumer_tag", None) if consumer else None,
                           None if consumer else getattr(d, "message_count", None))

    def consume(self, channel: int, queue: str, *, consumer_tag: str = "", no_ack: bool = False,
                exclusive: bool = False, arguments: Mapping[str, Any] | None = None) -> str:
        async def on_message(msg: Any) -> None:
            self.emit(di.Delivered(self._delivery(channel, msg)))

        ok = self.run(self._ch(channel).basic_consume(queue, on_message, no_ack=no_ack, exclusive=exclusive,
                                                           arguments=dict(arguments or {}),
                                                           consumer_tag=consumer_tag or None))
        return str(ok.consumer_tag)

    def cancel(self, channel: int, consumer_tag: str) -> None:
        self.run(self._ch(channel).basic_cancel(consumer_tag))

    def get(self, channel: int, queue: str, *, no_ack: bool = False) -> di.Delivery | None:
        msg = self.run(self._ch(channel).basic_get(queue, no_ack=no_ack))
        if isinstance(msg.delivery, Basic.GetEmpty):
            return None
        return self._delivery(channel, msg, consumer=False)

    def ack(self, channel: int, delivery_tag: int, *, multiple: bool = False) -> None:
        self.run(self._ch(channel).basic_ack(delivery_tag, multiple=multiple))

    def nack(self, channel: int, delivery_tag: int, *, multiple: bool = False, requeue: bool = True) -> None:
        self.run(self._ch(channel).basic_nack(delivery_tag, multiple=multiple, requeue=requeue))

    def reject(self, channel: int, delivery_tag: int, *, requeue: bool = True) -> None:
        self.run(self._ch(channel).basic_reject(delivery_tag, requeue=requeue))

    def recover(self, channel: int, *, requeue: bool = True) -> None:
        self.run(self._ch(channel).basic_recover(requeue=requeue))

    def tx_select(self, channel: int) -> None:
        self.run(self._ch(channel).tx_select())

    def tx_commit(self, channel: int) -> None:
        self.run(self._ch(channel).tx_commit())

    def tx_rollback(self, channel: int) -> None:
        self.run(self._ch(channel).tx_rollback())

    def state(self) -> dict[str, Any]:
        open_ = self.conn is not None and not self.conn.is_closed
        return {"connection": "open" if open_ else "closed",
                "channels": {n: "closed" if ch.is_closed else "open" for n, ch in self.channels.items()}}


class AioPikaDriver(AiormqDriver):
    """aio-pika's API (connect, channel, queues, exchanges, messages) over aiormq. aio-pika has no
    consumer-cancel hook of its own: an application reaches aiormq's through
    `get_underlay_channel()`, and so does this driver; settling by tag goes the same way."""

    client = "aio-pika"
    distribution = "aio-pika"
    api = "aio_pika.connect"

    def __init__(self, timeout: float = 5.0) -> None:
        super().__init__(timeout)
        self.pika_channels: dict[int, Any] = {}

    def connect(self, url: str, options: di.ConnectOptions = di.DEFAULT_CONNECT) -> None:
        import aio_pika

        self.connection = self.run(aio_pika.connect(_url(url, options)))
        assert self.connection.transport is not None
        self.conn = self.connection.transport.connection
        self.conn.closing.add_done_callback(self._on_connection_closed)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.conn is not None and not self.conn.is_closed:
                self.run(self.connection.close())
        self.stop_loop()

    def _open(self, number: int | None, confirms: bool) -> int:
        channel = self.run(self._channel(number, confirms))
        underlay = self.run(channel.get_underlay_channel())
        number = int(underlay.number)
        self.pika_channels[number], self.channels[number] = channel, underlay
        channel.return_callbacks.add(lambda _ch, msg: self.emit(di.Returned(  # aio-pika shows no reply code
            number, None, "", msg.exchange or "", msg.routing_key or "", bytes(msg.body))))
        underlay.on_consumer_cancel_callbacks.add(lambda frame: self.emit(di.BrokerCancelled(number, frame.consumer_tag)))
        channel.close_callbacks.add(lambda _ch, exc: self._on_channel_closed(number, _Done(exc)))
        return number

    async def _channel(self, number: int | None, confirms: bool) -> Any:
        return await self.connection.channel(channel_number=number, publisher_confirms=confirms, on_return_raises=False)

    def open_channel(self) -> int:
        return self._open(None, confirms=False)

    def confirm_select(self, channel: int) -> None:
        """aio-pika chooses confirms when it opens a channel: reopen this number with them."""
        self.run(self.pika_channels[channel].close())
        self._open(channel, confirms=True)
        self.confirm_mode(channel)

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes, *,
                properties: BasicProperties = di.NO_PROPERTIES, mandatory: bool = False) -> int | None:
        import aio_pika

        ch = self.pika_channels[channel]
        message = aio_pika.Message(body, **to_library(properties))
        seq = self.next_seq(channel)

        async def send() -> Any:
            target = ch.default_exchange if exchange == "" else await ch.get_exchange(exchange, ensure=False)
            return asyncio.ensure_future(target.publish(message, routing_key, mandatory=mandatory))

        self.watch(self.run(send()), channel, seq)
        return seq

    def consume(self, channel: int, queue: str, *, consumer_tag: str = "", no_ack: bool = False,
                exclusive: bool = False, arguments: Mapping[str, Any] | None = None) -> str:
        async def on_message(msg: Any) -> None:
            self.emit(di.Delivered(self._incoming(channel, msg)))

        async def start() -> Any:
            q = await self.pika_channels[channel].get_queue(queue, ensure=False)
            return await q.consume(on_message, no_ack=no_ack, exclusive=exclusive, arguments=dict(arguments or {}),
                                   consumer_tag=consumer_tag or None)

        return str(self.run(start()))

    def _incoming(self, channel: int, msg: Any) -> di.Delivery:
        props = from_library(msg)
        expiration = msg.expiration  # aio-pika shows it in seconds; on the wire it is milliseconds
        if expiration is not None and not isinstance(expiration, str):
            expiration = str(int(float(getattr(expiration, "total_seconds", lambda: expiration)()) * 1000))
        props = props._replace(expiration=expiration, headers=plain(msg.headers) if msg.headers else None,
                               delivery_mode=int(msg.delivery_mode) if msg.delivery_mode is not None else None)
        return di.Delivery(channel, msg.delivery_tag, bool(msg.redelivered), msg.exchange or "", msg.routing_key or "",
                           bytes(msg.body), props, msg.consumer_tag, getattr(msg, "message_count", None))

    def get(self, channel: int, queue: str, *, no_ack: bool = False) -> di.Delivery | None:
        async def fetch() -> Any:
            q = await self.pika_channels[channel].get_queue(queue, ensure=False)
            return await q.get(no_ack=no_ack, fail=False)

        msg = self.run(fetch())
        return None if msg is None else self._incoming(channel, msg)


class _Done:
    """A finished-future stand-in for a close callback's exception."""

    def __init__(self, exc: BaseException | None) -> None:
        self._exc = exc

    def cancelled(self) -> bool:
        return False

    def exception(self) -> BaseException | None:
        return self._exc
