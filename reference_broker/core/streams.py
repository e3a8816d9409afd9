"""Stream queues (`x-queue-type: stream`): RabbitMQ 4.3's semantics as far as the rules need them.

Rules (rabbit_stream_queue and rabbit_amqqueue at v4.3.5, checked live on 4.3.6):
- Declare: queue arguments of the other queue types are refused in the order given, 406
  "invalid arg 'X' for <q> of queue type rabbit_stream_queue"; then 406 "invalid property
  'auto-delete' | 'exclusive-owner' | 'non-durable' for <q>", in that order.
- A stream is an append-only log: a publish appends at the next offset (from 0); nothing
  removes a message (ack, nack, reject, recover, a closed channel, a cancel). queue.purge and
  basic.get are 540 connection errors. queue.declare-ok counts the log's messages (4.3.6 reports
  a metric that catches up within seconds) and no consumers (rabbit_stream_queue:stat/1: 0).
- basic.consume: x-stream-offset is checked first (406 "invalid arg 'x-stream-offset' for <q>:
  {invalid_stream_offset_arg,...}"), then the consumer arguments of other types (406 "... of
  queue type rabbit_stream_queue"), then a per-consumer prefetch is required (406 "consumer
  prefetch count is not set for stream <q>"), manual ack (540 "automatic acknowledgement not
  supported by stream <q>") and no channel-wide limit (540 "<q> does not support global qos").
- x-stream-offset: "first"; "last" (the last chunk: here each publish is a chunk of its own);
  "next" (the default: only what is published later); an integer offset (below the log: its
  start; past its end: delivered once the log reaches it); an interval "<n>Y|M|D|h|m|s" (the
  first message written at or after now minus the interval). An absolute timestamp needs the
  wall clock, which the core never reads (time arrives in Meta as monotonic ms): refused 406.
- Each consumer reads from its own offset while it has credit (its prefetch minus its
  outstanding deliveries); every settlement gives credit back, never a redelivery.
  Deliveries carry redelivered=false and the header x-stream-offset (a signed 64-bit long).
- No consumer timeout (TMO-4.3-1): timeouts.py asks `Rules.times_out` per queue type.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping
from typing import Any

from codec import AmqpError, BasicConsume, BasicDeliver, QueueDeclare, ReplyCode
from codec.fields import Timestamp, Typed
from reference_broker.core import durability, texts, timeouts
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.effects import Effect, Send, StartTimer
from reference_broker.core.errors import hard, soft
from reference_broker.core.state import Channel, Consumer, Message, Queue, Unacked

OFFSET = "x-stream-offset"
TYPE_NAME = "rabbit_stream_queue"
# rabbit_stream_queue:capabilities/0 and the union over the queue types (v4.3.5)
QUEUE_ARGUMENTS = frozenset({"x-max-length-bytes", "x-queue-type", "x-max-age", "x-stream-max-segment-size-bytes",
                             "x-stream-filter-size-bytes", "x-initial-cluster-size", "x-queue-leader-locator"})
OTHER_QUEUE_ARGUMENTS = frozenset({
    "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
    "x-max-length", "x-max-in-memory-length", "x-max-in-memory-bytes", "x-max-priority", "x-overflow",
    "x-queue-mode", "x-queue-version", "x-single-active-consumer", "x-queue-master-locator",
    "x-quorum-initial-group-size", "x-delivery-limit", "x-consumer-disconnected-timeout", "x-consumer-timeout",
    "x-delayed-retry-type", "x-delayed-retry-min", "x-delayed-retry-max"})
OTHER_CONSUMER_ARGUMENTS = frozenset({"x-priority", "x-consumer-timeout"})
INTERVAL = re.compile(r"^([0-9]+)(Y|M|D|h|m|s)$")  # rabbit_amqqueue:check_max_age/1
UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "D": 86_400_000, "M": 30 * 86_400_000, "Y": 365 * 86_400_000}


# -- declare -------------------------------------------------------------------------------
def check_declare(m: QueueDeclare, vhost: str) -> None:
    """406 for another type's argument, then for a property a stream cannot have."""
    what = texts.q(m.queue, vhost)
    for arg in m.arguments:
        if arg in OTHER_QUEUE_ARGUMENTS:
            raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{arg}' for {what} of queue type {TYPE_NAME}")
    for flag, label in ((m.auto_delete, "auto-delete"), (m.exclusive, "exclusive-owner"),
                        (not m.durable, "non-durable")):
        if flag:
            raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid property '{label}' for {what}")


def message_count(queue: Queue) -> int:
    return len(queue.log)


def refused(queue: Queue, operation: str) -> AmqpError:
    """basic.get and queue.purge: 540 connection errors (rabbit_stream_queue:dequeue/6, purge/1)."""
    return hard(ReplyCode.NOT_IMPLEMENTED, f"{operation} not supported by stream queues {texts.q(queue.name, queue.vhost)}")


