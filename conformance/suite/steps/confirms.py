"""Shared steps of the publisher-confirm tests (confirms/test_confirms*.py): a confirm channel, a
queue declared on it, a queue's message count, and a quorum queue's confirms waited for with the
applied-count barrier.

Rules (`collect_applied`; evidence in docs/probes.md, "A quorum queue's confirm behind its count"):
- A quorum queue confirms a publish once its leader has applied the enqueue; how long that takes
  is the consensus's (a slow disk, a cluster), so the wait is long (10 s). On a single-node
  RabbitMQ (3.10 and later) a shorter proof exists: a passive queue.declare on the confirm channel
  counts the queue by a query of the leader's applied state, made by the channel process itself;
  the leader sent that channel its applied notices before it answered the query, by a local send
  that cannot fail, so once the count covers every publish, the notices wait in the channel's
  mailbox, and the channel sends their confirms at the latest right after its reply to the next
  method. Two more passive declares later every confirm has arrived, or the broker withholds it.
- The barrier is used only where it holds: a broker that is, or emulates, RabbitMQ 3.10 or later,
  with one node as `--broker-admin` lists them. Elsewhere (no admin, a cluster, another product)
  the wait is the whole bound. A count below the publishes is asked again (5 ms, doubling to
  50 ms) within the same bound; a passive declare changes nothing.
"""

from __future__ import annotations

import time
from typing import Any

from codec import (
    BasicAck,
    BasicNack,
    BasicProperties,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.catalogue.profiles import Profile, rabbitmq_version, version_numbers
from conformance.drivers.raw import NoReply, RawClient
from conformance.suite.steps.machine_settle import count_polls
from conformance.suite.steps.wire import Confirms

PERSISTENT = BasicProperties(delivery_mode=2)
QUIET = 0.3  # seconds of silence that show nothing more is coming, after a round trip
BARRIER_SINCE = (3, 10)  # the oldest RabbitMQ whose source was read for the barrier (module rules)
AFTER_COUNT_ROUND_TRIPS = 2  # passive declares after the count covered every publish (module rules)


def confirm_channel(client: RawClient) -> int:
    ch = client.channel()
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    return ch


def declare(client: RawClient, ch: int, queue: str, **kwargs: Any) -> None:
    client.rpc(ch, QueueDeclare(queue=queue, **kwargs), QueueDeclareOk)


def message_count(client: RawClient, ch: int, queue: str) -> int:
    reply = client.rpc(ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk).method
    assert isinstance(reply, QueueDeclareOk)
    return reply.message_count


def applied_barrier(profile: Profile, nodes: int | None) -> bool:
    """Whether a quorum queue's count proves its confirms were sent (module rules)."""
    numbers = version_numbers(rabbitmq_version(profile.server_properties) or "")
    return nodes == 1 and len(numbers) >= 2 and numbers >= BARRIER_SINCE


def collect_applied(confirms: Confirms, client: RawClient, ch: int, queue: str, published: int, timeout: float,
                    *, barrier: bool) -> Confirms:
    """`confirms.collect` for publishes to the quorum queue `queue` alone (`published` of them, on
    a queue that had none), with the applied-count barrier when `barrier` (module rules)."""
    if not barrier:
        return confirms.collect(client, ch, timeout)
    deadline, polls = time.monotonic() + timeout, count_polls()
    while True:
        take_arrived(confirms, client, ch)
        if not confirms.outstanding:
            return confirms
        counted = message_count(client, ch, queue)
        if counted >= published:
            for _ in range(AFTER_COUNT_ROUND_TRIPS):
                message_count(client, ch, queue)
            take_arrived(confirms, client, ch)
            assert not confirms.outstanding, (
                f"PC-07: a quorum queue's publish is confirmed once its leader applied it; the queue counted "
                f"{counted} of the {published} publishes (queue.declare-ok on the confirm channel: the leader "
                f"had applied them all and sent this channel their applied notices before answering), and "
                f"{AFTER_COUNT_ROUND_TRIPS} round trips later seqnos {sorted(confirms.outstanding)} were still not "
                f"confirmed (a single-node RabbitMQ sends them at the latest with its reply to the next method); "
                f"confirms seen: {confirms.seen}")
            return confirms
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise NoReply(timeout, f"basic.ack/basic.nack on channel {ch} (seqnos {sorted(confirms.outstanding)}; "
                                   f"the quorum queue counted {counted} of {published} publishes)")
        arrived = client.poll(ch, BasicAck, BasicNack, duration=min(next(polls), remaining))
        if arrived is not None:
            confirms.feed(arrived.method)  # type: ignore[arg-type]


def take_arrived(confirms: Confirms, client: RawClient, ch: int) -> None:
    """Feed `confirms` every ack and nack already read on `ch` (no wait)."""
    while (command := client.poll(ch, BasicAck, BasicNack)) is not None:
        confirms.feed(command.method)  # type: ignore[arg-type]
