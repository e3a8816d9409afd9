"""What happens when a consumer timeout fires (RULES.md §6); the timeouts themselves are in
timeouts.py.

Rules:
- 4.3 (TMO-4.3-*): when a quorum queue's timer fires, only the expired deliveries are
  returned (returns first, delivery count unchanged), the consumer enters timeout state (no
  new messages until every timed-out delivery is settled), and the client gets
  `basic.cancel{nowait}` if it has consumer_cancel_notify and the consumer is registered,
  else `channel.close 406` with timeout "-1". As in 4.3.6 (rabbit_channel:handle_queue_actions,
  one `released` action per consumer and firing), a consumer still registered gets a
  basic.cancel at EVERY firing that returns some of its deliveries, not only at the first. A single active consumer that timed out with
  nothing else checked out goes back to the waiting list (TMO-4.3-7).
- Legacy (TMO-3x-*): the channel tick checks only the oldest unacked delivery; a timeout
  always closes the channel with 406 and the value used.
"""

from __future__ import annotations

from codec import AmqpError, BasicCancel, ReplyCode
from reference_broker.core import lease, texts, timeouts
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.channels import fail
from reference_broker.core.delivery import delete_queue, dispatch, expire_head, return_to_queue
from reference_broker.core.effects import Effect, Send, StartTimer
from reference_broker.core.state import Channel, Queue


def on_queue_timer(core: BrokerState, meta: Meta, key: tuple[object, ...]) -> list[Effect]:
    queue = core.find_queue(str(key[1]), str(key[2]))
    if queue is None:
        return []
    queue.timer_at = core.rules.timer_after_firing(queue.timer_at, meta.now_ms)
    expired = sorted(k for k, deadline in queue.deadlines.items() if deadline <= meta.now_ms)
    effects: list[Effect] = []
    closing: dict[tuple[int, int], Channel] = {}
    cancelled: set[tuple[int, int, str]] = set()
    expired = core.rules.expired(core.connections, queue, expired)
    for conn_id, number, tag in expired:
        del queue.deadlines[(conn_id, number, tag)]
        conn = core.connections.get(conn_id)
        ch = conn.channels.get(number) if conn else None
        u = ch.unacked.get(tag) if ch else None
        if conn is None or ch is None or u is None or u.timed_out or ch.closing:
            continue
        consumer = ch.consumers.get(u.consumer_tag) if u.consumer_tag is not None else None
        if consumer is None or not core.rules.timeout_cancels(conn.cancel_notify):
            closing[(conn_id, number)] = ch  # TMO-4.3-3: no capability, or a basic.get delivery
            continue
        u.timed_out = True  # TMO-4.3-5: a late ack is accepted and removes nothing
        consumer.unacked -= 1
        queue.checked_out -= 1
        effects += return_to_queue(core, meta, queue, u.message, failed=False)
        if (conn_id, number, consumer.tag) not in cancelled:  # one basic.cancel per firing
            cancelled.add((conn_id, number, consumer.tag))
            effects.append(Send(conn_id, number, BasicCancel(consumer.tag, nowait=True)))
        core.rules.pause_timed_out(consumer, tag)
    if queue.arguments.get("x-single-active-consumer") is True:
        _hand_over(queue, {f"{tag}@{c}.{n}" for c, n, tag in cancelled})
    for (conn_id, _number), ch in closing.items():
        err = AmqpError(ReplyCode.PRECONDITION_FAILED, texts.consumer_timeout(ch.number, -1), scope="channel")
        effects += fail(core, meta, core.connections[conn_id], ch, err)
    effects += dispatch(core, meta, queue)
    return effects + timeouts.rearm(queue)


def _hand_over(queue: Queue, just_timed_out: set[str]) -> None:
    """TMO-4.3-7: a single active consumer that just timed out with nothing else checked out
    goes back to the waiting list, so the next waiting consumer becomes active."""
    for key, consumer in list(queue.consumers.items()):
        if key in just_timed_out and consumer.timed_out and consumer.unacked == 0:
            del queue.consumers[key]
            queue.consumers[key] = consumer  # to the back of the waiting list
            queue.rotation.remove(key)
            queue.rotation.append(key)



def on_tick(core: BrokerState, meta: Meta, key: tuple[object, ...]) -> list[Effect]:
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
        per_queue = timeouts.queue_timeout(core, queue) if queue is not None else None
        timeout = per_queue if per_queue is not None else timeout
    if oldest.delivered_at < meta.now_ms - timeout:
        err = AmqpError(ReplyCode.PRECONDITION_FAILED, texts.consumer_timeout(ch.number, timeout), scope="channel")
        return fail(core, meta, conn, ch, err)  # TMO-3x-2: always a channel close
    return effects


def on_lease_timer(core: BrokerState, meta: Meta, key: tuple[object, ...]) -> list[Effect]:
    """QUEUE-08: a queue unused for its x-expires is deleted (lease.py)."""
    queue = lease.expired(core, meta, key)
    return [] if queue is None else delete_queue(core, meta, queue)


def on_ttl_timer(core: BrokerState, meta: Meta, key: tuple[object, ...]) -> list[Effect]:
    """TTL-03: the head's TTL passed: expired messages at the head go, the timer is armed again."""
    queue = core.find_queue(str(key[1]), str(key[2]))
    if queue is None:
        return []
    queue.ttl_timer_at = None
    return expire_head(core, meta, queue)
