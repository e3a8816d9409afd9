"""does a quorum consumer resume after a late settle of its timed-out delivery (TMO-4.3-5)?

Usage: ``python -m bench.tmo_probe [node]`` against ``scripts/rabbitmq4.sh cluster up 4.3 3`` (node
1..3 on AMQP ports 5751..5753; default 1). For each settle of the timed-out tags (ack, reject and
nack with requeue, reject without), each group size (x-quorum-initial-group-size 1 and 3) and each
prefetch (1, as the timeout machine uses, and 2): a quorum queue on the node with 4 messages ready,
a consumer with x-consumer-timeout 200 on a consumer_cancel_notify connection, its deliveries
left unsettled until the broker's basic.cancel, then each settled late; prints what arrives within 3 s
(and, when nothing came, after a fresh publish). Further arguments: x-delivery-limit values to
try (`none`: the argument left out, the default). docs/findings-cluster.md records the output.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from bench.cluster_tools import client, queue_info, setup_queue
from codec import (
    BasicAck,
    BasicCancel,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    BasicReject,
    Method,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.drivers.raw import RawClient

SETTLES: dict[str, Callable[[int], Method]] = {
    "ack": lambda tag: BasicAck(delivery_tag=tag),
    "reject-requeue": lambda tag: BasicReject(delivery_tag=tag, requeue=True),
    "nack-requeue": lambda tag: BasicNack(delivery_tag=tag, multiple=False, requeue=True),
    "reject-drop": lambda tag: BasicReject(delivery_tag=tag, requeue=False),
}


def deliveries(c: RawClient, ch: int, seconds: float) -> list[str]:
    """Every basic.deliver and basic.cancel on ch within `seconds` (a bounded wait)."""
    seen = []
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        cmd = c.poll(ch, BasicDeliver, BasicCancel, duration=left)
        if cmd is None:
            break
        m = cmd.method
        seen.append(f"deliver tag={m.delivery_tag} {cmd.body!r} redelivered={m.redelivered}"
                    if isinstance(m, BasicDeliver) else "basic.cancel")
    return seen


def case(node: int, settle: str, group: int, prefetch: int, limit: int | None) -> None:
    q = f"tmo.probe.{settle}.g{group}.p{prefetch}.l{limit}"
    args = {"x-queue-type": "quorum", "x-quorum-initial-group-size": group}
    if limit is not None:
        args["x-delivery-limit"] = limit
    c = client(node)
    ch = c.channel()
    setup_queue(c, ch, q, args)
    for i in range(1, 5):
        c.send(ch, BasicPublish(0, "", q, False, False), BasicProperties(delivery_mode=1), b"m%d" % i)
    c.rpc(ch, BasicQos(0, prefetch, False), BasicQosOk)
    c.rpc(ch, BasicConsume(0, q, "a", False, False, False, False, {"x-consumer-timeout": 200}), BasicConsumeOk)
    before = deliveries(c, ch, 1.5)  # the prefetched deliveries, then the broker's cancel
    held = [int(s.split()[1][4:]) for s in before if s.startswith("deliver")]
    for tag in held:
        c.send(ch, SETTLES[settle](tag))
    after = deliveries(c, ch, 3.0)
    line = f"{settle:15} group={group} prefetch={prefetch} delivery-limit={limit}: before settle {before}; settled {held}; after {after}"
    if not any(s.startswith("deliver") for s in after):
        c.send(ch, BasicPublish(0, "", q, False, False), BasicProperties(delivery_mode=1), b"m5")
        line += f"; after a new publish {deliveries(c, ch, 3.0)}"
    print(line)
    ok = c.rpc(ch, QueueDeclare(0, q, True, False, False, False, False, {}), QueueDeclareOk).method
    assert isinstance(ok, QueueDeclareOk)
    print(f"{'':15} passive declare: {ok.message_count} ready, {ok.consumer_count} consumers; {queue_info(node, q)}")
    c.close()


def main() -> None:
    node = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    limits = [None if a == "none" else int(a) for a in sys.argv[2:]] or [None]
    for limit in limits:
        for prefetch in (1, 2):
            for group in (1, 3):
                for settle in SETTLES:
                    case(node, settle, group, prefetch, limit)


if __name__ == "__main__":
    main()
