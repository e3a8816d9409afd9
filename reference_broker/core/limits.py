"""Queue length limits (LEN-01..05): x-max-length, x-max-length-bytes and x-overflow, as RabbitMQ's
classic queue (rabbit_amqqueue_process) and quorum queue (rabbit_fifo) apply them.

Rules:
- Only ready messages count, by number and by bytes; delivered, unacknowledged ones do not.
  A message's bytes are its body's, except on a quorum queue from 4.3 (not in legacy mode),
  which adds its encoded properties (rabbit_fifo counts mc:size's metadata and body, 4.3.0).
- drop-head (the default): the publish is taken (attempted delivery first), then the head goes,
  dead-lettered with reason maxlen, while the queue is over a limit (`trim`); the same after a
  message returned to the queue (rabbit_amqqueue_process requeue_and_run, rabbit_fifo's limit
  evaluated after every command). The head is the next message served (a quorum queue's returns
  first: rabbit_fifo take_next_msg). With a limit of 0 nothing stays ready.
- reject-publish on a classic queue: a publish that would take the queue over a limit is refused
  before it is enqueued (nack under confirms; `admit`). reject-publish-dlx: the same, and the
  refused message is dead-lettered with reason maxlen.
- reject-publish on a quorum queue: the limit is looked at after the enqueue, so the publish that
  goes over it is taken; from then on publishes are refused until the queue is back at 80 % of
  each limit (rabbit_fifo evaluate_limit, is_below_soft_limit). reject-publish-dlx is not
  supported by quorum queues: the argument is accepted and the queue drops its head (the
  default; rabbit_quorum_queue overflow/3 logs a warning).
"""

from __future__ import annotations

from typing import Any

from codec import ReplyCode
from codec.fields import RABBITMQ_TYPE_NAMES, infer_kind
from codec.frames import encode_header_payload
from reference_broker.core import durability
from reference_broker.core.arguments import check_non_negative_int, field_type, is_int
from reference_broker.core.broker_state import BrokerState
from reference_broker.core.errors import soft
from reference_broker.core.settings import queue_setting
from reference_broker.core.state import QUORUM, Message, Queue

DROP_HEAD, REJECT, REJECT_DLX = "drop-head", "reject-publish", "reject-publish-dlx"
OVERFLOWS = (DROP_HEAD, REJECT, REJECT_DLX)  # rabbit_amqqueue ?KNOWN_OVERFLOW_MODES
SOFT_LIMIT = 0.8  # rabbit_fifo ?LOW_LIMIT
HEADER_FIXED = 12  # a content header's class, weight and body size, before its properties


def check_arguments(arguments: dict[str, Any], what: str, maximum: int | None = None) -> None:
    """LEN-01 (rabbit_amqqueue declare_args): x-max-length and x-max-length-bytes non-negative
    integers (check_non_neg_int_arg: no upper bound; `maximum` only under a fault), x-overflow a
    longstr naming a known mode (check_overflow)."""
    for arg in ("x-max-length", "x-max-length-bytes"):
        if (value := arguments.get(arg)) is not None:
            check_non_negative_int(arg, what, value, maximum)
    overflow = arguments.get("x-overflow")
    if overflow is None or (isinstance(overflow, str) and overflow in OVERFLOWS):
        return
    reason = "invalid_overflow" if isinstance(overflow, str) else f"{{unacceptable_type,{_type_name(overflow)}}}"
    raise soft(ReplyCode.PRECONDITION_FAILED, f"invalid arg 'x-overflow' for {what}: {reason}")


def _type_name(value: Any) -> str:
    """The field type RabbitMQ read a value as: an integer as the smallest type the codec sends it as."""
    return RABBITMQ_TYPE_NAMES.get(infer_kind(value)[:1], field_type(value)) if is_int(value) else field_type(value)


