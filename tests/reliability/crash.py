"""Crash test: SIGKILL the reference broker at random moments under load, then judge the history.

`python -m tests.reliability.crash --cycles 20 --seed S` runs it and prints the total-queue
report (tests/reliability/totalqueue.py); exit 0 only when nothing confirmed is lost, nothing
unexpected is delivered and no duplicate is illegal.

Shape: the broker runs as a subprocess (`python -m reference_broker --port P --data-dir D`); a
publisher thread sends persistent messages (delivery_mode 2, unique `message_id`, each sent
once, never republished) to a durable queue in confirm mode with up to `window` confirms in
flight; a consumer thread consumes with manual acks (prefetch `prefetch`) and logs every
delivery. The consumer is capped below the publisher's rate, so every kill finds a backlog on
disk and unacked deliveries. Both use the raw driver (conformance/drivers/raw.py) and reconnect
after the broker goes. Each cycle sleeps a seeded random interval, kills the broker with SIGKILL
and restarts it on the same data dir. Then, once both clients are back, they stop, the broker
is killed and restarted a last time, and the queue is drained with basic.get until get-empty.
SIGKILL leaves the OS page cache intact: this shows what the broker wrote, not what it fsynced.

Rules:
- Every wait is bounded: broker start (`ready_timeout`), reconnects (`reconnect_timeout`),
  confirms, thread joins, the drain. A broker that does not come back raises `CrashTestFailed`.
- Epochs: the broker incarnation between two kills. The epoch is bumped after the killed
  process is reaped and before the next one starts; a client keeps a connection only when the
  epoch was the same before and after its handshake, so each delivery knows which incarnation
  sent it (the checker needs it to tell a lost consumer ack from a broker duplicate).
- On each connection a client first declares the queue passively: a 404 means the durable queue
  did not survive the restart; it is then declared again (durable declare is idempotent) and the
  epoch is recorded as "queue missing".
"""

from __future__ import annotations

import argparse
import itertools
import random
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import codec
from conformance.drivers.raw import ChannelClosed, ConnectionLost, DriverError, NoReply, RawClient, Recorder
from tests.conftest import free_port
from tests.reliability.crash_broker import BrokerProcess, CrashTestFailed, broker_supports_data_dir
from tests.reliability.totalqueue import Delivery, TotalQueueReport, check_total_queue

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "crash-test"
NOT_FOUND = 404
CONFIRMS = (codec.BasicAck, codec.BasicNack)


class _Stopped(Exception):
    """A client was asked to stop while reconnecting."""


class _NoRecording(Recorder):
    """The raw driver records every frame; a crash test sends tens of thousands."""

    def add(self, record: Any) -> None:
        pass


class BrokerLink:
    """What both clients share: the URL, the epoch, and per-epoch queue observations."""

    def __init__(self, port: int, reconnect_timeout: float) -> None:
        self.url = f"amqp://guest:guest@127.0.0.1:{port}/"
        self.reconnect_timeout = reconnect_timeout
        self.epoch = 0
        self.queue_missing: set[int] = set()  # epochs in which a client found no queue
        self.queue_ready: dict[int, int] = {}  # epoch -> message_count at its first declare

    def next_epoch(self) -> None:
        self.epoch += 1

    def connect(self, stop: threading.Event | None = None) -> tuple[RawClient, int]:
        """A connection and the epoch of the broker it is to; retries until `reconnect_timeout`."""
        deadline = time.monotonic() + self.reconnect_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                raise _Stopped
            before = self.epoch
            client = RawClient(self.url, timeout=5.0, recorder=_NoRecording())
            try:
                client.connect()
            except (DriverError, OSError) as exc:
                last = exc
                if client.sock is not None:
                    client.sock.close()
            else:
                if self.epoch == before:
                    return client, before
                client.close()  # the broker restarted during the handshake: which one is this?
            time.sleep(0.05)
        raise CrashTestFailed(f"no connection within {self.reconnect_timeout:.0f} s: {last}")

    def declare(self, client: RawClient, epoch: int) -> int:
        """Open a channel with the durable queue declared (passive first); its number."""
        ch = client.channel()
        try:
            ok = client.rpc(ch, codec.QueueDeclare(queue=QUEUE, passive=True), codec.QueueDeclareOk).method
        except ChannelClosed as exc:
            if exc.code != NOT_FOUND:
                raise
            self.queue_missing.add(epoch)
            ch = client.channel()
            ok = client.rpc(ch, codec.QueueDeclare(queue=QUEUE, durable=True), codec.QueueDeclareOk).method
        assert isinstance(ok, codec.QueueDeclareOk)
        self.queue_ready.setdefault(epoch, ok.message_count)
        return ch


