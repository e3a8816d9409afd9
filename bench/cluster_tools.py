"""Helpers of bench.cluster_probe: clients of the cluster's nodes, node control, a timeline."""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codec import (
    BasicConsume,
    BasicConsumeOk,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    Command,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
)
from conformance.drivers.raw import ChannelClosed, ConnectionClosed, DriverError, RawClient

ROOT = Path(__file__).resolve().parents[1]
# Another cluster (e.g. `python -m reference_broker --nodes 3 --port 5780 --management-port 15780`):
# AMQPC_PROBE_PORT=5780 AMQPC_PROBE_ADMIN=http://127.0.0.1:15780 AMQPC_PROBE_NODE_CONTROL=
# "python -m reference_broker.node_control http://guest:guest@127.0.0.1:15780 {index} {action}"
PORT0 = int(os.environ.get("AMQPC_PROBE_PORT", "5751")) - 1  # node i listens on PORT0 + i
MGMT0 = 15750
ADMIN = os.environ.get("AMQPC_PROBE_ADMIN")  # one management API for every node
NODE_CONTROL = os.environ.get("AMQPC_PROBE_NODE_CONTROL", "scripts/rabbitmq4.sh node 4.3 {index} {action}")


class Timeline:
    def __init__(self, name: str) -> None:
        self.t0 = time.monotonic()
        print(f"\n== scenario {name}")

    def note(self, text: str) -> float:
        t = time.monotonic() - self.t0
        print(f"{t:8.3f}s  {text}", flush=True)
        return t


def client(i: int, cancel_notify: bool = True) -> RawClient:
    caps = {} if cancel_notify else {"consumer_cancel_notify": False}
    return RawClient(f"amqp://guest:guest@127.0.0.1:{PORT0 + i}/", capabilities=caps, timeout=10).connect()


def mgmt(i: int, path: str) -> Any:
    request = urllib.request.Request(f"{ADMIN or f'http://127.0.0.1:{MGMT0 + i}'}/api/{path}")
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def node(i: int, action: str, tl: Timeline) -> subprocess.Popen[bytes]:
    tl.note(f"node {i} {action}: command started")
    return subprocess.Popen(shlex.split(NODE_CONTROL.format(index=i, action=action)), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def describe(cmd: Command) -> str:
    m = cmd.method
    fields = ", ".join(f"{k}={v!r}" for k, v in m._asdict().items() if k not in ("ticket",))  # type: ignore[attr-defined]
    text = f"{m.NAME}({fields})"
    if cmd.properties is not None and cmd.properties.headers:
        text += f" headers={dict(cmd.properties.headers)}"
    if cmd.body:
        text += f" body={cmd.body!r}"
    return text


Watch = tuple[str, RawClient, int]


def watch(tl: Timeline, watched: list[Watch], seconds: float, proc: subprocess.Popen[bytes] | None = None,
          on: Callable[[str, Command], None] | None = None) -> None:
    """Note every command arriving on the watched channels, until `proc` ends and `seconds` more."""
    done: set[tuple[int, int]] = set()
    end = None if proc is not None else time.monotonic() + seconds
    while end is None or time.monotonic() < end:
        if proc is not None and end is None and proc.poll() is not None:
            err = proc.stderr.read().decode().strip() if proc.stderr else ""
            tl.note(f"node command returned {proc.returncode}: {err.splitlines()[-1] if err else ''}")
            end = time.monotonic() + seconds
        for label, c, ch in watched:
            if (c.id, ch) in done:
                continue
            try:
                cmd = c.poll(ch, duration=0.02)
            except (ChannelClosed, ConnectionClosed) as exc:
                tl.note(f"{label}: {type(exc).__name__} {exc}")
                done.add((c.id, ch))
                continue
            except DriverError as exc:
                tl.note(f"{label}: {type(exc).__name__} {exc}")
                done.add((c.id, ch))
                continue
            if cmd is not None:
                tl.note(f"{label}: {describe(cmd)}")
                if on is not None:
                    on(label, cmd)


def attempt(tl: Timeline, label: str, c: RawClient, ch: int, method: Any, *replies: type,
            timeout: float = 15.0) -> Command | None:
    """Send a request on a fresh channel number `ch` and note its reply or the channel's close."""
    start = time.monotonic()
    try:
        reply = c.rpc(ch, method, *replies, timeout=timeout)
    except DriverError as exc:
        tl.note(f"{label}: after {time.monotonic() - start:.3f}s {type(exc).__name__} {exc}")
        return None
    tl.note(f"{label}: after {time.monotonic() - start:.3f}s {describe(reply)}")
    return reply


def declare(c: RawClient, ch: int, q: str, args: dict[str, Any] | None = None, passive: bool = False) -> Any:
    return QueueDeclare(0, q, passive, True, False, False, False, args or {})


def setup_queue(c: RawClient, ch: int, q: str, args: dict[str, Any]) -> None:
    c.rpc(ch, QueueDelete(0, q, False, False, False), QueueDeleteOk)
    c.rpc(ch, declare(c, ch, q, args), QueueDeclareOk)


def publish(c: RawClient, ch: int, rk: str, body: bytes, exchange: str = "", mandatory: bool = False) -> None:
    c.send(ch, BasicPublish(0, exchange, rk, mandatory, False), BasicProperties(delivery_mode=2), body)


def consume(c: RawClient, ch: int, q: str, tag: str, prefetch: int = 0) -> None:
    if prefetch:
        c.rpc(ch, BasicQos(0, prefetch, False), BasicQosOk)
    c.rpc(ch, BasicConsume(0, q, tag, False, False, False, False, {}), BasicConsumeOk)


def queue_info(i: int, q: str) -> str:
    info = mgmt(i, f"queues/%2F/{q}")
    keys = ("type", "node", "leader", "members", "online", "state", "messages", "consumers")
    return ", ".join(f"{k}={info.get(k)}" for k in keys if k in info)


def finish(proc: subprocess.Popen[bytes], tl: Timeline) -> None:
    proc.wait(timeout=200)
    tl.note(f"node command returned {proc.returncode}")


