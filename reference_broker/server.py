"""The asyncio transport: moves bytes between sockets and the sans-IO engines, runs timers.

Rules: this module only moves bytes and executes effects (docs/design.md (conventions) "thin transports");
every decision is in `reference_broker.core` or `reference_broker.protocol`. Writes for one
input batch are joined per connection into one `transport.write`. uvloop is used when
installed. `EmbeddedBroker` runs a server on its own event loop in a thread (for the harness
and tests) and stops it cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from codec.constants import ReplyCode
from reference_broker.config import BrokerConfig
from reference_broker.core import (
    BrokerCore,
    CancelTimer,
    CloseConnection,
    Log,
    Meta,
    Send,
    StartTimer,
    durability,
)
from reference_broker.core.effects import PauseReading, Persist
from reference_broker.management import build_app
from reference_broker.protocol import states
from reference_broker.protocol.connection import CloseTransport, Output, ServerConnection, Write
from reference_broker.storage import Store

log = logging.getLogger("reference_broker")
TICK_SECONDS = 0.1  # heartbeat resolution: a 1 s heartbeat is sent after 0.5-0.6 s of silence


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class _ClientProtocol(asyncio.Protocol):
    def __init__(self, server: BrokerServer, node: int = 1) -> None:
        self.server = server
        self.node = node  # the cluster node whose listener accepted it (1 on a single node)
        self.transport: asyncio.Transport | None = None
        self.engine: ServerConnection | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        name = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.engine = self.server.register(self, name)
        log.info("accepted connection %s (conn %d)", name, self.engine.id)
        if self.server.config.handshake_timeout:
            asyncio.get_running_loop().call_later(self.server.config.handshake_timeout / 1000,
                                                  self._handshake_deadline)

    def _handshake_deadline(self) -> None:
        """RabbitMQ's handshake_timeout: a connection not open by now is closed, so idle
        sockets cannot hold connection slots."""
        engine, transport = self.engine, self.transport
        if (engine is not None and transport is not None and not transport.is_closing()
                and engine.state in (states.HEADER, *states.HANDSHAKE_STATES)):
            log.info("closing connection %s: handshake_timeout", engine.peer)
            transport.close()

    def data_received(self, data: bytes) -> None:
        if self.engine is not None:
            self.server.execute(self.engine.receive_data(data, now_ms()))

    def pause_writing(self) -> None:
        if self.engine is not None:
            self.server.execute(self.server.core.set_writable(Meta(now_ms()), self.engine.id, False))

    def resume_writing(self) -> None:
        if self.engine is not None:
            meta = Meta(now_ms())
            self.server.execute([*self.server.core.set_writable(meta, self.engine.id, True),
                                 *self.server.core.flush()])

    def connection_lost(self, exc: Exception | None) -> None:
        if self.engine is not None:
            log.info("connection %s closed (conn %d)", self.engine.peer, self.engine.id)
            outputs = self.engine.transport_lost(now_ms())
            self.server.unregister(self.engine.id)
            self.server.execute(outputs)


class BrokerServer:
    """Listens, owns the core, executes effects."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.core = BrokerCore(config)
        self.core.clock_offset_ms = int(time.time() * 1000) - now_ms()  # the wall clock, for x-death times
        self.clients: dict[int, _ClientProtocol] = {}
        self.timers: dict[tuple[object, ...], asyncio.TimerHandle] = {}
        self._next_conn = 0
        self.listeners: dict[int, asyncio.base_events.Server] = {}  # node -> its listener (1 on a single node)
        self.node_ports: dict[int, int] = {}
        self._ticker: asyncio.TimerHandle | None = None
        self._management: Any = None  # aiohttp AppRunner when the management API runs
        self.address: tuple[str, int] = ("", 0)
        self.management_port: int | None = None
        self.store: Any = None  # reference_broker.storage.Store when config.data_dir is set
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> tuple[str, int]:
        loop = self._loop = asyncio.get_running_loop()
        if self.config.data_dir:
            self._open_store()
        host, port = await self._listen(1, self.config.port)
        for node in range(2, self.config.nodes + 1):  # a cluster: consecutive ports
            await self._listen(node, port + node - 1 if self.config.port else 0)
        self.address = (host, port)
        self._ticker = loop.call_later(TICK_SECONDS, self._tick)
        log.info("listening on %s:%d (rules of RabbitMQ %s)", host, port, self.config.emulates)
        if self.config.management_port is not None:
            await self._start_management()
        return host, port

    async def _listen(self, node: int, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(lambda: _ClientProtocol(self, node), self.config.host, port,
                                            reuse_address=True)
        self.listeners[node] = listener
        host, self.node_ports[node] = listener.sockets[0].getsockname()[:2]
        if self.config.nodes > 1:
            log.info("node %d listening on %s:%d", node, host, self.node_ports[node])
        return host, self.node_ports[node]

    async def stop_node(self, node: int, crash: bool = False) -> bool:
        """A cluster node stops: its listener closes, its connections end as a dying node's do
        (aborted, no connection.close), then the core hears of it. `crash`: it is killed, so the
        other nodes lose its connections unreachable (core/disconnected.py). False: not running."""
        listener = self.listeners.pop(node, None) if self.config.nodes > 1 else None
        if listener is None:
            return False
        if crash:
            self.core.node_crashing(node)
        listener.close()
        for conn_id, client in list(self.clients.items()):
            if client.node == node and client.engine is not None:
                engine, client.engine = client.engine, None  # connection_lost has nothing left to do
                self.unregister(conn_id)
                self.execute(engine.transport_lost(now_ms()))
                if client.transport is not None:
                    client.transport.abort()
        await listener.wait_closed()
        self.execute([*self.core.node_down(Meta(now_ms()), node), *self.core.flush()])
        log.info("node %d stopped", node)
        return True

    async def start_node(self, node: int) -> bool:
        """A stopped cluster node starts again on its port. False: running, or no such node."""
        if node in self.listeners or node not in self.node_ports:
            return False
        await self._listen(node, self.node_ports[node])
        self.execute([*self.core.node_up(Meta(now_ms()), node), *self.core.flush()])
        return True

    async def _start_management(self) -> None:
        self._management = web.AppRunner(build_app(self), access_log=None)
        await self._management.setup()
        site = web.TCPSite(self._management, self.config.host, self.config.management_port)
        await site.start()
        self.management_port = int(self._management.addresses[0][1])
        log.info("management API on http://%s:%s/api/", self.config.host, self.management_port)

    def _open_store(self) -> None:
        """Recover the durable state from the data directory, then start its writer."""
        self.store = Store(str(self.config.data_dir))
        definitions, messages = self.store.load()
        durability.restore(self.core, Meta(now_ms()), definitions, messages)
        log.info("recovered %d persistent message(s) from %s", len(messages), self.config.data_dir)
        self.store.start(self._stored_threadsafe)
        self.execute(self.core.flush())

    def _stored_threadsafe(self, position: int) -> None:
        """From the store's writer thread: the journal is durable up to `position`."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop stopped while the commit ran
                loop.call_soon_threadsafe(self._stored, position)

    def _stored(self, position: int) -> None:
        self.execute([*self.core.stored(position), *self.core.flush()])

    def connection_name(self, conn_id: int) -> str:
        """RabbitMQ's connection name: "<peer> -> <listener>"."""
        client = self.clients.get(conn_id)
        peer = client.engine.peer if client is not None and client.engine is not None else "?"
        return f"{peer} -> {self.address[0]}:{self.address[1]}"

    def heartbeat_of(self, conn_id: int) -> int | None:
        """The connection's negotiated heartbeat in seconds (HB-01), None before tune-ok."""
        client = self.clients.get(conn_id)
        return client.engine.heartbeat if client is not None and client.engine is not None else None

    def force_close(self, conn_id: int, reason: str) -> None:
        """Close a connection with 320 CONNECTION_FORCED (ERR-04), as an operator would."""
        client = self.clients.get(conn_id)
        if client is not None and client.engine is not None:
            self.execute(client.engine.close_from_broker(now_ms(), ReplyCode.CONNECTION_FORCED, f"CONNECTION_FORCED - {reason}"))

    def apply_policies(self, vhost: str, policies: dict[str, dict[str, Any]], operator: bool = False) -> None:
        """Replace a vhost's policies (or operator policies); they apply to existing queues at once."""
        self.core.set_policies(vhost, policies, operator)
        meta = Meta(now_ms())
        effects = [e for q in list(self.core.vhosts[vhost].queues.values()) for e in self.core.dispatch(meta, q)]
        self.execute([*effects, *self.core.flush()])

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        if self._management is not None:
            await self._management.cleanup()
        for handle in self.timers.values():
            handle.cancel()
        listeners, self.listeners = list(self.listeners.values()), {}
        for listener in listeners:
            listener.close()
        for client in list(self.clients.values()):
            if client.transport is not None:
                client.transport.abort()
        for listener in listeners:
            await listener.wait_closed()
        if self.store is not None:
            self.store.close()

    def register(self, client: _ClientProtocol, peer: str) -> ServerConnection:
        self._next_conn += 1
        engine = ServerConnection(self._next_conn, self.core, peer)
        self.clients[engine.id] = client
        self.core.connection_attached(engine.id, client.node)
        return engine

    def unregister(self, conn_id: int) -> None:
        self.clients.pop(conn_id, None)

    def execute(self, outputs: Sequence[Output]) -> None:
        pending: dict[int, list[bytes]] = defaultdict(list)
        closing: list[tuple[int, str]] = []
        for out in outputs:
            if isinstance(out, Send):
                client = self.clients.get(out.conn)
                if client is not None and client.engine is not None:
                    pending[out.conn].append(client.engine.encode(out))
            elif isinstance(out, Write):
                pending[out.conn].append(out.data)
            elif isinstance(out, CloseTransport):
                closing.append((out.conn, out.reason))
            elif isinstance(out, StartTimer):
                self._start_timer(out)
            elif isinstance(out, CancelTimer):
                handle = self.timers.pop(out.key, None)
                if handle is not None:
                    handle.cancel()
            elif isinstance(out, PauseReading):
                target = self.clients.get(out.conn)
                if target is not None and target.transport is not None and not target.transport.is_closing():
                    if out.paused:
                        target.transport.pause_reading()
                    else:
                        target.transport.resume_reading()
                        # ALM-02: the frames read before the block wait in the engine
                        asyncio.get_running_loop().call_soon(self._resume_engine, out.conn)
            elif isinstance(out, Persist):
                if self.store is not None:
                    self.store.submit(out.ops, out.position)
            elif isinstance(out, Log):
                log.log(logging.getLevelName(out.level.upper()), out.text)
            elif isinstance(out, CloseConnection):
                log.warning("conn %d closed by the broker: %d %s", out.conn, out.code, out.text)
        for conn_id, chunks in pending.items():
            client = self.clients.get(conn_id)
            if client is not None and client.transport is not None and not client.transport.is_closing():
                client.transport.write(b"".join(chunks))
        for conn_id, reason in closing:
            client = self.clients.get(conn_id)
            if client is not None and client.transport is not None:
                log.info("closing connection %d: %s", conn_id, reason)
                client.transport.close()

    def _start_timer(self, timer: StartTimer) -> None:
        loop = asyncio.get_running_loop()
        old = self.timers.pop(timer.key, None)
        if old is not None:
            old.cancel()
        delay = max(0.0, (timer.at_ms - now_ms()) / 1000)
        self.timers[timer.key] = loop.call_later(delay, self._timer_fired, timer.key)

    def _timer_fired(self, key: tuple[object, ...]) -> None:
        self.timers.pop(key, None)
        meta = Meta(now_ms())
        self.execute([*self.core.timer_fired(meta, key), *self.core.flush()])

    def _resume_engine(self, conn_id: int) -> None:
        client = self.clients.get(conn_id)
        if client is not None and client.engine is not None:
            self.execute(client.engine.receive_data(b"", now_ms()))

    def _tick(self) -> None:
        now = now_ms()
        self.execute(self.core.memory_check())  # acks and consumers drain without publishes
        for _conn_id, client in list(self.clients.items()):
            if client.engine is not None:
                self.execute(client.engine.tick(now))
        self._ticker = asyncio.get_running_loop().call_later(TICK_SECONDS, self._tick)


class EmbeddedBroker:
    """A reference broker on its own event loop in a daemon thread: `with EmbeddedBroker() as b:`."""

    def __init__(self, config: BrokerConfig | None = None, **overrides: Any) -> None:
        base = config or BrokerConfig(port=0)
        for key, value in overrides.items():
            setattr(base, key, value)
        self.config = base.validate()
        self.loop = asyncio.new_event_loop()
        self.server = BrokerServer(self.config)
        self.host, self.port = "", 0
        self._thread = threading.Thread(target=self.loop.run_forever, name="reference-broker", daemon=True)

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/"

    @property
    def management_url(self) -> str | None:
        port = self.server.management_port
        return None if port is None else f"http://guest:guest@{self.host}:{port}"

    def start(self, timeout: float = 10.0) -> EmbeddedBroker:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop)
        self.host, self.port = future.result(timeout)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        self.loop.close()

    def call(self, fn: Any, timeout: float = 10.0) -> Any:
        """Run `fn()` on the broker's loop (inspect or change core state from a test)."""
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