class _Client(threading.Thread):
    """A thread that reconnects until stopped; subclasses do the work on one connection."""

    def __init__(self, link: BrokerLink, name: str, rate: float) -> None:
        super().__init__(name=name, daemon=True)
        self.link, self.rate = link, rate  # rate: operations per second on average at most (0: no limit)
        self._began = time.monotonic()
        self.stopping = threading.Event()
        self.connections = 0
        self.error: str | None = None
        self.anomalies: list[str] = []
        self.epoch = -1  # of its latest connection

    @property
    def reconnects(self) -> int:
        return max(self.connections - 1, 0)

    def run(self) -> None:
        self._began = time.monotonic()
        try:
            while not self.stopping.is_set():
                client, epoch = self.link.connect(self.stopping)
                self.connections += 1
                self.epoch = epoch
                try:
                    self.work(client, epoch)
                except (ConnectionLost, OSError):
                    pass  # the broker went (SIGKILL): reconnect
                except DriverError as exc:  # a live broker closed, refused or went silent
                    self.anomalies.append(f"epoch {epoch}: {exc}")
                finally:
                    client.close()
        except _Stopped:
            pass
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def work(self, client: RawClient, epoch: int) -> None:
        raise NotImplementedError

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        self.join(timeout)
        if self.is_alive():
            raise CrashTestFailed(f"{self.name} did not stop within {timeout:.0f} s")


class Publisher(_Client):
    """Persistent messages with unique ids, confirm mode, up to `window` confirms in flight, at
    most `rate` messages per second on average (0: as fast as confirms come back)."""

    def __init__(self, link: BrokerLink, window: int, rate: float, confirm_timeout: float = 10.0) -> None:
        super().__init__(link, "publisher", rate)
        self.window, self.confirm_timeout = window, confirm_timeout
        self.published: list[str] = []
        self.confirmed: set[str] = set()
        self.nacked: set[str] = set()
        self._ids = itertools.count(1)

    def work(self, client: RawClient, epoch: int) -> None:
        ch = self.link.declare(client, epoch)
        client.rpc(ch, codec.ConfirmSelect(), codec.ConfirmSelectOk)
        inflight: dict[int, str] = {}
        seqs = itertools.count(1)
        while not self.stopping.is_set():
            self._fill(client, ch, inflight, seqs)
            if not inflight:
                time.sleep(0.005)  # the rate allows nothing yet
                continue
            self._settle(inflight, client.expect(ch, *CONFIRMS, timeout=self.confirm_timeout))
            while (cmd := client.poll(ch, *CONFIRMS)) is not None:
                self._settle(inflight, cmd)
        deadline = time.monotonic() + 2.0  # stopping: collect what is still in flight, bounded
        while inflight and (cmd := client.poll(ch, *CONFIRMS, duration=max(deadline - time.monotonic(), 0))):
            self._settle(inflight, cmd)

    def _fill(self, client: RawClient, ch: int, inflight: dict[int, str], seqs: itertools.count[int]) -> None:
        """Publish until `window` confirms are in flight or the rate is used up."""
        room = self.window - len(inflight)
        if self.rate:
            room = min(room, int((time.monotonic() - self._began) * self.rate) - len(self.published))
        for _ in range(room):
            mid = f"m{next(self._ids)}"
            self.published.append(mid)  # published = attempted: a failed send may still arrive
            inflight[next(seqs)] = mid
            props = codec.BasicProperties(delivery_mode=2, message_id=mid)
            client.send(ch, codec.BasicPublish(routing_key=QUEUE), props, mid.encode())

    def _settle(self, inflight: dict[int, str], cmd: codec.Command) -> None:
        m = cmd.method
        assert isinstance(m, codec.BasicAck | codec.BasicNack)
        seqs = [s for s in inflight if s <= m.delivery_tag] if m.multiple else [m.delivery_tag]
        into = self.confirmed if isinstance(m, codec.BasicAck) else self.nacked
        for seq in seqs:
            mid = inflight.pop(seq, None)
            if mid is not None:
                into.add(mid)


