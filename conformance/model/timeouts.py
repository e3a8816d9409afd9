"""Consumer delivery-acknowledgement timeouts (RULES.md §6, TMO-*): the oracle as pure functions.

Responsibility: for a profile (conformance.catalogue.rules.PROFILES) answer which timeout value
applies to a manual-ack delivery, how and when its expiry is detected, what the client sees,
and whether an `x-consumer-timeout` argument is refused. No I/O, no clock.

Rules:
- TMO-03, effective value: rabbitmq-4.3, quorum queues: the consumer argument, else
  min(queue argument, policy `consumer-timeout`) when either is set, else the global
  `consumer_timeout`, else 1,800,000 ms; classic queues and streams never time out (TMO-4.3-1).
  rabbitmq-3.12 / rabbitmq-4.0: every queue type; consumer argument ignored; min(queue argument,
  policy), else global. rabbitmq-3.10: the global value only. amqp-0-9-1: no timeouts.
  A global of None means "not set": the built-in default (TMO-01); `disabled=True` is the
  ≤4.2 `{consumer_timeout, undefined}` (no timeout at all).
- basic.get deliveries have no consumer argument: the same lookup with consumer_arg=None.
- Only non-negative integers count as values (TMO-04): anything else is ignored by the lookup
  (it is refused at declare/consume on 4.3, see `argument_refused`).
- TMO-02, detection: 4.3 at the delivery's deadline (delivery + T); ≤4.2 on the channel tick,
  between T and T + tick after the delivery, for the oldest unacked delivery of the channel.
- TMO-4.3-3 / TMO-3x-2, reaction: 4.3 sends basic.cancel when the connection has
  consumer_cancel_notify and the delivery belongs to a registered consumer, else channel.close
  406 with "Timeout value used: -1 ms"; ≤4.2 always closes the channel with the value used.
  The 4.3 reaction is per firing of the queue's timer (live 4.3.6): a consumer still registered
  gets a basic.cancel every time more of its deliveries expire, not only the first time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from codec.constants import ReplyCode

DEFAULT_CONSUMER_TIMEOUT = 1_800_000  # ms, TMO-01
DEFAULT_TICK_INTERVAL = 60_000  # ms, TMO-02 (channel_tick_interval, ≤4.2)
ARGUMENT = "x-consumer-timeout"
POLICY_KEY = "consumer-timeout"
CLASSIC, QUORUM, STREAM = "classic", "quorum", "stream"
CANCEL, CLOSE = "basic.cancel", "channel.close"
CLOSE_CODE, CLOSE_CLASS_ID, CLOSE_METHOD_ID = ReplyCode.PRECONDITION_FAILED, 0, 0
SENTINEL_4_3 = -1  # TMO-4.3-3: the value printed when a 4.3 timeout closes the channel
_LEGACY = ("rabbitmq-3.10", "rabbitmq-3.12", "rabbitmq-4.0")


def is_value(value: Any) -> bool:
    """A usable timeout value: a non-negative integer (bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def per_delivery(profile: str) -> bool:
    """4.3: deadlines kept by the quorum queue; otherwise (≤4.2) the channel's tick."""
    return profile == "rabbitmq-4.3"


def has_timeouts(profile: str) -> bool:
    return profile == "rabbitmq-4.3" or profile in _LEGACY


def policy_key_exists(profile: str) -> bool:
    """TMO-03: `consumer-timeout` is a policy key from 3.12; 3.10/3.11 reject it in validation."""
    return profile in ("rabbitmq-4.3", "rabbitmq-4.0", "rabbitmq-3.12")


def queue_level(profile: str, queue_arg: Any, policy: Any) -> int | None:
    """min(queue argument, policy) where the profile reads them (3.12+), else None."""
    if not policy_key_exists(profile):
        return None
    values = [v for v in (queue_arg, policy) if is_value(v)]
    return min(values) if values else None


def effective_consumer_timeout(profile: str, consumer_arg: Any = None, queue_arg: Any = None, policy: Any = None,
                               global_: int | None = None, *, queue_type: str = QUORUM,
                               disabled: bool = False) -> int | None:
    """TMO-03: the timeout (ms) a manual-ack delivery gets, or None when it never times out."""
    if not has_timeouts(profile):
        return None
    if per_delivery(profile):
        if queue_type != QUORUM:  # TMO-4.3-1
            return None
        if is_value(consumer_arg):
            return int(consumer_arg)
    elif disabled:  # ≤4.2: {consumer_timeout, undefined}
        return None
    level = queue_level(profile, queue_arg, policy)
    if level is not None:
        return level
    return DEFAULT_CONSUMER_TIMEOUT if global_ is None else global_


@dataclass(frozen=True)
class Reaction:
    """What the client sees when a delivery times out."""

    kind: str  # CANCEL or CLOSE
    timeout_in_text: int | None = None  # the "Timeout value used: <T> ms" of a CLOSE


def reaction(profile: str, effective: int, *, cancel_notify: bool, consumer_registered: bool) -> Reaction:
    """TMO-4.3-3 (4.3) and TMO-3x-2 (≤4.2). `consumer_registered` is False for basic.get."""
    if per_delivery(profile):
        if cancel_notify and consumer_registered:
            return Reaction(CANCEL)
        return Reaction(CLOSE, SENTINEL_4_3)
    return Reaction(CLOSE, effective)


def close_text(channel: int, timeout_in_text: int) -> str:
    """The reply-text of the timeout channel.close (TMO-3x-2)."""
    return (f"PRECONDITION_FAILED - delivery acknowledgement on channel {channel} timed out. "
            f"Timeout value used: {timeout_in_text} ms. This timeout value can be configured, "
            "see consumers doc guide to learn more")


_CLOSE_TEXT = re.compile(r"delivery acknowledgement on channel \d+ timed out\. Timeout value used: (-?\d+) ms")


def timeout_in_close_text(text: str | None) -> int | None:
    """The T of a timeout `channel.close` text (`close_text`), None when the text is another."""
    found = _CLOSE_TEXT.search(text or "")
    return int(found.group(1)) if found else None


def detection_window(profile: str, effective: int, tick: int = DEFAULT_TICK_INTERVAL) -> tuple[float, float]:
    """(earliest, latest) ms after the delivery at which the timeout is detected (TMO-02,
    TMO-4.3-2); latest is inf when the profile never evaluates it."""
    if not has_timeouts(profile):
        return math.inf, math.inf
    if per_delivery(profile):
        return float(effective), float(effective)
    return float(effective), float(effective + tick)


def argument_refused(profile: str, queue_type: str, value: Any, *, on_consume: bool) -> bool:
    """TMO-04: whether `x-consumer-timeout` = value is refused with 406 (4.3.2+ semantics):
    the consumer argument on a non-quorum queue (4.3.0+), the queue argument on a classic queue
    (4.3.2+), and any value that is not a non-negative integer. ≤4.2: never refused."""
    if profile != "rabbitmq-4.3":
        return False
    if queue_type != QUORUM:
        return on_consume or queue_type == CLASSIC
    return not is_value(value)


def late_settle(profile: str) -> str:
    """TMO-4.3-5 / TMO-3x-3: what settling a timed-out tag does. 4.3: accepted on the same
    channel, removes nothing, clears the tag from the consumer's timed-out set; ≤4.2: the
    channel is gone, the tag is unknown on any other channel (406)."""
    return "accepted-no-op" if per_delivery(profile) else "unknown-tag"


@dataclass
class TimeoutConsumer:
    """4.3 consumer timeout state (TMO-4.3-2/4/5): paused while any timed-out tag is unsettled."""

    tag: str
    timed_out: set[int]
    registered: bool = True

    def time_out(self, delivery_tag: int) -> bool:
        """Record a timed-out delivery; True when this is the transition into timeout state."""
        first = not self.timed_out
        self.timed_out.add(delivery_tag)
        return first

    def settle(self, delivery_tag: int) -> None:
        self.timed_out.discard(delivery_tag)

    @property
    def paused(self) -> bool:
        """No new deliveries: in timeout state (TMO-4.3-2) until every timed-out tag is settled."""
        return bool(self.timed_out)
