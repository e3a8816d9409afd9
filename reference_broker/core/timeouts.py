"""Consumer delivery-acknowledgement timeouts (RULES.md §6), 4.3 and legacy rules.

Rules:
- 4.3 (TMO-4.3-*): only quorum queues time out. Each manual-ack delivery (consumer or
  basic.get) gets a deadline; one timer per queue is armed at the earliest deadline. When it
  fires, only the expired deliveries are returned (returns first, delivery count unchanged),
  the consumer enters timeout state (no new messages until every timed-out delivery is
  settled), and the client gets `basic.cancel{nowait}` if it has consumer_cancel_notify and
  the consumer is registered, else `channel.close 406` with timeout "-1". As in 4.3.6
  (rabbit_channel:handle_queue_actions, one `released` action per consumer and firing), a
  consumer still registered gets a basic.cancel at EVERY firing that returns some of its
  deliveries, not only at the first.
- Legacy (TMO-3x-*): a per-channel tick every `tick_interval` checks only the oldest unacked
  delivery of every queue type, against the global value read at channel.open (3.10), or
  min(queue argument, policy) for that delivery's queue when set (3.12); a timeout always
  closes the channel with 406 and the value used.
- Validation (TMO-04, 4.3): the consumer argument is refused on classic queues, and both
  arguments must be non-negative integers.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from codec import AmqpError, BasicCancel, ReplyCode
from reference_broker.core import texts
from reference_broker.core.broker import TIMER_HANDLERS, BrokerCore, Meta, soft
from reference_broker.core.effects import Effect, Send, StartTimer
from reference_broker.core.state import QUORUM, Channel, Consumer, Queue, Unacked

ARG = "x-consumer-timeout"


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


_FIELD_TYPES = ((bool, "bool"), (str, "longstr"), (float, "double"), (dict, "table"), (list, "array"),
                (bytes, "binary"), (type(None), "void"))


def _field_type(value: Any) -> str:
    """RabbitMQ's name for the field-table type a decoded value arrived as."""
    return next((name for kind, name in _FIELD_TYPES if isinstance(value, kind)), type(value).__name__)


def validate_argument(core: BrokerCore, queue_name: str, vhost: str, kind: str, value: Any) -> None:
    """TMO-04 (4.3.2+): 406 for the argument on a classic queue or a bad value."""
    if value is None or core.config.timeout_mode == "legacy":
        return
    what = texts.q(queue_name, vhost)
    if kind != QUORUM:
        raise soft(ReplyCode.PRECONDITION_FAILED,
                   f"invalid arg '{ARG}' for {what} of queue type rabbit_{kind}_queue")
    if not _is_int(value):  # rabbit_amqqueue:check_int_arg/2 prints its message with ~tp
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{ARG}' for {what}: "
                   f'"expected integer, got {_field_type(value)}"')
    if value < 0:
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{ARG}' for {what}: {{value_negative,{value}}}")


def queue_timeout(core: BrokerCore, queue: Queue) -> int | None:
    """min(queue argument, policy), when either is set (TMO-03)."""
    candidates = (queue.arguments.get(ARG), core.policy_definition(queue).get("consumer-timeout"))
    values = [v for v in candidates if _is_int(v)]
    if not values:
        return None
    return max(values) if core.fault("timeout_max_of_queue_and_policy") else min(values)


def effective_timeout(core: BrokerCore, queue: Queue, consumer: Consumer) -> int | None:
    """TMO-03 for the 4.3 rules: quorum queues only; consumer argument, else
    min(queue argument, policy), else the global value. Legacy mode: the channel checks
    instead (TMO-3x-1), so consumers carry no timeout."""
    if core.config.timeout_mode == "legacy" or queue.kind != QUORUM:
        return None
    value = consumer.arguments.get(ARG)
    if _is_int(value) and not core.fault("consumer_timeout_argument_ignored"):
        return value
    if core.fault("global_before_policy"):
        return core.config.consumer_timeout
    per_queue = queue_timeout(core, queue)
    return core.config.consumer_timeout if per_queue is None else per_queue


# -- 4.3: per-delivery deadlines in the quorum queue -----------------------------------------
def arm(core: BrokerCore, meta: Meta, queue: Queue, ch: Channel, unacked: Unacked,
        timeout_ms: int | None) -> list[Effect]:
    """Give a delivery its deadline and arm the queue's timer if it is the earliest."""
    if timeout_ms is None or queue.kind != QUORUM or core.config.timeout_mode == "legacy":
        return []
    deadline = meta.now_ms + timeout_ms
    unacked.deadline = deadline
    queue.deadlines[(ch.conn, ch.number, unacked.tag)] = deadline
    if queue.timer_at is None or deadline < queue.timer_at:
        queue.timer_at = deadline
        return [StartTimer(("qtimeout", queue.vhost, queue.name), deadline)]
    return []


def get_timeout(core: BrokerCore, queue: Queue) -> int | None:
    """basic.get deliveries: the queue's value, else the global one (4.3, quorum only)."""
    if queue.kind != QUORUM or core.config.timeout_mode == "legacy":
        return None
    value = queue_timeout(core, queue)
    return core.config.consumer_timeout if value is None else value


def forget(queue: Queue, conn: int, channel: int, tag: int) -> None:
    queue.deadlines.pop((conn, channel, tag), None)


