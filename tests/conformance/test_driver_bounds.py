"""Every Python library driver bounds every call: on a broker that stops answering, a call
raises `NoReply` (or reports the connection lost) within the driver's timeout, never waits for
the run's watchdog.

The broker is the reference broker behind a `HostileProxy` that, once the client declares a
queue named with the suite's prefix, forwards nothing more in either direction on any
connection (`wedge=True`): what GarageMQ does when its vhost deadlocks (docs/garagemq.md).
Before the bounds, pika's blocking calls and kombu's waited without limit there, and a library
cell on GarageMQ lost one worker per test to the watchdog. The asyncio drivers' close also ends
what the library left pending on its loop (its reader, writer and closer tasks): nothing is
destroyed pending after the test ("coroutine ... was never awaited", "unclosed transport").
"""

from __future__ import annotations

import gc
import time

import pytest

from conformance.drivers import interface as di
from conformance.drivers.adapter import load_driver
from conformance.drivers.library import library_version
from conformance.drivers.registry import REGISTRY, python_drivers
from reference_broker.server import EmbeddedBroker
from tests.conformance.hostile import HostileProxy, Mode, Plan, declares_queue
from tests.conftest import require

TIMEOUT = 1.0  # s: the driver's own bound for one call
SLACK = 4.0  # s: beyond it (a loaded machine); the watchdog a bound replaces is 120 s


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning", "error::ResourceWarning")
@pytest.mark.parametrize("client", sorted(python_drivers()))
def test_a_call_to_a_broker_that_stopped_answering_ends_within_the_drivers_timeout(client: str) -> None:
    require(library_version(REGISTRY[client].package) != "not installed", f"{client} is not installed")
    driver = load_driver(client, timeout=TIMEOUT)
    with EmbeddedBroker() as broker, HostileProxy(
            (broker.host, broker.port), Plan(Mode.BLACKHOLE, on_request=declares_queue(), wedge=True)) as proxy:
        try:
            driver.connect(proxy.url)
            ch = driver.open_channel()
            calls = {"the declare that wedges the broker": lambda: driver.declare_queue(ch, "amqpc.bounded"),
                     "a new channel's declare on the wedged broker":
                         lambda: driver.declare_queue(driver.open_channel(), "amqpc.after")}
            for attempt, call in calls.items():
                began = time.monotonic()
                with pytest.raises((di.NoReply, di.ConnectionLost, di.ConnectionClosed)):
                    call()
                took = time.monotonic() - began
                assert took < TIMEOUT + SLACK, (
                    f"{client}: {attempt} took {took:.1f} s; the driver's timeout is {TIMEOUT} s")
            assert proxy.wait_for_action(0.0), "the proxy never wedged: the test judged nothing"
        finally:
            began = time.monotonic()
            driver.close()
            assert time.monotonic() - began < TIMEOUT + SLACK, f"{client}: close on a wedged broker is unbounded"
            driver.close()  # a second close (an adapter's own, then its exit's) is a no-op
            gc.collect()  # what the library left pending on a loop it no longer runs is destroyed now
