"""The issue-29 workload: a pika program doing each row of the issue's table, and its recording.

`run_workload(url, prefix)` declares a classic queue with x-queue-version 1, a classic queue with
x-consumer-timeout, consumes with x-consumer-timeout from a classic queue, declares an exchange of
an unknown type (RabbitMQ 3.10.8 closes the connection: a new one is opened), sets basic.qos
global=true, declares a transient non-exclusive queue and a queue with x-queue-mode lazy, and
returns one quorum message 25 times (basic.get + basic.reject requeue=true). Every queue but the
transient one is durable, so each row exercises one rule. Everything is deleted at the end.

`record(lake, upstream)` runs it through `amqp-conformance record` (the CLI, as an operator
would), bounded in time.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pika
import pika.exceptions

RETURNS = 25
UNKNOWN_TYPE = "x-amqpc-no-such-type"
LIMIT_S = 60.0


def run_workload(url: str, prefix: str) -> int:
    """Run the program against `url`; the number of times the quorum message came back."""
    params = pika.URLParameters(url)
    params.blocked_connection_timeout = 10
    connection = pika.BlockingConnection(params)
    ch = connection.channel()
    ch.queue_declare(f"{prefix}v1", durable=True, arguments={"x-queue-version": 1})
    ch.queue_declare(f"{prefix}ct", durable=True, arguments={"x-consumer-timeout": 60000})
    ch.queue_declare(f"{prefix}c", durable=True)
    tag = ch.basic_consume(f"{prefix}c", lambda *a: None, arguments={"x-consumer-timeout": 60000})
    ch.basic_cancel(tag)
    with contextlib.suppress(pika.exceptions.AMQPError):  # 3.10.8: connection.close 503
        ch.exchange_declare(f"{prefix}x", exchange_type=UNKNOWN_TYPE)
    if connection.is_open:
        connection.close()
    connection = pika.BlockingConnection(params)
    ch = connection.channel()
    ch.basic_qos(prefetch_count=10, global_qos=True)
    ch.queue_declare(f"{prefix}t", durable=False, exclusive=False)
    ch.queue_declare(f"{prefix}lazy", durable=True, arguments={"x-queue-mode": "lazy"})
    returned = _bounce(ch, f"{prefix}qq")
    for name in ("v1", "ct", "c", "t", "lazy", "qq"):
        ch.queue_delete(f"{prefix}{name}")
    connection.close()
    return returned


def _bounce(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> int:
    ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"bounced")
    returned = 0
    while returned <= RETURNS:
        method = None
        deadline = time.monotonic() + 5.0
        while method is None and time.monotonic() < deadline:
            method, _, _ = ch.basic_get(queue)
            if method is None:
                time.sleep(0.02)
        if method is None:
            break  # gone: dead-lettered or dropped (RabbitMQ >= 4.0 after 20 counted returns)
        if returned == RETURNS:
            ch.basic_ack(method.delivery_tag)
            break
        ch.basic_reject(method.delivery_tag, requeue=True)
        returned += 1
    return returned


def record(lake: Path, upstream: str, prefix: str) -> int:
    """Record `run_workload` through `amqp-conformance record`; the returns it saw."""
    command = [sys.executable, "-m", "conformance.cli", "record", "--listen", "127.0.0.1:0",
               "--upstream", upstream, "--out", str(lake), "--duration", str(LIMIT_S), "--flush-interval", "0.2"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"amqp://([\d.]+):(\d+)", line)
        assert found, f"record did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        returned = run_workload(f"amqp://guest:guest@{found[1]}:{found[2]}/", prefix)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else proc.returncode
    return returned