class Consumer(_Client):
    """Consumes with manual acks, acking each delivery at once, and logs every delivery; at most
    `rate` deliveries per second on average (slower than the publisher: a backlog on disk and
    unacked deliveries are what a kill puts at risk)."""

    def __init__(self, link: BrokerLink, prefetch: int, rate: float) -> None:
        super().__init__(link, "consumer", rate)
        self.prefetch = prefetch
        self.log: list[Delivery] = []

    def work(self, client: RawClient, epoch: int) -> None:
        ch = self.link.declare(client, epoch)
        client.rpc(ch, codec.BasicQos(prefetch_count=self.prefetch), codec.BasicQosOk)
        client.rpc(ch, codec.BasicConsume(queue=QUEUE, consumer_tag="crash-consumer"), codec.BasicConsumeOk)
        while not self.stopping.is_set():
            try:
                cmd = client.expect(ch, timeout=0.2)
            except NoReply:
                continue
            if isinstance(cmd.method, codec.BasicCancel):  # the queue went under a live broker
                self.anomalies.append(f"epoch {epoch}: basic.cancel from the broker")
                return  # reconnect, which re-declares the queue
            if isinstance(cmd.method, codec.BasicDeliver):
                self.log.append(_deliver_and_ack(client, ch, cmd, epoch))
                if self.rate and (ahead := self._began + len(self.log) / self.rate - time.monotonic()) > 0:
                    time.sleep(min(ahead, 0.5))


def _message_id(cmd: codec.Command) -> str:
    props = cmd.properties
    return props.message_id if props is not None and props.message_id else cmd.body.decode(errors="replace")


def _deliver_and_ack(client: RawClient, ch: int, cmd: codec.Command, epoch: int) -> Delivery:
    """Ack a basic.deliver / basic.get-ok; the Delivery records whether the ack went out."""
    m = cmd.method
    assert isinstance(m, codec.BasicDeliver | codec.BasicGetOk)
    try:
        client.send(ch, codec.BasicAck(m.delivery_tag))
    except (DriverError, OSError):
        return Delivery(_message_id(cmd), m.redelivered, False, epoch)
    return Delivery(_message_id(cmd), m.redelivered, True, epoch)


def drain(link: BrokerLink, timeout: float) -> list[Delivery]:
    """basic.get (acking each) until get-empty, within `timeout` seconds."""
    client, epoch = link.connect()
    out: list[Delivery] = []
    try:
        ch = link.declare(client, epoch)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cmd = client.rpc(ch, codec.BasicGet(queue=QUEUE), codec.BasicGetOk, codec.BasicGetEmpty)
            if isinstance(cmd.method, codec.BasicGetEmpty):
                return out
            out.append(_deliver_and_ack(client, ch, cmd, epoch))
    finally:
        client.close()
    raise CrashTestFailed(f"the queue was not empty after draining {len(out)} messages for {timeout:.0f} s")


@dataclass(frozen=True)
class CycleRecord:
    cycle: int  # cycle n kills incarnation (epoch) n - 1
    ran_s: float  # how long it ran before the kill
    restart_s: float  # until the next incarnation accepted
    published: int  # running totals at the kill
    confirmed: int
    delivered: int


@dataclass
class CrashResult:
    seed: int
    storage: bool
    report: TotalQueueReport
    cycles: list[CycleRecord]
    queue_missing: set[int]
    queue_ready: dict[int, int]
    reconnects: dict[str, int]
    wall_s: float
    workdir: Path
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.errors

    def _queue_after(self, epoch: int) -> str:
        """What the first client of an epoch found: the queue (and its ready count) or not."""
        if epoch not in self.queue_ready:
            return "no client connected"
        state = "MISSING, re-declared" if epoch in self.queue_missing else "survived"
        return f"queue {state} (ready {self.queue_ready[epoch]})"

    def lines(self) -> list[str]:
        out = [f"crash test: {len(self.cycles)} cycles, seed {self.seed}, storage "
               f"{'on' if self.storage else 'OFF (in-memory broker)'}, {self.wall_s:.1f} s, "
               f"reconnects {self.reconnects}"]
        for c in self.cycles:
            out.append(f"  cycle {c.cycle:2}: ran {c.ran_s:.2f} s, SIGKILL, back in {c.restart_s:.2f} s; "
                       f"published {c.published} confirmed {c.confirmed} delivered {c.delivered}; "
                       f"{self._queue_after(c.cycle)}")
        out.append(f"  final SIGKILL and restart: {self._queue_after(len(self.cycles) + 1)}")
        out += [f"  error: {e}" for e in self.errors]
        return out + self.report.summary()


@dataclass(frozen=True)
class CrashConfig:
    cycles: int = 20
    seed: int = -1  # the CLI picks a random one for -1
    min_interval: float = 0.2
    max_interval: float = 1.5
    window: int = 100
    prefetch: int = 50
    rate: float = 2000.0
    consume_rate: float = 1000.0
    storage: bool = True
    ready_timeout: float = 20.0
    reconnect_timeout: float = 20.0
    drain_timeout: float = 60.0


