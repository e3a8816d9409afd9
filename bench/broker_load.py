"""The broker benchmark's load generator: two timed scenarios over py-amqp, every wait bounded.

What each scenario does on one broker (a fresh, uniquely named, non-durable classic queue per
round, declared with the same settings on every broker):
- publish: N messages of 100 bytes to the default exchange on a confirm channel
  (`confirm.select`); after every 100 publishes the client waits until the broker has
  confirmed all of them (basic.ack, multiple or single, tracked per sequence number). Timed
  from the first publish to the last confirm.
- consume: the same N messages with `basic.qos(prefetch_count=100)` and one consumer that
  acks with `multiple=true` every 50th delivery (and the last one). Timed from basic.consume
  to the last delivery.
Each returns its rate, N / elapsed (msgs/s). Connection setup and queue declaration are outside
the timed region.

Correctness is checked on every round, outside the timings: every publish confirmed exactly
once and none nacked, the queue depth equal to N after publishing, the deliveries in
publish order with no gap, duplicate or redelivery, nothing extra after the last one, and
the queue empty at the end. A failed check or a timeout raises `BenchError`.

Every wait is bounded: the client socket has a stall timeout (no byte for `Limits.stall` s is
an error) and each scenario has an overall deadline enforced by a watchdog that shuts the
socket down.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import amqp

BODY_SIZE = 100
CONFIRM_EVERY = 100
PREFETCH = 100
ACK_EVERY = 50
CONNECT_TIMEOUT = 5.0


class BenchError(Exception):
    """A scenario failed: a broker error, a timeout or a failed correctness check."""


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    host: str
    port: int
    durable: bool = False  # durable queue, persistent messages


@dataclass(slots=True)
class Limits:
    stall: float  # seconds without a byte from the broker
    deadline: float  # seconds for one whole scenario



# -- bounded waits -------------------------------------------------------------------------
class Watchdog:
    """Shuts a connection's socket down when a scenario overruns its deadline, so that any
    blocking call inside py-amqp returns with an error instead of hanging."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds, self.what = seconds, what
        self.deadline = time.monotonic() + seconds
        self.fired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def guard(self, conn: Any) -> None:
        with self._lock:
            self._sock = conn.transport.sock
            if self.fired:
                self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise BenchError(f"{self.what}: deadline of {self.seconds:g} s exceeded")
        return left

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self._timer.cancel()
        if self.fired and exc is not None and not isinstance(exc, BenchError):
            raise BenchError(f"{self.what}: deadline of {self.seconds:g} s exceeded "
                             f"({type(exc).__name__}: {exc})") from exc


def connect(target: Target, limits: Limits, dog: Watchdog) -> Any:
    conn = amqp.Connection(host=f"{target.host}:{target.port}", userid="guest", password="guest",
                           virtual_host="/", connect_timeout=CONNECT_TIMEOUT, write_timeout=limits.stall,
                           heartbeat=0)
    conn.connect()
    dog.guard(conn)
    conn.transport.sock.settimeout(limits.stall)  # every later read and write is bounded
    return conn


def close_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):
        conn.close()
    with contextlib.suppress(Exception):
        conn.collect()


def drain(conn: Any, dog: Watchdog, limits: Limits, waiting_for: Callable[[], str]) -> None:
    """Process one incoming method, waiting at most the stall timeout or what is left."""
    timeout = min(limits.stall, dog.remaining())
    try:
        conn.drain_events(timeout=timeout)
    except TimeoutError:
        dog.remaining()
        raise BenchError(f"nothing from the broker for {timeout:.1f} s while waiting for "
                         f"{waiting_for()}") from None


def body_of(i: int) -> bytes:
    return (b"%010d" % i).ljust(BODY_SIZE, b".")


def declare(ch: Any, queue: str, durable: bool, passive: bool = False) -> int:
    """Declare the benchmark queue (same settings on every broker); returns its depth."""
    ok = ch.queue_declare(queue, passive=passive, durable=durable, exclusive=False, auto_delete=False)
    return int(ok.message_count)


