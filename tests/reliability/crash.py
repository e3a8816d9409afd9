"""Crash test: SIGKILL the reference broker at random moments under load, then judge the history.

`python -m tests.reliability.crash --cycles 20 --seed S` runs it and prints the total-queue
report (tests/reliability/totalqueue.py); exit 0 only when nothing confirmed is lost, nothing
unexpected is delivered and no duplicate is illegal.

Shape: the broker runs as a subprocess (`python -m reference_broker --port P --data-dir D`); a
publisher thread sends persistent messages (delivery_mode 2, unique `message_id`, each sent
once, never republished) to a durable queue in confirm mode with up to `window` confirms in
flight; a consumer thread consumes with manual acks (prefetch `prefetch`) and logs every
delivery. The consumer is capped below the publisher's rate, so every kill finds a backlog on
disk and unacked deliveries. Both use the raw driver and reconnect after the broker goes (the
clients, their shared link and the drain are in tests/reliability/crash_clients.py). Each cycle
sleeps a seeded random interval, kills the broker with SIGKILL and restarts it on the same data
dir. Then, once both clients are back, the consumer stops, the publisher goes on until 20 more
messages are confirmed (so a confirmed backlog is on disk whatever the rates did), the broker is
killed and restarted a last time, and the queue is drained with basic.get until get-empty.
SIGKILL leaves the OS page cache intact: this shows what the broker wrote, not what it fsynced.

Rules:
- Every wait is bounded: broker start (`ready_timeout`), reconnects (`reconnect_timeout`),
  confirms, thread joins, the drain. A broker that does not come back raises `CrashTestFailed`.
- Epochs: the broker incarnation between two kills. The epoch is bumped after the killed
  process is reaped and before the next one starts; how the clients use it, and how they find a
  queue missing after a restart, is in crash_clients.py.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import codec
from tests.conftest import free_port
from tests.reliability.crash_broker import BrokerProcess, CrashTestFailed, broker_supports_data_dir
from tests.reliability.crash_clients import QUEUE, BrokerLink, Consumer, Publisher, drain
from tests.reliability.totalqueue import TotalQueueReport, check_total_queue

ROOT = Path(__file__).resolve().parents[2]


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
            self.consumer.stop(15.0)
            self._await_backlog()
            self.publisher.stop(15.0)
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

    def _await_backlog(self, wanted: int = 20) -> None:
        """With the consumer stopped, until `wanted` more messages are confirmed (bounded): the
        final kill then always has a confirmed backlog for the restarted broker to give back."""
        start = len(self.publisher.confirmed)
        deadline = time.monotonic() + self.link.reconnect_timeout
        while len(self.publisher.confirmed) < start + wanted:
            if time.monotonic() > deadline or not self.publisher.is_alive():
                raise CrashTestFailed(f"publisher confirmed {len(self.publisher.confirmed) - start} of "
                                      f"{wanted} messages after the consumer stopped: {self.publisher.error}")
            time.sleep(0.02)

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