def _limit(core: BrokerState, queue: Queue, key: str) -> int | None:
    value = queue_setting(core, queue, key)
    return value if is_int(value) and value >= 0 else None


def overflow(core: BrokerState, queue: Queue) -> str:
    """The queue's overflow mode; a quorum queue takes reject-publish-dlx as drop-head."""
    mode = queue_setting(core, queue, "overflow")
    mode = mode if mode in OVERFLOWS else DROP_HEAD
    return DROP_HEAD if queue.kind == QUORUM and mode == REJECT_DLX else mode


def size(core: BrokerState, queue: Queue, message: Message) -> int:
    """The bytes a message counts for (see the module rules)."""
    if core.rules.length_counts_properties(queue.kind, core.config.timeout_mode != "legacy"):
        return len(message.body) + len(encode_header_payload(0, message.properties)) - HEADER_FIXED
    return len(message.body)


def _usage(core: BrokerState, queue: Queue, need_bytes: bool) -> tuple[int, int]:
    """(messages, bytes) the limits are measured against; bytes only when `need_bytes`."""
    count = queue.ready_count() + (queue.checked_out if core.rules.length_counts_unacked() else 0)
    if not need_bytes:
        return count, 0
    if not core.rules.length_counts_properties(queue.kind, core.config.timeout_mode != "legacy"):
        return count, queue.ready_bytes
    return count, sum(size(core, queue, m) for m in queue.ready_messages())


def _over(core: BrokerState, queue: Queue, extra: Message | None = None) -> bool:
    max_length, max_bytes = _limit(core, queue, "max-length"), _limit(core, queue, "max-length-bytes")
    if max_length is None and max_bytes is None:
        return False
    count, used = _usage(core, queue, max_bytes is not None)
    if extra is not None:
        count, used = count + 1, used + size(core, queue, extra)
    return (max_length is not None and count > max_length) or (max_bytes is not None and used > max_bytes)


def _below_soft_limit(core: BrokerState, queue: Queue) -> bool:
    max_length, max_bytes = _limit(core, queue, "max-length"), _limit(core, queue, "max-length-bytes")
    count, used = _usage(core, queue, max_bytes is not None)
    return all(limit is None or value <= int(limit * SOFT_LIMIT) for limit, value in ((max_length, count), (max_bytes, used)))


def admit(core: BrokerState, queue: Queue, message: Message) -> tuple[bool, list[Message]]:
    """Whether the queue takes a publish (LEN-04, LEN-05), and what is dead-lettered with reason
    maxlen for it: the refused message itself under a classic queue's reject-publish-dlx."""
    mode = overflow(core, queue)
    if mode == DROP_HEAD:
        return True, []
    if queue.kind == QUORUM and core.rules.quorum_limit_after_enqueue():
        if queue.overflow_blocked and _below_soft_limit(core, queue):
            queue.overflow_blocked = False
        return not queue.overflow_blocked, []
    if not _over(core, queue, message):
        return True, []
    return False, [message] if core.rules.refused_dead_lettered(mode) else []


def trim(core: BrokerState, queue: Queue, returned: bool = False) -> list[Message]:
    """After a publish was taken, or a message `returned` to the queue: drop-head drops from the
    head while the queue is over a limit (LEN-02), returning what it dropped, in order; a quorum
    queue with reject-publish that went over a limit refuses the next publishes (LEN-04)."""
    if returned and not core.rules.trimmed_after_return():
        return []  # LEN-02 (a fault's)
    mode = overflow(core, queue)
    if mode != DROP_HEAD:
        if queue.kind == QUORUM and _over(core, queue):
            queue.overflow_blocked = True
        return []
    dropped: list[Message] = []
    while _over(core, queue):
        message = core.rules.length_drop(queue)
        if message is None:
            break
        dropped.append(message)
    if core.rules.maxlen_dead_lettered():
        return dropped
    durability.forget_all(core, dropped)  # LEN-03 (a fault's): discarded
    return []
