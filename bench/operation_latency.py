"""What one declare, delete, bind or purge costs on each broker: the set-up and teardown the model
machines repeat every example.

`python -m bench.operation_latency URL [URL ...]` (default: RabbitMQ 4.3.6 at 5743 and 3.10.8 at
5672, guest/guest): on one connection and one channel per broker, each operation `--calls` times
(default 30) on names of its own (`amqpc.lat.<random>.*`, deleted as part of the measurement or at
the end), timed from sending the method to its reply; a connection's open and close timed apart.
Brokers are measured one after the other, each after one untimed warm-up call of every operation.

Printed: a table of the median (and 90th percentile) milliseconds per operation and broker (broker
0 is the first URL), then one JSON line {"<operation>: broker N / broker 0": the medians' ratio,
...} (> 1: broker N is slower). Exit 3 when a broker cannot be reached, 1 when it refuses a login or an
operation or does not answer (the error is printed), 4 on bad options (the statuses of
`conformance.results.verdicts`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from codec import (
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
)
from conformance.drivers.raw import DriverError, RawClient
from conformance.results.verdicts import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE

DEFAULT_URLS = ["amqp://guest:guest@127.0.0.1:5743/", "amqp://guest:guest@127.0.0.1:5672/"]
QUORUM = {"x-queue-type": "quorum"}


def operations(client: RawClient, ch: int, prefix: str) -> dict[str, Callable[[int], Any]]:
    """Each operation as a call of its index; a delete undoes the declare of the same index."""
    def rpc(method: Any, reply: type) -> Any:
        return client.rpc(ch, method, reply)

    return {
        "declare classic": lambda i: rpc(QueueDeclare(queue=f"{prefix}.c{i}"), QueueDeclareOk),
        "delete classic": lambda i: rpc(QueueDelete(queue=f"{prefix}.c{i}"), QueueDeleteOk),
        "declare quorum": lambda i: rpc(QueueDeclare(queue=f"{prefix}.q{i}", durable=True, arguments=QUORUM),
                                        QueueDeclareOk),
        "delete quorum": lambda i: rpc(QueueDelete(queue=f"{prefix}.q{i}"), QueueDeleteOk),
        "declare exchange": lambda i: rpc(ExchangeDeclare(exchange=f"{prefix}.x{i}", exchange_type="fanout"),
                                          ExchangeDeclareOk),
        "bind": lambda i: rpc(QueueBind(queue=f"{prefix}.b", exchange=f"{prefix}.x{i}"), QueueBindOk),
        "delete exchange": lambda i: rpc(ExchangeDelete(exchange=f"{prefix}.x{i}"), ExchangeDeleteOk),
        "passive declare": lambda i: rpc(QueueDeclare(queue=f"{prefix}.b", passive=True), QueueDeclareOk),
        "purge": lambda i: rpc(QueuePurge(queue=f"{prefix}.b"), QueuePurgeOk),
    }


def timed(call: Callable[[int], Any], calls: int, first: int) -> list[float]:
    out = []
    for i in range(first, first + calls):
        started = time.perf_counter()
        call(i)
        out.append((time.perf_counter() - started) * 1000)
    return out


def measure(url: str, calls: int) -> dict[str, list[float]]:
    """Every operation's milliseconds on `url` (the warm-up call untimed)."""
    prefix = f"amqpc.lat.{uuid.uuid4().hex[:8]}"

    def connection(_i: int) -> None:
        with RawClient(url, timeout=10.0):
            pass

    timed(connection, 1, 0)  # warm-up
    found: dict[str, list[float]] = {"connection open + close": timed(connection, calls, 0)}
    with RawClient(url, timeout=10.0) as client:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue=f"{prefix}.b"), QueueDeclareOk)
        try:
            for name, call in operations(client, ch, prefix).items():
                timed(call, 1, calls)  # warm-up, on an index of its own
                found[name] = timed(call, calls, 0)
        finally:
            client.rpc(ch, QueueDelete(queue=f"{prefix}.b"), QueueDeleteOk)
            for name in (f"{prefix}.c{calls}", f"{prefix}.q{calls}"):
                client.rpc(ch, QueueDelete(queue=name), QueueDeleteOk)
            client.rpc(ch, ExchangeDelete(exchange=f"{prefix}.x{calls}"), ExchangeDeleteOk)
    return found


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.operation_latency",
                                     description="per-operation latency of the machines' set-up, per broker")
    parser.add_argument("urls", nargs="*", default=DEFAULT_URLS, help="broker URLs (the first is the reference)")
    parser.add_argument("--calls", type=int, default=30, help="timed calls per operation (default 30)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    if args.calls < 1:
        print("--calls must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    results: dict[str, dict[str, list[float]]] = {}
    for url in args.urls:
        try:
            results[url] = measure(url, args.calls)
        except OSError as exc:  # refused, unreachable
            print(f"{url}: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        except DriverError as exc:  # a refused login or operation, no reply
            print(f"{url}: {exc}", file=sys.stderr)
            return EXIT_FAILED
    names = list(next(iter(results.values())))
    print(f"{'operation':<26}" + "".join(f"{url.rsplit('@', 1)[-1]:>28}" for url in results))
    for name in names:
        cells = "".join(f"{statistics.median(r[name]):>13.2f} ms (p90 {percentile(r[name], 0.9):6.2f})"
                        for r in results.values())
        print(f"{name:<26}{cells}")
    first, *others = list(results)
    ratios = {f"{name}: broker {i} / broker 0": round(
        statistics.median(results[url][name]) / statistics.median(results[first][name]), 2)
        for i, url in enumerate(others, 1) for name in names}
    print(json.dumps(ratios))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
