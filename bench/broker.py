"""Broker benchmark: the reference broker against RabbitMQ, one load generator (py-amqp) for both.

What it measures, per round and broker (a fresh, uniquely named, non-durable classic queue
per round, declared with the same settings on both brokers and deleted afterwards):
- publish: N messages of 100 bytes to the default exchange on a confirm channel
  (`confirm.select`); after every 100 publishes the client waits until the broker has
  confirmed all of them (basic.ack, multiple or single, tracked per sequence number). Timed
  from the first publish to the last confirm.
- consume: the same N messages with `basic.qos(prefetch_count=100)` and one consumer that
  acks with `multiple=true` every 50th delivery (and the last one). Timed from basic.consume
  to the last delivery.
Rate = N / elapsed (msgs/s). The reference broker runs as a separate process
(`python -m reference_broker`, on a free port, log level WARNING), RabbitMQ is the one at
127.0.0.1:5672 (guest/guest). Each broker first gets one untimed warm-up round of at most
2,000 messages; then rounds alternate brokers (ref, rabbit, ref, rabbit, ...). Connection
setup and queue declaration are outside the timed region.

Correctness is checked on every round, outside the timings: every publish confirmed exactly
once and none nacked, the queue depth equal to N after publishing, the deliveries in
publish order with no gap, duplicate or redelivery, nothing extra after the last one, and
the queue empty at the end. A failed check or a timeout fails that round (reported, the
exit status is 1) and the benchmark goes on.

Every wait is bounded: the client socket has a stall timeout (no byte for `--stall` s is an
error), each scenario has an overall deadline enforced by a watchdog that shuts the socket
down, and the reference broker must accept TCP connections within 15 s.

Printed: per-round lines, a table with min and median msgs/s per broker and scenario, and
last one JSON line {"publish_x_rabbitmq": ref median / rabbit median, "consume_x_rabbitmq":
...} (> 1: the reference broker is faster; null when RabbitMQ is unreachable or failed).

`--durable`: the same with a durable queue and persistent messages (delivery_mode 2), the
reference broker on a fresh `--data-dir`, so every confirm waits for the disk on both
brokers; the keys become "durable_publish_x_rabbitmq" and "durable_consume_x_rabbitmq".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import amqp

ROOT = Path(__file__).resolve().parent.parent
BODY_SIZE = 100
CONFIRM_EVERY = 100
PREFETCH = 100
ACK_EVERY = 50
SCENARIOS = ("publish", "consume")
REF, RABBIT = "reference", "rabbitmq"
BROKER_START_TIMEOUT = 15.0
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


@dataclass(slots=True)
class Results:
    rates: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def add(self, broker: str, scenario: str, rate: float) -> None:
        self.rates.setdefault((broker, scenario), []).append(rate)

    def median(self, broker: str, scenario: str) -> float | None:
        rates = self.rates.get((broker, scenario))
        return statistics.median(rates) if rates else None


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


def run_round(target: Target, n: int, limits: Limits, results: Results, label: str,
              record: bool = True) -> None:
    queue = f"bench.broker.{os.getpid()}.{uuid.uuid4().hex[:12]}"
    rates: list[str] = []
    try:
        for scenario, fn in (("publish", scenario_publish), ("consume", scenario_consume)):
            try:
                rate = fn(target, queue, n, limits)
            except Exception as exc:
                detail = str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}"
                failure = f"{label} {target.name} {scenario}: FAILED: {detail}"
                results.failures.append(failure)
                print(failure, flush=True)
                return  # consume needs what publish left in the queue
            if record:
                results.add(target.name, scenario, rate)
            rates.append(f"{scenario} {rate:9,.0f} msgs/s")
        print(f"{label:9} {target.name:9}  " + "   ".join(rates), flush=True)
    finally:
        try:
            delete_queue(target, queue, limits)
        except Exception as exc:
            print(f"{label} {target.name}: could not delete queue {queue}: {type(exc).__name__}: {exc}",
                  flush=True)


# -- brokers -------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def reference_broker(log: IO[bytes], data_dir: str | None = None) -> Iterator[tuple[Target, subprocess.Popen[bytes]]]:
    port = free_port()
    store = ["--data-dir", data_dir] if data_dir else []
    proc = subprocess.Popen([sys.executable, "-m", "reference_broker", "--port", str(port),
                             "--log-level", "WARNING", *store], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + BROKER_START_TIMEOUT
        while not port_open("127.0.0.1", port, timeout=0.5):
            if proc.poll() is not None:
                raise BenchError(f"the reference broker exited with status {proc.returncode} at start")
            if time.monotonic() > deadline:
                raise BenchError(f"the reference broker did not listen on port {port} "
                                 f"within {BROKER_START_TIMEOUT:.0f} s")
            time.sleep(0.05)
        yield Target(REF, "127.0.0.1", port, durable=data_dir is not None), proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def rabbitmq_available(target: Target, limits: Limits) -> str | None:
    """None when RabbitMQ answers an AMQP handshake, else why not."""
    if not port_open(target.host, target.port, timeout=2.0):
        return f"nothing accepts TCP connections at {target.host}:{target.port}"
    try:
        with Watchdog(CONNECT_TIMEOUT * 2, "rabbitmq handshake") as dog:
            close_quietly(connect(target, limits, dog))
    except Exception as exc:
        return f"AMQP handshake failed: {type(exc).__name__}: {exc}"
    return None


# -- report --------------------------------------------------------------------------------
def report(results: Results, brokers: list[str], n: int, prefix: str = "") -> dict[str, float | None]:
    print()
    print(f"{'scenario':10} {'broker':10} {'rounds':>6} {'min msgs/s':>12} {'median msgs/s':>14}")
    for scenario in SCENARIOS:
        for broker in brokers:
            rates = results.rates.get((broker, scenario), [])
            if rates:
                print(f"{scenario:10} {broker:10} {len(rates):>6} {min(rates):>12,.0f} "
                      f"{statistics.median(rates):>14,.0f}")
            else:
                print(f"{scenario:10} {broker:10} {0:>6} {'-':>12} {'-':>14}")
    ratios: dict[str, float | None] = {}
    for scenario in SCENARIOS:
        ref, rabbit = results.median(REF, scenario), results.median(RABBIT, scenario)
        ratios[f"{prefix}{scenario}_x_rabbitmq"] = ref / rabbit if ref and rabbit else None
    print(f"({n:,} messages of {BODY_SIZE} B per round; ratio = reference median / RabbitMQ median, "
          "> 1: the reference broker is faster)")
    return ratios


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="2,000 messages, 1 round per broker")
    p.add_argument("--messages", type=int, help="messages per round (default 20,000)")
    p.add_argument("--rounds", type=int, help="rounds per broker (default 5)")
    p.add_argument("--rabbitmq", default="127.0.0.1:5672", help="RabbitMQ host:port (guest/guest)")
    p.add_argument("--stall", type=float, default=10.0, help="seconds without a frame that fail a scenario")
    p.add_argument("--deadline", type=float, help="seconds per scenario (default 30 + messages/200)")
    p.add_argument("--durable", action="store_true", help="durable queue, persistent messages, "
                   "the reference broker with a data directory")
    args = p.parse_args(argv)
    n = args.messages or (2_000 if args.quick else 20_000)
    rounds = args.rounds or (1 if args.quick else 5)
    if n < 1 or rounds < 1:
        p.error("--messages and --rounds must be positive")
    limits = Limits(stall=args.stall, deadline=args.deadline or 30 + n / 200)
    host, _, port = args.rabbitmq.rpartition(":")
    rabbit = Target(RABBIT, host or "127.0.0.1", int(port), durable=args.durable)

    results = Results()
    brokers = [REF]
    why = rabbitmq_available(rabbit, limits)
    if why is None:
        brokers.append(RABBIT)
    else:
        print(f"RabbitMQ unreachable at {rabbit.host}:{rabbit.port} ({why}): reporting the reference "
              "broker only, ratios are null", flush=True)
    with tempfile.TemporaryFile() as log, tempfile.TemporaryDirectory(prefix="bench-broker-") as data:
        try:
            with reference_broker(log, data if args.durable else None) as (ref, proc):
                print(f"reference broker: pid {proc.pid}, port {ref.port}; {n:,} messages x {BODY_SIZE} B, "
                      f"{rounds} round(s) per broker", flush=True)
                targets = {REF: ref, RABBIT: rabbit}
                for broker in brokers:
                    run_round(targets[broker], min(n, 2_000), limits, results, "warm-up", record=False)
                for r in range(1, rounds + 1):
                    for broker in brokers:
                        if proc.poll() is not None and broker == REF:
                            results.failures.append(f"round {r} reference: the broker process is gone "
                                                    f"(status {proc.returncode})")
                            print(results.failures[-1], flush=True)
                            continue
                        run_round(targets[broker], n, limits, results, f"round {r}/{rounds}")
        except BenchError as exc:
            results.failures.append(str(exc))
            print(f"reference broker: {exc}", flush=True)
        log.seek(0)
        broker_log = log.read().decode("utf-8", "replace").strip()
    if broker_log:
        lines = broker_log.splitlines()
        print(f"reference broker log ({len(lines)} lines at WARNING and above, last 10):")
        for line in lines[-10:]:
            print(f"  {line}")
    ratios = report(results, brokers, n, "durable_" if args.durable else "")
    if results.failures:
        print(f"{len(results.failures)} scenario(s) failed:")
        for failure in results.failures:
            print(f"  {failure}")
    print(json.dumps(ratios), flush=True)
    return 1 if results.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