def on_queue_timer(core: BrokerCore, meta: Meta, key: tuple[object, ...]) -> list[Effect]:
    queue = core.find_queue(str(key[1]), str(key[2]))
    if queue is None:
        return []
    queue.timer_at = None
    expired = sorted(k for k, deadline in queue.deadlines.items() if deadline <= meta.now_ms)
    effects: list[Effect] = []
    closing: dict[tuple[int, int], Channel] = {}
    cancelled: set[tuple[int, int, str]] = set()
    if core.fault("partial_timeout_returns_all"):
        expired = _whole_consumers(core, queue, expired)
    for conn_id, number, tag in expired:
        del queue.deadlines[(conn_id, number, tag)]
        conn = core.connections.get(conn_id)
        ch = conn.channels.get(number) if conn else None
        u = ch.unacked.get(tag) if ch else None
        if conn is None or ch is None or u is None or u.timed_out or ch.closing:
            continue
        consumer = ch.consumers.get(u.consumer_tag) if u.consumer_tag is not None else None
        if consumer is None or not conn.cancel_notify or core.fault("timeout_closes_channel_with_capability"):
            closing[(conn_id, number)] = ch  # TMO-4.3-3: no capability, or a basic.get delivery
            continue
        u.timed_out = True  # TMO-4.3-5: a late ack is accepted and removes nothing
        consumer.unacked -= 1
        queue.checked_out -= 1
        effects += core.return_to_queue(meta, queue, u.message, failed=False)
        if (conn_id, number, consumer.tag) not in cancelled:  # one basic.cancel per firing
            cancelled.add((conn_id, number, consumer.tag))
            effects.append(Send(conn_id, number, BasicCancel(consumer.tag, nowait=True)))
        if not core.fault("timed_out_consumer_not_paused"):
            consumer.timed_out.add(tag)
    if queue.arguments.get("x-single-active-consumer") is True:
        _hand_over(queue, {f"{tag}@{c}.{n}" for c, n, tag in cancelled})
    for (conn_id, _number), ch in closing.items():
        err = AmqpError(ReplyCode.PRECONDITION_FAILED, texts.consumer_timeout(ch.number, -1), scope="channel")
        effects += core.fail(meta, core.connections[conn_id], ch, err)
    effects += core.dispatch(meta, queue)
    return effects + rearm(queue)


def _whole_consumers(core: BrokerCore, queue: Queue, expired: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Fault partial_timeout_returns_all: every delivery of a consumer with an expired one."""
    owners = set()
    for conn_id, number, tag in expired:
        conn = core.connections.get(conn_id)
        u = conn.channels[number].unacked.get(tag) if conn and number in conn.channels else None
        if u is not None:
            owners.add((conn_id, number, u.consumer_tag))
    more = [k for k in queue.deadlines if k not in expired and any(
        (k[0], k[1]) == (c, n) and (u := core.connections[c].channels[n].unacked.get(k[2])) is not None
        and u.consumer_tag == t for c, n, t in owners)]
    return sorted([*expired, *more])


def _hand_over(queue: Queue, just_timed_out: set[str]) -> None:
    """TMO-4.3-7: a single active consumer that just timed out with nothing else checked out
    goes back to the waiting list, so the next waiting consumer becomes active."""
    for key, consumer in list(queue.consumers.items()):
        if key in just_timed_out and consumer.timed_out and consumer.unacked == 0:
            del queue.consumers[key]
            queue.consumers[key] = consumer  # to the back of the waiting list
            queue.rotation.remove(key)
            queue.rotation.append(key)


def rearm(queue: Queue) -> list[Effect]:
    if not queue.deadlines:
        return []
    earliest = min(queue.deadlines.values())
    if queue.timer_at is not None and queue.timer_at <= earliest:
        return []
    queue.timer_at = earliest
    return [StartTimer(("qtimeout", queue.vhost, queue.name), earliest)]


# -- legacy: the channel tick ------------------------------------------------------------------
def open_channel(core: BrokerCore, meta: Meta, ch: Channel) -> list[Effect]:
    """TMO-3x-4: read the global value once; arm the tick (legacy mode only)."""
    ch.timeout_at_open = core.config.consumer_timeout
    if core.config.timeout_mode != "legacy":
        return []
    return [StartTimer(("tick", ch.conn, ch.number), meta.now_ms + core.config.tick_interval)]


def on_tick(core: BrokerCore, meta: Meta, key: tuple[object, ...]) -> list[Effect]:
    conn = core.connections.get(int(str(key[1])))
    ch = conn.channels.get(int(str(key[2]))) if conn else None
    if conn is None or ch is None or ch.closing or core.config.timeout_mode != "legacy":
        return []
    effects: list[Effect] = [StartTimer(key, meta.now_ms + core.config.tick_interval)]
    oldest = next(iter(ch.unacked.values()), None)  # TMO-3x-1: only the oldest delivery
    if oldest is None:
        return effects
    timeout = ch.timeout_at_open
    if core.config.legacy_ruleset == "3.12":
        queue = core.find_queue(conn.vhost, oldest.queue)
        per_queue = queue_timeout(core, queue) if queue is not None else None
        timeout = per_queue if per_queue is not None else timeout
    if oldest.delivered_at < meta.now_ms - timeout:
        err = AmqpError(ReplyCode.PRECONDITION_FAILED, texts.consumer_timeout(ch.number, timeout), scope="channel")
        return core.fail(meta, conn, ch, err)  # TMO-3x-2: always a channel close
    return effects


TIMER_HANDLERS["qtimeout"] = on_queue_timer
TIMER_HANDLERS["tick"] = on_tick
