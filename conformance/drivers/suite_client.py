"""The suite's drivers of one client library: in process for Python, the adapter program for any other.

Responsibility: `open_client(name, timeout)`, a fresh unconnected `ClientDriver` of a library of
the client registry, for `run --client NAME`: a Python library's in-process driver
(`adapter.load_driver`), or, for every other language, its adapter program
(docs/adapter-protocol.md) started as an `OwnedAdapter`, a `RemoteDriver` whose `close()` also
ends the program, so each driver of a test is one connection in one process, gone with it.
`prepare(name)` checks the library and builds its adapter once (the run does it before the first
test, so a build's minutes are never a test's).

Rules: a library that cannot run here is `ClientUnavailable` (one line naming the package to
install), an adapter the compiler refuses `BuildFailed`, one that will not start `AdapterError`:
the harness's environment, never the broker's verdict. Every wait is the driver's (bounded).
"""

from __future__ import annotations

import functools

from conformance.drivers.adapter import load_driver
from conformance.drivers.build import Built
from conformance.drivers.interface import ClientDriver, DriverError
from conformance.drivers.registry import REGISTRY
from conformance.drivers.remote import ClientHung, RemoteDriver

START_TIMEOUT = 60.0  # s: a JVM on a busy machine says hello within this


class OwnedAdapter(RemoteDriver):
    """A `RemoteDriver` that owns its adapter program: `close()` closes the connection, then ends it."""

    def close(self) -> None:
        hung = False
        try:
            self.request("close")
        except ClientHung:
            hung = True  # the library hangs in close: no bye, straight to terminate
        except DriverError:
            pass  # a close that fails is the library's business
        finally:
            self.stop(graceful=not hung)


@functools.lru_cache(maxsize=16)
def prepare(name: str) -> Built:
    """The library's adapter command line, built on first use (ClientUnavailable, BuildFailed)."""
    return REGISTRY[name].prepare()


def open_client(name: str, timeout: float) -> ClientDriver:
    """A fresh, unconnected driver of library `name` whose operations wait up to `timeout` seconds."""
    spec = REGISTRY[name]
    if spec.driver is not None:
        driver: ClientDriver = load_driver(name, timeout)
        return driver
    return OwnedAdapter(prepare(name).command, timeout=timeout + 2.0, start_timeout=START_TIMEOUT,
                        env=spec.environment(timeout))
