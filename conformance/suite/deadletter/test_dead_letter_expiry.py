"""When an expired message is dead-lettered (DLX-01 with TTL-03 and TTL-05): at its expiry, on the
broker's own clock, not when someone next looks at the queue.

Rules:
- A queue with x-message-ttl and a dead-letter exchange, and nobody fetching from it: the broker's
  own timer must expire the head and dead-letter it (rabbit_amqqueue_process ensure_ttl_timer /
  drop_expired_msgs for classic queues, rabbit_fifo's timer effect for quorum queues, v3.10.8 to
  v4.3.5). The dead-letter queue is watched with basic.get only (the source queue is never asked),
  so a broker that expires only when the source queue is read fails.
- The deadline is the TTL plus `TTL_TOLERANCE` (test_ttl_expiry's, 0.5 s scaled) after the confirm;
  the message may not be there before the TTL has passed since the publish was sent. The failure
  says how late it was, or that it was early.
- TTL 0 (a classic queue without a consumer) dead-letters at once, with reason `expired`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from codec import BasicProperties
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.deadletter import KINDS, TTL_TOLERANCE, headers_of, landed
from conformance.suite.steps.queues import CLASSIC, Publisher, declare, prompt, require_kind

Connect = Callable[..., RawClient]
TTL_MS = 300


@pytest.mark.rules("DLX-01", "TTL-03")
@pytest.mark.parametrize("kind", KINDS)
def test_an_expired_message_is_dead_lettered_at_its_expiry(connect: Connect, names: Names, target: Target,
                                                           kind: str) -> None:
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    dlq = declare(client, ch, names.queue("dlq"))
    src = declare(client, ch, names.queue(f"src-{kind}"), kind,
                  {"x-message-ttl": TTL_MS, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    sent = time.monotonic()
    Publisher(client).publish(src, [b"m"], BasicProperties())
    confirmed = time.monotonic()
    due = confirmed + TTL_MS / 1000 + target.timeout(TTL_TOLERANCE)
    got = landed(client, ch, dlq, max(due - time.monotonic(), 0))
    now = time.monotonic()
    assert got is not None, (
        f"DLX-01: a message in a {kind} queue with x-message-ttl {TTL_MS} and a dead-letter exchange, which nobody "
        f"fetched from, must be dead-lettered by its queue's own timer within {TTL_MS} ms plus the tolerance "
        f"({target.timeout(TTL_TOLERANCE):.2f} s) of its confirm; the dead-letter queue {dlq} was still empty "
        f"{now - confirmed:.2f} s after the confirm")
    seen = now - sent  # it landed before `now`, and was enqueued after `sent`
    assert seen >= TTL_MS / 1000, (
        f"TTL-03: the message was in the dead-letter queue {seen * 1000:.0f} ms after it was sent, before its TTL "
        f"of {TTL_MS} ms had passed")
    reasons = [entry.get("reason") for entry in headers_of(got).get("x-death", [])]
    assert reasons[:1] == ["expired"], f"DLX-01: dead-lettered by expiry, x-death's reasons were {reasons}"


@pytest.mark.rules("DLX-01", "TTL-05")
def test_ttl_zero_dead_letters_at_once(connect: Connect, names: Names, target: Target) -> None:
    """A classic queue (quorum queues stamp TTL 0 as enqueue + 1 ms: not pinned, as in TTL-05)."""
    require_kind(target.profile, CLASSIC)
    client = connect()
    ch = client.channel()
    dlq = declare(client, ch, names.queue("dlq"))
    src = declare(client, ch, names.queue("src"), CLASSIC,
                  {"x-message-ttl": 0, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    Publisher(client).publish(src, [b"m"], BasicProperties())
    got = landed(client, ch, dlq, prompt(client))
    assert got is not None, (
        f"DLX-01/TTL-05: a message published with no consumer to a classic queue with x-message-ttl 0 and a "
        f"dead-letter exchange expires at once and is dead-lettered; {dlq} was still empty {prompt(client):.1f} s "
        "after the confirm")
    reasons = [entry.get("reason") for entry in headers_of(got).get("x-death", [])]
    assert reasons[:1] == ["expired"], f"DLX-01: dead-lettered by expiry (TTL 0), x-death's reasons were {reasons}"