# -- consume -------------------------------------------------------------------------------
def check_consume(core: BrokerState, meta: Meta, queue: Queue, ch: Channel, m: BasicConsume) -> int:
    """The checks of a stream consumer, in RabbitMQ's order; returns the offset it starts at."""
    what = texts.q(queue.name, queue.vhost)
    start = start_offset(queue, m.arguments.get(OFFSET), meta.now_ms, what)
    for arg in m.arguments:
        if arg in OTHER_CONSUMER_ARGUMENTS:
            raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{arg}' for {what} of queue type {TYPE_NAME}")
    if ch.prefetch_count == 0:
        raise soft(ReplyCode.PRECONDITION_FAILED, f"consumer prefetch count is not set for stream {what}")
    if m.no_ack:
        raise hard(ReplyCode.NOT_IMPLEMENTED, f"automatic acknowledgement not supported by stream {what}")
    if ch.global_prefetch:
        raise hard(ReplyCode.NOT_IMPLEMENTED, f"{what} does not support global qos")  # QOS-06
    return start


def start_offset(queue: Queue, spec: Any, now_ms: int, what: str) -> int:
    """Where a consumer starts reading (rabbit_stream_queue:parse_offset_arg/1)."""
    end = len(queue.log)
    if spec is None or spec == "next":
        return end
    if spec == "first":
        return 0
    if spec == "last":
        return max(end - 1, 0)  # the last chunk; each publish is a chunk here
    if isinstance(spec, int) and not isinstance(spec, (bool, Timestamp)):
        return max(spec, 0)
    if isinstance(spec, str) and (match := INTERVAL.match(spec)) and int(match[1]) > 0:
        since = now_ms - int(match[1]) * UNIT_MS[match[2]]
        return next((i for i, message in enumerate(queue.log) if message.written_at >= since), end)
    if isinstance(spec, (_dt.datetime, Timestamp)):
        raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{OFFSET}' for {what}: timestamp offsets "
                   "need the wall clock, which the reference broker's core does not read")
    raise soft(ReplyCode.PRECONDITION_FAILED,
               f"invalid arg '{OFFSET}' for {what}: {{invalid_stream_offset_arg,{_erlang(spec)}}}")


def _erlang(value: Any) -> str:
    """How RabbitMQ prints a table value with ~p: {longstr,<<"bogus">>}."""
    if isinstance(value, str):
        return '{longstr,<<"' + value + '">>}'
    return repr(value)


# -- the log and its readers ----------------------------------------------------------------
def append(core: BrokerState, meta: Meta, queue: Queue, message: Message) -> None:
    """A publish goes at the end of the log, stored whatever its delivery mode (durability.py)."""
    queue.append_to_log(message, meta.now_ms)
    durability.remember(core, queue, message)


def dispatch(core: BrokerState, meta: Meta, queue: Queue, budget: int) -> list[Effect]:
    """Each consumer reads the log from its offset while it has credit; at most `budget`
    deliveries per call, then a timer continues (delivery.dispatch's rule)."""
    effects: list[Effect] = []
    for consumer in list(queue.consumers.values()):
        while consumer.offset < len(queue.log) and (ch := _reading(core, consumer)) is not None:
            if budget == 0:
                return [*effects, StartTimer(("dispatch", queue.vhost, queue.name), meta.now_ms)]
            budget -= 1
            effects += _deliver(core, meta, queue, ch, consumer)
    return effects


def _reading(core: BrokerState, consumer: Consumer) -> Channel | None:
    """The consumer's channel when it may get a delivery now, else None."""
    conn = core.connections.get(consumer.conn)
    ch = conn.channels.get(consumer.channel) if conn else None
    if conn is None or ch is None or ch.closing or not conn.writable or not ch.global_capacity():
        return None
    return ch if consumer.has_capacity(core.rules.prefetch_window(consumer.prefetch)) else None


def _deliver(core: BrokerState, meta: Meta, queue: Queue, ch: Channel, consumer: Consumer) -> list[Effect]:
    offset = consumer.offset
    consumer.offset += 1
    message = queue.log[offset]
    tag = ch.next_tag
    ch.next_tag += 1
    properties = message.properties._replace(headers=_with_offset(message.properties.headers, offset))
    method = BasicDeliver(consumer.tag, tag, False, message.exchange, message.routing_key)
    unacked = ch.unacked[tag] = Unacked(tag, queue.name, message, consumer.tag, meta.now_ms)
    consumer.unacked += 1
    queue.checked_out += 1
    return [Send(ch.conn, ch.number, method, properties, message.body),
            *timeouts.arm(core, meta, queue, ch, unacked, consumer.timeout_ms)]  # none unless a fault times streams out


def _with_offset(headers: Mapping[str, Any] | None, offset: int) -> dict[str, Any]:
    return {**(headers or {}), OFFSET: Typed(b"l", offset)}
