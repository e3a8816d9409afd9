"""Relay benchmark: pika publish + consume directly against RabbitMQ, and through the recording relay.

What it measures (same broker, same process, same program): a pika BlockingConnection publishes
N messages (default 5000, 200 octets) to a fresh queue and consumes them back with manual acks
(prefetch 100), once straight to the broker and once through `amqp-conformance record` running as
its own process (as an operator runs it), alternating, best of `--repeat`. Printed: a table and
one JSON line with `relay_x_direct` = direct time / relay time (1.0: no cost; the goal is ≥ 0.7)
and the frames the relay wrote.
"""

from __future__ import annotations

import argparse
import json
import re
import select
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":  # `python bench/relay.py`: import the project, not bench/
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]
    sys.path.insert(0, str(_ROOT))

import pika  # noqa: E402

from conformance.results.parts import read_table  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--broker", default="127.0.0.1:5672", help="HOST:PORT of the broker (RabbitMQ)")
    p.add_argument("--messages", type=int, default=5000)
    p.add_argument("--size", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    return p.parse_args(argv)


def publish_consume(port: int, host: str, messages: int, size: int) -> float:
    started = time.perf_counter()
    connection = pika.BlockingConnection(pika.ConnectionParameters(host, port))
    channel = connection.channel()
    queue = f"amqpc-bench-relay-{uuid.uuid4().hex[:8]}"
    channel.queue_declare(queue, exclusive=True)
    body = b"x" * size
    for _ in range(messages):
        channel.basic_publish("", queue, body)
    channel.basic_qos(prefetch_count=100)
    for got, (method, _, _) in enumerate(channel.consume(queue, inactivity_timeout=10), start=1):
        if method is None:
            raise SystemExit("no delivery within 10 s")
        if got % 50 == 0 or got == messages:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if got == messages:
            break
    channel.cancel()
    connection.close()
    return time.perf_counter() - started


def announced_port(relay: subprocess.Popen[str], timeout: float = 30.0) -> int:
    """The port the relay listens on, read from its first line ("recording: amqp://HOST:PORT -> ...").
    The relay picks it itself (--listen 127.0.0.1:0): a port picked here and handed over could be
    taken by another process in between (seen under `make test`'s parallel workers)."""
    assert relay.stdout is not None
    ready, _, _ = select.select([relay.stdout], [], [], timeout)
    line = relay.stdout.readline() if ready else ""
    found = re.search(r"amqp://[^:]+:(\d+) ", line)
    if found is None:
        raise SystemExit(f"the relay did not say where it listens within {timeout:.0f} s: {line!r}")
    return int(found.group(1))


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), 0.0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return round((int(fields[11]) + int(fields[12])) / 100, 2)  # clock ticks (USER_HZ = 100)
    except (OSError, IndexError, ValueError):
        return 0.0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    host, port = args.broker.rsplit(":", 1)
    with tempfile.TemporaryDirectory() as out:
        relay = subprocess.Popen([sys.executable, "-m", "conformance.record.cli", "--listen", "127.0.0.1:0",
                                  "--upstream", f"amqp://{args.broker}", "--out", out], cwd=_ROOT,
                                 stdout=subprocess.PIPE, text=True)
        try:
            listen = announced_port(relay)
            publish_consume(int(port), host, 200, args.size)  # warm up both paths
            publish_consume(listen, "127.0.0.1", 200, args.size)
            direct, relayed = [], []
            for _ in range(args.repeat):
                direct.append(publish_consume(int(port), host, args.messages, args.size))
                relayed.append(publish_consume(listen, "127.0.0.1", args.messages, args.size))
            relay_cpu = _cpu_seconds(relay.pid)
        finally:
            relay.terminate()
            relay.wait(30)
        frames = read_table(out, "frames").num_rows
    best_direct, best_relay = min(direct), min(relayed)
    print(f"{'pika publish+consume':<40} {'seconds':>8}  ({args.messages} messages of {args.size} octets)")
    print(f"{'direct to the broker':<40} {best_direct:>8.3f}")
    print(f"{'through the recording relay':<40} {best_relay:>8.3f}")
    print(json.dumps({"direct_s": round(best_direct, 3), "relay_s": round(best_relay, 3),
                      "relay_x_direct": round(best_direct / best_relay, 3), "frames_recorded": frames,
                      "relay_cpu_s": relay_cpu, "relay_frames_per_cpu_s": round(frames / relay_cpu) if relay_cpu else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
