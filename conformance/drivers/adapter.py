"""The Python adapter program: serves one client-library driver over the adapter protocol.

Usage: ``python -m conformance.drivers.adapter CLIENT`` (CLIENT: a Python library of the client
registry, `conformance.drivers.registry.python_drivers`).
It prints the hello line, then answers requests from stdin one by one (`wire_json`), and
between requests keeps running the library's I/O so that its callbacks fire; every event is
written as soon as the library reports it.

Rules: an operation's failure is a reply with ``ok: false``, never a crash of the adapter; an
exception that escapes the library while it runs its I/O is a ``failure`` event; stdout carries
only protocol lines (library logging goes to stderr).
"""

from __future__ import annotations

import importlib
import logging
import os
import selectors
import sys
from collections.abc import Callable
from typing import Any, TextIO

from conformance.drivers import interface as di
from conformance.drivers import wire_json
from conformance.drivers.registry import python_drivers
from conformance.results.verdicts import EXIT_OK, EXIT_USAGE

IDLE_PUMP = 0.01  # seconds of library I/O between looks at stdin


def load_driver(client: str, timeout: float = 5.0) -> Any:
    module, _, name = python_drivers()[client].partition(":")
    return getattr(importlib.import_module(module), name)(timeout)


def call(driver: Any, op: str, args: dict[str, Any]) -> Any:
    """Run one request against the driver; returns the reply's value."""
    if op not in wire_json.OPS or op in ("bye",):
        raise di.Unsupported(f"unknown op {op!r}")
    if op == "connect":
        options = di.ConnectOptions(args.get("heartbeat"), args.get("frame_max"), args.get("channel_max"))
        return driver.connect(args["url"], options)
    if op == "publish":
        args = {**args, "properties": wire_json.properties(args.get("properties"))}
    result = getattr(driver, op)(**args)  # every parameter is named in OPS
    if isinstance(result, di.Delivery):
        return wire_json.delivery_to_json(result)
    return result


class JsonLinesOutput:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, obj: dict[str, Any]) -> None:
        self.stream.write(wire_json.dumps(obj) + "\n")
        self.stream.flush()


class _Session:
    """The current driver; each `connect` starts a fresh one (one scenario, one driver)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.driver = make()


def serve(make_driver: Callable[[], Any], stdin_fd: int, out: JsonLinesOutput) -> None:
    session = _Session(make_driver)
    out.write(wire_json.hello(session.driver.info()))
    selector = selectors.DefaultSelector()
    selector.register(stdin_fd, selectors.EVENT_READ)
    buffer = b""
    while True:
        if not selector.select(timeout=0):
            event = session.driver.next_event(IDLE_PUMP)
            if event is not None:
                out.write(wire_json.event_to_json(event))
            continue
        chunk = os.read(stdin_fd, 1 << 20)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip() and not _answer(session, line.decode("utf-8"), out):
                return


def _answer(session: _Session, line: str, out: JsonLinesOutput) -> bool:
    request = wire_json.loads(line)
    rid, op = request.get("id"), str(request.get("op"))
    if op == "connect":
        session.driver.close()
        session.driver = session.make()
    driver = session.driver
    # what already reached the library comes first: a request never overtakes input that arrived
    # before it (a `state` after a broker's frame reports the library's reaction to that frame)
    while (event := driver.next_event(0)) is not None:
        out.write(wire_json.event_to_json(event))
    if op == "bye":
        driver.close()
        out.write({"id": rid, "ok": True, "value": None})
        return False
    try:
        value = call(driver, op, dict(request.get("args") or {}))
        reply: dict[str, Any] = {"id": rid, "ok": True, "value": value}
    except Exception as exc:
        reply = {"id": rid, "ok": False, "error": wire_json.error_to_json(exc)}
    while driver.events:  # what the library reported while the operation ran comes first
        out.write(wire_json.event_to_json(driver.events.popleft()))
    out.write(reply)
    return True


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in python_drivers():
        print(f"usage: python -m conformance.drivers.adapter {{{','.join(python_drivers())}}}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    timeout = float(os.environ.get("AMQPC_ADAPTER_TIMEOUT", "5"))
    serve(lambda: load_driver(args[0], timeout), sys.stdin.fileno(), JsonLinesOutput(sys.stdout))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
