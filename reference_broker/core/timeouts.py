"""Consumer delivery-acknowledgement timeouts (RULES.md §6), 4.3 and legacy rules.

This module computes timeouts and deadlines; what happens when one fires is in expiry.py.

Rules:
- 4.3 (TMO-4.3-*): only quorum queues time out (`Rules.times_out`, TMO-4.3-1). Each manual-ack delivery (consumer or
  basic.get) gets a deadline; one timer per queue is armed at the earliest deadline. When it
  fires, only the expired deliveries are returned (returns first, delivery count unchanged),
  the consumer enters timeout state (no new messages until every timed-out delivery is
  settled), and the client gets `basic.cancel{nowait}` if it has consumer_cancel_notify and
  the consumer is registered, else `channel.close 406` with timeout "-1".
- Legacy (TMO-3x-*): a per-channel tick every `tick_interval` checks only the oldest unacked
  delivery of every queue type, against the global value read at channel.open (3.10), or
  min(queue argument, policy) for that delivery's queue when set (3.12); a timeout always
  closes the channel with 406 and the value used.
- Validation (TMO-04, 4.3): the consumer argument is refused on classic queues, and both
  arguments must be non-negative integers.
"""

from __future__ import annotations

from typing import Any

from codec import ReplyCode
from reference_broker.core import texts
from reference_broker.core.arguments import check_non_negative_int, is_int
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.effects import Effect, StartTimer
from reference_broker.core.errors import soft
from reference_broker.core.settings import policy_definition
from reference_broker.core.state import QUORUM, Channel, Consumer, Queue, Unacked

ARG = "x-consumer-timeout"


def validate_argument(core: BrokerState, queue_name: str, vhost: str, kind: str, value: Any) -> None:
    """TMO-04 (4.3.2+): 406 for the argument on a classic queue or a bad value."""
    if value is None or core.config.timeout_mode == "legacy":
        return
    what = texts.q(queue_name, vhost)
    if kind != QUORUM:
        raise soft(ReplyCode.PRECONDITION_FAILED,
                   f"invalid arg '{ARG}' for {what} of queue type rabbit_{kind}_queue")
    check_non_negative_int(ARG, what, value)


def queue_timeout(core: BrokerState, queue: Queue) -> int | None:
    """min(queue argument, policy), when either is set (TMO-03)."""
    candidates = (queue.arguments.get(ARG), policy_definition(core, queue).get("consumer-timeout"))
    values = [v for v in candidates if is_int(v)]
    if not values:
        return None
    return core.rules.combine_timeouts(values)


def effective_timeout(core: BrokerState, queue: Queue, consumer: Consumer) -> int | None:
    """TMO-03 for the 4.3 rules: quorum queues only; consumer argument, else
    min(queue argument, policy), else the global value. Legacy mode: the channel checks
    instead (TMO-3x-1), so consumers carry no timeout."""
    if core.config.timeout_mode == "legacy" or not core.rules.times_out(queue.kind):
        return None
    value = core.rules.consumer_timeout_arg(consumer.arguments.get(ARG))
    if is_int(value):
        return value
    return core.rules.queue_or_global(queue_timeout(core, queue), core.config.consumer_timeout)


# -- 4.3: per-delivery deadlines in the quorum queue -----------------------------------------
def arm(core: BrokerState, meta: Meta, queue: Queue, ch: Channel, unacked: Unacked,
        timeout_ms: int | None) -> list[Effect]:
    """Give a delivery its deadline and arm the queue's timer if it is the earliest."""
    if timeout_ms is None or not core.rules.times_out(queue.kind) or core.config.timeout_mode == "legacy":
        return []
    deadline = meta.now_ms + timeout_ms
    unacked.deadline = deadline
    queue.deadlines[(ch.conn, ch.number, unacked.tag)] = deadline
    if queue.timer_at is None or deadline < queue.timer_at:
        queue.timer_at = deadline
        return [StartTimer(("qtimeout", queue.vhost, queue.name), deadline)]
    return []


def get_timeout(core: BrokerState, queue: Queue) -> int | None:
    """basic.get deliveries: the queue's value, else the global one (4.3, quorum only)."""
    if not core.rules.times_out(queue.kind) or core.config.timeout_mode == "legacy":
        return None
    value = queue_timeout(core, queue)
    return core.config.consumer_timeout if value is None else value


def forget(queue: Queue, conn: int, channel: int, tag: int) -> None:
    queue.deadlines.pop((conn, channel, tag), None)


def rearm(queue: Queue) -> list[Effect]:
    if not queue.deadlines:
        return []
    earliest = min(queue.deadlines.values())
    if queue.timer_at is not None and queue.timer_at <= earliest:
        return []
    queue.timer_at = earliest
    return [StartTimer(("qtimeout", queue.vhost, queue.name), earliest)]


# -- legacy: the channel tick ------------------------------------------------------------------
def open_channel(core: BrokerState, meta: Meta, ch: Channel) -> list[Effect]:
    """TMO-3x-4: read the global value once; arm the tick (legacy mode only)."""
    ch.timeout_at_open = core.config.consumer_timeout
    if core.config.timeout_mode != "legacy":
        return []
    return [StartTimer(("tick", ch.conn, ch.number), meta.now_ms + core.config.tick_interval)]
