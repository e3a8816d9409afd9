"""Queue leases (QUEUE-08): a queue with x-expires (or a policy's `expires`) that nobody uses for
that many milliseconds is deleted.

Rules (rabbit_amqqueue_process ensure_expiry_timer, as RabbitMQ 3.10.8 to 4.3.5):
- Use is a declaration (passive or not), a basic.get, or a consumer coming or going; each renews
  the lease: the deadline becomes now + expires, replacing the armed timer. Publishing is not use.
- While the queue has a consumer it does not expire (the timer is cancelled); when the last
  consumer goes, the lease starts again.
- The timer's handler (`expiry.on_lease_timer`) deletes the queue only if it still exists, has
  no consumer and its deadline has passed (a renewal moved it).
"""

from __future__ import annotations

from reference_broker.core.arguments import is_int
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.effects import CancelTimer, Effect, StartTimer
from reference_broker.core.settings import queue_setting
from reference_broker.core.state import Queue

KIND = "lease"


def key(queue: Queue) -> tuple[object, ...]:
    return (KIND, queue.vhost, queue.name)


def expires_ms(core: BrokerState, queue: Queue) -> int | None:
    value = queue_setting(core, queue, "expires")
    return value if is_int(value) and value > 0 else None


def touch(core: BrokerState, meta: Meta, queue: Queue) -> list[Effect]:
    """The queue was used: its lease starts again (or waits while it has consumers)."""
    ms = expires_ms(core, queue)
    if ms is None:
        return []
    if queue.consumers:
        queue.lease_until = None
        return [CancelTimer(key(queue))]
    queue.lease_until = meta.now_ms + ms
    return [StartTimer(key(queue), queue.lease_until)]


def expired(core: BrokerState, meta: Meta, timer: tuple[object, ...]) -> Queue | None:
    """The queue whose lease timer fired, when it is due for deletion."""
    queue = core.find_queue(str(timer[1]), str(timer[2]))
    if queue is None or queue.consumers or queue.lease_until is None or queue.lease_until > meta.now_ms:
        return None
    return queue
