"""What the dead-letter tests share (the deadletter area's steps): waiting for a dead-lettered
message, reading it, and making a message die.

Rules:
- `landed` asks again (basic.get, bounded) until a message is there: the source queue dead-letters
  after its own reply.
- `TTL_TOLERANCE` is how long past its TTL a message may still be seen (0.5 s, scaled): the timer
  a classic queue sets for its head's expiry, rounded up to the millisecond
  (rabbit_amqqueue_process ensure_ttl_timer), a quorum queue's after each applied batch
  (rabbit_fifo timer_effect), and a loaded machine's scheduling.
"""

from __future__ import annotations

import time
from typing import Any

from codec import BasicGet, BasicGetEmpty, BasicGetOk, BasicNack, BasicReject, Command
from conformance.drivers.raw import RawClient
from conformance.suite.steps.queues import CLASSIC, QUORUM, get

KINDS = [CLASSIC, QUORUM]
TTL_TOLERANCE = 0.5  # s past the TTL (scaled): see the module rules


def landed(client: RawClient, ch: int, queue: str, within: float, no_ack: bool = True) -> Command | None:
    """The first message in `queue` (basic.get-ok), asked again until one is there or `within` passed:
    the source queue dead-letters after its own reply."""
    deadline = time.monotonic() + within
    while True:
        reply = client.rpc(ch, BasicGet(queue=queue, no_ack=no_ack), BasicGetOk, BasicGetEmpty)
        if isinstance(reply.method, BasicGetOk):
            return reply
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)


def get_ok(reply: Command) -> BasicGetOk:
    assert isinstance(reply.method, BasicGetOk)
    return reply.method


def headers_of(reply: Command) -> dict[str, Any]:
    return dict((reply.properties.headers or {}) if reply.properties else {})


def expiration(how: str) -> str:
    """The message's expiration: 100 ms when it is to expire, else one it cannot reach within the
    test, so a confirm or a basic.get delayed by a slow link never finds it expired already."""
    return "100" if how == "expired" else "600000"


def die(client: RawClient, ch: int, queue: str, how: str) -> None:
    """Make the (only) message of `queue` die: reject or nack it from a basic.get, or let it expire
    (it was published with `expiration(how)`, 100 ms)."""
    if how == "expired":
        return
    got = get(client, ch, queue)
    assert got is not None, f"the message to dead-letter is not in {queue}"
    client.send(ch, BasicReject(delivery_tag=got.tag, requeue=False) if how == "reject"
                else BasicNack(delivery_tag=got.tag, requeue=False))
