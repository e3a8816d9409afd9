"""RemoteDriver: a `ClientDriver` whose client runs in an adapter program (any language).

Responsibility: start the adapter (a command line), read its hello, send each operation as a
request line and wait for its reply, and collect the events it writes in between (a reader
thread parses stdout; stderr is kept for the record). See `wire_json` for the protocol.

Rules: every wait is bounded: an operation without a reply within `timeout` raises `NoReply`
naming the operation (the adapter, or the library inside it, hangs); `stop()` ends the adapter
process (bye, then terminate, then kill), never waiting unboundedly. An adapter that exits
mid-operation gives `ConnectionLost` with the tail of its stderr.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from codec import BasicProperties
from conformance.drivers import interface as di
from conformance.drivers import wire_json

STDERR_KEPT = 200  # lines


class ClientHung(di.NoReply):
    """The adapter did not answer an operation in time: the library (or the adapter) hangs."""


class AdapterError(Exception):
    """The adapter program could not start or broke the protocol (a harness-side problem)."""


class RemoteDriver:
    def __init__(self, command: Sequence[str], *, timeout: float = 5.0, start_timeout: float = 30.0,
                 env: Mapping[str, str] | None = None, cwd: str | None = None) -> None:
        self.command = list(command)
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._events: deque[di.Event] = deque()
        self._event_ready = threading.Condition()
        self.stderr: deque[str] = deque(maxlen=STDERR_KEPT)
        self.stderr_count = 0  # lines ever written (a mark for `stderr_since`)
        self.exited = threading.Event()
        try:
            self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, encoding="utf-8", bufsize=1,
                                            env=dict(env) if env is not None else None, cwd=cwd)
        except OSError as exc:
            raise AdapterError(f"cannot start {self.command[0]}: {exc.strerror or exc}") from None
        self._hello: dict[str, Any] | None = None
        threading.Thread(target=self._read_stdout, daemon=True, name="adapter-out").start()
        threading.Thread(target=self._read_stderr, daemon=True, name="adapter-err").start()
        try:
            self._hello = self._replies.get(timeout=start_timeout)
        except queue.Empty:
            self.stop()
            raise AdapterError(f"no hello from {' '.join(self.command)} within {start_timeout:.0f} s: "
                               f"{self.stderr_tail()}") from None
        if self._hello.get("event") != "hello":
            self.stop()
            raise AdapterError(f"adapter {' '.join(self.command)} did not start: {self.stderr_tail()}")

    # -- plumbing ---------------------------------------------------------------------------------
    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        with contextlib.suppress(ValueError, OSError):  # closed by stop()
            self._read_lines(self.process.stdout)
        self.exited.set()
        self._replies.put({"event": "exit"})
        with self._event_ready:
            self._event_ready.notify_all()

    def _read_lines(self, stdout: Any) -> None:
        for line in stdout:
            if not line.strip():
                continue
            try:
                obj = wire_json.loads(line)
            except ValueError:
                self.stderr.append(f"(stdout, not JSON) {line.rstrip()}")
                continue
            if "id" in obj or obj.get("event") == "hello" or obj.get("event") == "exit":
                self._replies.put(obj)
            else:
                with self._event_ready:
                    self._events.append(wire_json.event_from_json(obj))
                    self._event_ready.notify_all()

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        with contextlib.suppress(ValueError, OSError):  # closed by stop()
            for line in self.process.stderr:
                self.stderr.append(line.rstrip())
                self.stderr_count += 1

    def stderr_since(self, mark: int, lines: int = 8) -> str:
        """The stderr lines written since `stderr_count` was `mark` (at most `lines`, the last ones)."""
        fresh = list(self.stderr)[-min(self.stderr_count - mark, len(self.stderr)):] if self.stderr_count > mark else []
        return " | ".join(fresh[-lines:]) if fresh else "(nothing on stderr)"

    def stderr_tail(self, lines: int = 5) -> str:
        tail = list(self.stderr)[-lines:]
        return " | ".join(tail) if tail else "(nothing on stderr)"

    def request(self, op: str, timeout: float | None = None, **args: Any) -> Any:
        limit = self.timeout if timeout is None else timeout
        if self.exited.is_set():
            raise di.ConnectionLost(f"the adapter has exited ({self.stderr_tail()})")
        rid = next(self._ids)
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(wire_json.dumps({"id": rid, "op": op, "args": args}) + "\n")
            self.process.stdin.flush()
        except OSError:
            raise di.ConnectionLost(f"the adapter has exited ({self.stderr_tail()})") from None
        deadline = time.monotonic() + limit
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                reply = self._replies.get(timeout=remaining)
            except queue.Empty:
                break
            if reply.get("event") == "exit":
                raise di.ConnectionLost(f"the adapter exited during {op} ({self.stderr_tail()})")
            if reply.get("id") != rid:
                continue  # the late reply of an operation that timed out earlier
            if reply.get("ok"):
                return reply.get("value")
            raise wire_json.error_from_json(reply.get("error") or {})
        raise ClientHung(limit, f"the client to finish {op}")

    def stop(self, timeout: float = 3.0, graceful: bool = True) -> None:
        """End the adapter: bye (unless it hangs: `graceful=False`), then terminate, then kill (bounded)."""
        if graceful and self.process.poll() is None and not self.exited.is_set():
            with contextlib.suppress(di.DriverError, OSError):
                self.request("bye", timeout=min(timeout, 2.0))
        for signal_it in (self.process.terminate, self.process.kill):
            if self.process.poll() is not None:
                break
            signal_it()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                continue
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    # -- ClientDriver -----------------------------------------------------------------------------
    def info(self) -> di.ClientInfo:
        return wire_json.info_from_hello(self._hello or {})

    def connect(self, url: str, options: di.ConnectOptions = di.DEFAULT_CONNECT) -> None:
        self.request("connect", url=url, heartbeat=options.heartbeat, frame_max=options.frame_max,
                     channel_max=options.channel_max)

    def close(self) -> None:
        with contextlib.suppress(di.DriverError):
            self.request("close")

    def open_channel(self) -> int:
        return int(self.request("open_channel"))

    def close_channel(self, channel: int) -> None:
        self.request("close_channel", channel=channel)

    def declare_queue(self, channel: int, queue: str, *, durable: bool = False, exclusive: bool = False,
                      auto_delete: bool = False, passive: bool = False,
                      arguments: Mapping[str, Any] | None = None) -> str:
        return str(self.request("declare_queue", channel=channel, queue=queue, durable=durable, exclusive=exclusive,
                                auto_delete=auto_delete, passive=passive, arguments=dict(arguments or {})))

    def declare_exchange(self, channel: int, exchange: str, kind: str = "direct", *, durable: bool = False,
                         passive: bool = False) -> None:
        self.request("declare_exchange", channel=channel, exchange=exchange, kind=kind, durable=durable,
                     passive=passive)

    def bind_queue(self, channel: int, queue: str, exchange: str, routing_key: str) -> None:
        self.request("bind_queue", channel=channel, queue=queue, exchange=exchange, routing_key=routing_key)

    def delete_queue(self, channel: int, queue: str) -> None:
        self.request("delete_queue", channel=channel, queue=queue)

    def qos(self, channel: int, prefetch_count: int, global_: bool = False) -> None:
        self.request("qos", channel=channel, prefetch_count=prefetch_count, global_=global_)

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes, *,
                properties: BasicProperties = di.NO_PROPERTIES, mandatory: bool = False) -> int | None:
        seq = self.request("publish", channel=channel, exchange=exchange, routing_key=routing_key, body=body,
                           properties=di.present(properties), mandatory=mandatory)
        return None if seq is None else int(seq)

    def confirm_select(self, channel: int) -> None:
        self.request("confirm_select", channel=channel)

    def consume(self, channel: int, queue: str, *, consumer_tag: str = "", no_ack: bool = False,
                exclusive: bool = False, arguments: Mapping[str, Any] | None = None) -> str:
        return str(self.request("consume", channel=channel, queue=queue, consumer_tag=consumer_tag, no_ack=no_ack,
                                exclusive=exclusive, arguments=dict(arguments or {})))

    def cancel(self, channel: int, consumer_tag: str) -> None:
        self.request("cancel", channel=channel, consumer_tag=consumer_tag)

    def get(self, channel: int, queue: str, *, no_ack: bool = False) -> di.Delivery | None:
        found = self.request("get", channel=channel, queue=queue, no_ack=no_ack)
        return None if found is None else wire_json.delivery(found)

    def ack(self, channel: int, delivery_tag: int, *, multiple: bool = False) -> None:
        self.request("ack", channel=channel, delivery_tag=delivery_tag, multiple=multiple)

    def nack(self, channel: int, delivery_tag: int, *, multiple: bool = False, requeue: bool = True) -> None:
        self.request("nack", channel=channel, delivery_tag=delivery_tag, multiple=multiple, requeue=requeue)

    def reject(self, channel: int, delivery_tag: int, *, requeue: bool = True) -> None:
        self.request("reject", channel=channel, delivery_tag=delivery_tag, requeue=requeue)

    def recover(self, channel: int, *, requeue: bool = True) -> None:
        self.request("recover", channel=channel, requeue=requeue)

    def tx_select(self, channel: int) -> None:
        self.request("tx_select", channel=channel)

    def tx_commit(self, channel: int) -> None:
        self.request("tx_commit", channel=channel)

    def tx_rollback(self, channel: int) -> None:
        self.request("tx_rollback", channel=channel)

    def next_event(self, timeout: float) -> di.Event | None:
        deadline = time.monotonic() + timeout
        with self._event_ready:
            while not self._events:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.exited.is_set():
                    return None
                self._event_ready.wait(remaining)
            return self._events.popleft()

    def state(self) -> dict[str, Any]:
        found = self.request("state")
        if not isinstance(found, dict):
            return {}
        channels = found.get("channels") or {}
        return {**found, "channels": {int(k): v for k, v in channels.items()}}  # JSON keys are strings