def run_crash_test(config: CrashConfig, workdir: Path) -> CrashResult:
    """Run the cycles against a fresh broker data dir under `workdir`; raises CrashTestFailed
    when the broker or a client cannot go on."""
    return CrashRun(config, workdir).run()


class CrashRun:
    """One crash test: a broker process, the two client threads, the cycles."""

    def __init__(self, config: CrashConfig, workdir: Path) -> None:
        self.config, self.workdir, self.rng = config, workdir, random.Random(config.seed)
        port = free_port()
        self.broker = BrokerProcess(port, workdir / "data" if config.storage else None,
                                    workdir / "broker.log", config.ready_timeout)
        self.link = BrokerLink(port, config.reconnect_timeout)
        self.publisher = Publisher(self.link, config.window, config.rate)
        self.consumer = Consumer(self.link, config.prefetch, config.consume_rate)
        self.clients = (self.publisher, self.consumer)

    def run(self) -> CrashResult:
        began = time.monotonic()
        try:
            self.broker.start()
            client, _ = self.link.connect()
            client.rpc(client.channel(), codec.QueueDeclare(queue=QUEUE, durable=True), codec.QueueDeclareOk)
            client.close()
            for c in self.clients:
                c.start()
            cycles = [self._cycle(n) for n in range(1, self.config.cycles + 1)]
            self._await_clients()
            for c in self.clients:
                c.stop(15.0)
            self._kill_and_restart()
            drained = drain(self.link, self.config.drain_timeout)
        finally:
            for c in self.clients:
                c.stopping.set()
                if c.is_alive():
                    c.join(5.0)
            self.broker.stop()
        p = self.publisher
        report = check_total_queue(p.published, p.confirmed, p.nacked, self.consumer.log, drained)
        errors = [f"{c.name}: {e}" for c in self.clients for e in [*c.anomalies, c.error] if e]
        return CrashResult(self.config.seed, self.config.storage, report, cycles, self.link.queue_missing,
                           self.link.queue_ready, {c.name: c.reconnects for c in self.clients},
                           time.monotonic() - began, self.workdir, errors)

    def _cycle(self, n: int) -> CycleRecord:
        ran = self.rng.uniform(self.config.min_interval, self.config.max_interval)
        time.sleep(ran)
        for c in self.clients:
            if not c.is_alive():
                raise CrashTestFailed(f"{c.name} ended in cycle {n}: {c.error}")
        totals = (len(self.publisher.published), len(self.publisher.confirmed), len(self.consumer.log))
        return CycleRecord(n, ran, self._kill_and_restart(), *totals)

    def _kill_and_restart(self) -> float:
        """SIGKILL, reap, bump the epoch, start again; seconds until the new one accepted."""
        self.broker.kill()
        self.link.next_epoch()
        return self.broker.start()

    def _await_clients(self) -> None:
        """Until both clients work on the latest incarnation (bounded)."""
        deadline = time.monotonic() + self.link.reconnect_timeout
        while any(c.epoch < self.link.epoch for c in self.clients):
            if time.monotonic() > deadline or not all(c.is_alive() for c in self.clients):
                raise CrashTestFailed(f"clients not back on broker #{self.link.epoch}: "
                                      + "; ".join(f"{c.name}: {c.error}" for c in self.clients))
            time.sleep(0.02)


_HELP = {"cycles": "kill/restart cycles", "seed": "default: random, printed",
         "min_interval": "seconds before a kill, at least", "max_interval": "seconds before a kill, at most",
         "window": "publisher confirms in flight", "prefetch": "consumer prefetch count",
         "rate": "publishes per second at most (0: no limit)",
         "consume_rate": "deliveries per second at most (0: no limit)"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.reliability.crash", description=__doc__.splitlines()[0])
    for name, help_text in _HELP.items():
        default = getattr(CrashConfig, name)
        p.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default, help=help_text)
    p.add_argument("--no-storage", action="store_true", help="run the broker without --data-dir")
    p.add_argument("--workdir", type=Path, help="keep the data dir and broker.log here")
    args = p.parse_args(argv)
    options = {name: getattr(args, name) for name in _HELP}
    if args.seed == CrashConfig.seed:
        options["seed"] = random.randrange(2**32)
    config = CrashConfig(**options, storage=not args.no_storage)
    if config.storage and not broker_supports_data_dir():
        print("the reference broker has no --data-dir option; use --no-storage", file=sys.stderr)
        return 4
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="crash-test-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = run_crash_test(config, workdir)
    except CrashTestFailed as exc:
        print(f"crash test (seed {config.seed}) FAILED: {exc}\nbroker log: {workdir / 'broker.log'}")
        return 1
    print("\n".join(result.lines()))
    if result.ok and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"data dir and broker log kept in {workdir}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