# -- scenarios -----------------------------------------------------------------------------
class ConfirmTracker:
    """Publisher confirms by sequence number: every publish confirmed exactly once."""

    def __init__(self) -> None:
        self.published = 0
        self.pending: set[int] = set()
        self.confirmed = 0
        self.nacked = 0
        self.anomalies: list[str] = []

    def sent(self) -> None:
        self.published += 1
        self.pending.add(self.published)

    def on_ack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple, "ack")

    def on_nack(self, tag: int, multiple: bool) -> None:
        self.nacked += self._settle(tag, multiple, "nack")

    def _settle(self, tag: int, multiple: bool, kind: str) -> int:
        done = {t for t in self.pending if t <= tag} if multiple else {tag} & self.pending
        if tag > self.published or (not multiple and not done):
            self.anomalies.append(f"basic.{kind}(delivery_tag={tag}, multiple={multiple}) with "
                                  f"{self.published} published, {len(self.pending)} pending")
        self.pending -= done
        self.confirmed += len(done)
        return len(done)


def scenario_publish(target: Target, queue: str, n: int, limits: Limits) -> float:
    messages = [amqp.Message(body_of(i), delivery_mode=2 if target.durable else 1) for i in range(n)]
    with Watchdog(limits.deadline, f"{target.name} publish") as dog:
        conn = connect(target, limits, dog)
        try:
            ch = conn.channel()
            declare(ch, queue, target.durable)
            tracker = ConfirmTracker()
            ch.confirm_select()
            ch.events["basic_ack"].add(tracker.on_ack)
            ch.events["basic_nack"].add(tracker.on_nack)

            def waiting() -> str:
                first = min(tracker.pending) if tracker.pending else None
                return (f"confirms: {len(tracker.pending)} of {tracker.published} published still "
                        f"unconfirmed (lowest seqno {first})")

            publish = ch.basic_publish
            start = time.perf_counter()
            for i, message in enumerate(messages, 1):
                publish(message, exchange="", routing_key=queue)
                tracker.sent()
                if i % CONFIRM_EVERY == 0 or i == n:
                    while tracker.pending:
                        drain(conn, dog, limits, waiting)
            elapsed = time.perf_counter() - start
            problems = list(tracker.anomalies[:3])
            if tracker.nacked:
                problems.append(f"{tracker.nacked} publishes nacked")
            if tracker.confirmed != n:
                problems.append(f"{tracker.confirmed} of {n} publishes confirmed")
            depth = declare(ch, queue, target.durable, passive=True)
            if depth != n:
                problems.append(f"queue depth {depth} after {n} confirmed publishes")
            if problems:
                raise BenchError("; ".join(problems))
        finally:
            close_quietly(conn)
    return n / elapsed


def scenario_consume(target: Target, queue: str, n: int, limits: Limits) -> float:
    with Watchdog(limits.deadline, f"{target.name} consume") as dog:
        conn = connect(target, limits, dog)
        try:
            ch = conn.channel()
            ch.basic_qos(0, PREFETCH, False)
            received = 0
            anomalies: list[str] = []

            def on_message(message: Any) -> None:
                nonlocal received
                seq = int(bytes(message.body[:10]))
                if seq != received and len(anomalies) < 3:
                    anomalies.append(f"delivery {received + 1} carries message {seq}")
                if message.delivery_info.get("redelivered") and len(anomalies) < 3:
                    anomalies.append(f"delivery {received + 1} (message {seq}) is marked redelivered")
                received += 1
                if received % ACK_EVERY == 0 or received == n:
                    ch.basic_ack(message.delivery_tag, multiple=True)

            def waiting() -> str:
                return f"deliveries: {received} of {n} received"

            start = time.perf_counter()
            tag = ch.basic_consume(queue, callback=on_message)
            while received < n:
                drain(conn, dog, limits, waiting)
            elapsed = time.perf_counter() - start
            with contextlib.suppress(TimeoutError):  # anything extra is a duplicate
                while received < n + 100:
                    conn.drain_events(timeout=0.2)
            problems = anomalies
            if received != n:
                problems.append(f"{received} deliveries for {n} messages")
            ch.basic_cancel(tag)
            depth = declare(ch, queue, target.durable, passive=True)
            if depth:
                problems.append(f"queue depth {depth} after consuming everything")
            if problems:
                raise BenchError("; ".join(problems))
        finally:
            close_quietly(conn)
    return n / elapsed


def delete_queue(target: Target, queue: str, limits: Limits) -> None:
    with Watchdog(limits.stall * 2, f"{target.name} queue.delete") as dog:
        conn = connect(target, limits, dog)
        try:
            conn.channel().queue_delete(queue)
        finally:
            close_quietly(conn)
