"""Broker benchmark: the reference broker against RabbitMQ, one load generator (py-amqp) for both.

What it measures, per round and broker: the publish-with-confirms and consume rates of
`bench/broker_load.py` (its docstring: the scenarios, their correctness checks, the bounded
waits), on a fresh queue deleted afterwards. The reference broker runs as a separate process
(`python -m reference_broker`, on a free port, log level WARNING), RabbitMQ is the one at
127.0.0.1:5672 (guest/guest). Each broker first gets one untimed warm-up round of at most
2,000 messages; then rounds alternate brokers (ref, rabbit, ref, rabbit, ...). A failed check
or a timeout fails that round (reported, the exit status is 1) and the benchmark goes on. The
reference broker must accept TCP connections within 15 s.

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
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":  # `python bench/broker.py`: import the project, not bench/
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
    sys.path.insert(0, str(ROOT))

from bench.broker_load import (  # noqa: E402
    BODY_SIZE,
    CONNECT_TIMEOUT,
    BenchError,
    Limits,
    Target,
    Watchdog,
    close_quietly,
    connect,
    delete_queue,
    scenario_consume,
    scenario_publish,
)

SCENARIOS = ("publish", "consume")
REF, RABBIT = "reference", "rabbitmq"
BROKER_START_TIMEOUT = 15.0


@dataclass(slots=True)
class Results:
    rates: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def add(self, broker: str, scenario: str, rate: float) -> None:
        self.rates.setdefault((broker, scenario), []).append(rate)

    def median(self, broker: str, scenario: str) -> float | None:
        rates = self.rates.get((broker, scenario))
        return statistics.median(rates) if rates else None



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

