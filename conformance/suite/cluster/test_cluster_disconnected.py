"""A consumer whose node is unreachable (TMO-4.3-6.c, RabbitMQ 4.3; docs/findings-cluster.md (i)).

A quorum queue is declared on node 1 (its leader); a consumer on node 2 holds its one message
unacked; a second consumer waits on node 1. Node 2 is killed (`{action}` kill: no connection is
closed, so to node 1 its processes are unreachable, Erlang's `noconnection`, as in a partition).
rabbit_fifo v4.3.5 then marks the node's consumers `suspected_down` and starts a timer of the
queue's consumer_disconnected_timeout (l. 562-605); only when it fires does it return their
checked-out messages (l. 607-620). So the message reaches node 1's consumer, redelivered, once that
time has passed since the kill and not before: the x-consumer-disconnected-timeout argument's
value, or the 60 s default (rabbit_quorum_queue:get_consumer_disconnected_timeout, l. 1959).

The lower bound is measured from the moment the kill starts (the timer cannot start earlier),
while the kill runs in a thread: node control may take seconds; the upper bound from its end
(node 1 no longer counts node 2 as running, so the timer runs).
"""

from __future__ import annotations

import threading
import time

import pytest

from codec import BasicAck, BasicCancel, BasicDeliver
from conformance.plugin.cluster import Cluster
from conformance.plugin.session import Names, Target
from conformance.results.verdicts import HarnessError
from conformance.suite.steps.cluster import (
    CAP,
    arrives,
    confirming,
    consumer,
    delivered,
    measured,
    publish,
    quorum,
)

DEFAULT_MS = 60_000  # consumer_disconnected_timeout's default
ARGUMENT = "x-consumer-disconnected-timeout"
MARGIN = 0.1  # s: our clock against the broker's timer at the lower bound (a timer never fires early)
AWAY = 2


def _kill_in_background(cluster: Cluster, index: int) -> tuple[threading.Thread, list[BaseException]]:
    failures: list[BaseException] = []

    def kill() -> None:
        try:
            cluster.kill(index)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=kill, name=f"kill-node-{index}", daemon=True)
    thread.start()
    return thread, failures


@pytest.mark.rules("TMO-4.3-6")
@pytest.mark.clauses("TMO-4.3-6.c")
@pytest.mark.parametrize("wait_ms", [3000, pytest.param(None, marks=pytest.mark.long_wait(62))],
                         ids=["argument-3s", "default-60s"])
def test_an_unreachable_consumers_message_waits_for_the_disconnected_timeout(cluster: Cluster, names: Names,
                                                                            target: Target,
                                                                            wait_ms: int | None) -> None:
    measured(target, "TMO-4.3-6")
    cluster.require(3)
    wait = (DEFAULT_MS if wait_ms is None else wait_ms) / 1000
    setting = "the default consumer_disconnected_timeout (60 s)" if wait_ms is None else f"{ARGUMENT}={wait_ms}"
    queue = names.queue("qq")
    home = cluster.connect(1, capabilities=CAP)
    quorum(home, home.channel(), queue, **({ARGUMENT: wait_ms} if wait_ms is not None else {}))
    away = cluster.connect(AWAY)
    ach = consumer(away, queue, "away", prefetch=1)
    pub = confirming(home)
    publish(home, pub, queue, b"m1")
    home.expect(pub, BasicAck, timeout=target.timeout(10))
    first = delivered(away, ach, target.timeout(5), "TMO-4.3-6.c", f"m1 to the consumer on node {AWAY}")
    assert (first.body, first.redelivered) == (b"m1", False), f"TMO-4.3-6.c: the first delivery: {first}"
    hch = consumer(home, queue, "home", prefetch=1)
    started = time.monotonic()
    thread, failures = _kill_in_background(cluster, AWAY)
    early = arrives(home, hch, max(0.0, started + wait - MARGIN - time.monotonic()), BasicDeliver, BasicCancel)
    assert early is None, \
        f"TMO-4.3-6.c: node {AWAY} was killed while its consumer held m1 unacked ({setting}); the quorum queue " \
        f"must keep m1 with that consumer for {wait:g} s, but node 1's consumer got {early.method} " \
        f"{time.monotonic() - started:.2f} s after the kill began"
    thread.join(timeout=target.timeout(300))
    if thread.is_alive() or failures:
        raise HarnessError(f"killing node {AWAY}: {failures[0] if failures else 'no end within the wait'}")
    ended = time.monotonic()
    got = arrives(home, hch, max(0.0, ended + wait - time.monotonic()) + target.timeout(10), BasicDeliver, BasicCancel)
    assert got is not None and isinstance(got.method, BasicDeliver), \
        f"TMO-4.3-6.c: node {AWAY} was killed while its consumer held m1 unacked ({setting}); {wait:g} s after " \
        f"the kill m1 must go back to the queue and reach node 1's consumer; got {got.method if got else 'nothing'} " \
        f"{time.monotonic() - started:.1f} s after the kill began"
    assert (got.body, got.method.redelivered) == (b"m1", True), \
        f"TMO-4.3-6.c: m1 returned after the disconnected timeout: body and redelivered flag: {got.body!r}, " \
        f"{got.method.redelivered}"
