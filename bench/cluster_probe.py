"""Ground truth for: what RabbitMQ does to clients when a cluster node fails.

Usage: ``python -m bench.cluster_probe a|b|c|f|all`` against ``scripts/rabbitmq4.sh cluster up 4.3 3``
(nodes 1..3 on AMQP ports 5751..5753, management 15751..). Each scenario prints a timeline:
seconds since its start, then what happened; node stops and starts go through
``scripts/rabbitmq4.sh node 4.3 I stop|start`` and their start and return are on the timeline.
docs/findings-cluster.md records the figures and explains them.

Scenarios: a = classic queue on a stopped node (consumers with and without
consumer_cancel_notify; d: confirms of publishes routed to it; e: declare/consume/publish to it);
b = quorum queue with a majority left (leader change, unacked deliveries, returns);
c = quorum queue without a majority (consumer, publish with confirms); f = consumer timeout of a
quorum consumer across a leader change.
"""


from __future__ import annotations

import sys
import time
from collections.abc import Callable

from bench.cluster_tools import (
    Timeline,
    attempt,
    client,
    consume,
    declare,
    finish,
    node,
    publish,
    queue_info,
    setup_queue,
    watch,
)
from codec import (
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicQos,
    BasicQosOk,
    BasicReject,
    ConfirmSelect,
    ConfirmSelectOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueBind,
    QueueBindOk,
    QueueDeclareOk,
)

CLASSIC = {"x-queue-type": "classic"}
QUORUM = {"x-queue-type": "quorum"}


def scenario_a(action: str = "stop") -> None:
    """Classic queue on node 3, consumers on node 2; then (e) and (d) while node 3 is down."""
    tl = Timeline(f"a/d/e: durable classic queue clu.a on node 3, node 3: {action}")
    c3 = client(3)
    setup_queue(c3, c3.channel(), "clu.a", CLASSIC)
    cap, nocap = client(2), client(2, cancel_notify=False)
    ch = cap.channel()
    setup_queue(cap, ch, "clu.a.local", CLASSIC)
    cap.rpc(ch, ExchangeDeclare(0, "clu.a.fan", "fanout", False, True, False, False, False, {}), ExchangeDeclareOk)
    for q in ("clu.a", "clu.a.local"):
        cap.rpc(ch, QueueBind(0, q, "clu.a.fan", "", False, {}), QueueBindOk)
    consume(cap, ch, "clu.a", "cap-remote")
    consume(cap, ch, "clu.a.local", "cap-local")
    nch = nocap.channel()
    consume(nocap, nch, "clu.a", "nocap-remote")
    tl.note(f"clu.a: {queue_info(2, 'clu.a')}")
    c3.close()
    watched = [("cap ch1", cap, ch), ("nocap ch1", nocap, nch)]
    watch(tl, watched, 8.0, node(3, action, tl))
    publish(cap, ch, "clu.a.local", b"after-stop")
    tl.note("published to clu.a.local (node 2) on the cap channel")
    watch(tl, watched, 1.0)
    attempt(tl, "nocap channel still open? basic.qos", nocap, nch, BasicQos(0, 5, False), BasicQosOk)
    scenario_e(tl)
    scenario_d(tl)
    watch(tl, watched, 3.0, node(3, "start", tl))
    publish(cap, ch, "clu.a", b"after-restart-1")
    publish(cap, ch, "clu.a", b"after-restart-2")
    tl.note("published 2 to clu.a after the restart: who gets them?")
    watch(tl, watched, 3.0)
    attempt(tl, "clu.a now", cap, cap.channel(), declare(cap, 0, "clu.a", CLASSIC, passive=True), QueueDeclareOk)


def scenario_a_kill() -> None:
    scenario_a("kill")


def scenario_e(tl: Timeline) -> None:
    """(e) declare, consume, get on a durable classic queue whose node is down."""
    c = client(2)
    attempt(tl, "e: queue.declare passive clu.a", c, c.channel(), declare(c, 0, "clu.a", CLASSIC, passive=True),
            QueueDeclareOk, timeout=90)
    attempt(tl, "e: queue.declare clu.a (same args)", c, c.channel(), declare(c, 0, "clu.a", CLASSIC), QueueDeclareOk,
            timeout=90)
    attempt(tl, "e: basic.consume clu.a", c, c.channel(), BasicConsume(0, "clu.a", "", False, False, False, False, {}),
            BasicConsumeOk, timeout=90)
    attempt(tl, "e: basic.get clu.a", c, c.channel(), BasicGet(0, "clu.a", False), BasicGetOk, BasicGetEmpty,
            timeout=90)
    c.close()


def scenario_d(tl: Timeline) -> None:
    """(d) confirms of publishes routed to the classic queue on the stopped node."""
    c = client(2)
    ch = c.channel()
    c.rpc(ch, ConfirmSelect(False), ConfirmSelectOk)
    cases: list[tuple[str, str, bool]] = [("", "clu.a", False), ("", "clu.a", True), ("clu.a.fan", "", False),
                                          ("clu.a.fan", "", True)]
    for n, (exchange, rk, mandatory) in enumerate(cases, 1):
        tl.note(f"d: publish #{n} exchange={exchange!r} rk={rk!r} mandatory={mandatory}")
        publish(c, ch, rk, f"d{n}".encode(), exchange=exchange, mandatory=mandatory)
        watch(tl, [("d confirm ch", c, ch)], 2.0)
    c.close()


def scenario_b() -> None:
    """Quorum queue led by node 3, consumer with 5 unacked on node 1; node 3 stops."""
    tl = Timeline("b: quorum queue clu.b (3 members, leader node 3), node 3 stops")
    c3 = client(3)
    setup_queue(c3, c3.channel(), "clu.b", QUORUM)
    c3.close()
    c = client(1)
    ch = c.channel()
    c.rpc(ch, ConfirmSelect(False), ConfirmSelectOk)
    for n in range(1, 6):
        publish(c, ch, "clu.b", f"m{n}".encode())
    watch(tl, [("pub", c, ch)], 1.0)
    cch = c.channel()
    consume(c, cch, "clu.b", "qb", prefetch=10)
    watch(tl, [("consumer", c, cch)], 1.0)
    tl.note(f"clu.b: {queue_info(1, 'clu.b')}")
    watch(tl, [("consumer", c, cch), ("pub", c, ch)], 10.0, node(3, "stop", tl))
    tl.note(f"clu.b after the stop: {queue_info(1, 'clu.b')}")
    publish(c, ch, "clu.b", b"m6-after-failover")
    tl.note("published m6 with confirms after the failover")
    watch(tl, [("consumer", c, cch), ("pub", c, ch)], 2.0)
    c.send(cch, BasicAck(1, False))
    tl.note("acked tag 1 (m1)")
    c.send(cch, BasicNack(2, False, True))
    tl.note("nacked tag 2 requeue")
    watch(tl, [("consumer", c, cch)], 2.0)
    c.send(cch, BasicReject(3, True))
    tl.note("rejected tag 3 requeue")
    watch(tl, [("consumer", c, cch)], 2.0)
    c.close_channel(cch)
    tl.note("closed the consumer's channel (its unacked return)")
    c2 = client(2)
    ch2 = c2.channel()
    consume(c2, ch2, "clu.b", "qb2", prefetch=20)
    watch(tl, [("consumer on node 2", c2, ch2)], 3.0)
    watch(tl, [("consumer on node 2", c2, ch2)], 3.0, node(3, "start", tl))
    tl.note(f"clu.b after the restart: {queue_info(1, 'clu.b')}")


def scenario_c() -> None:
    """Quorum queue of 2 members (node 1 leader and one other); the other stops: no majority."""
    tl = Timeline("c: quorum queue clu.c (2 members), the non-leader member stops")
    c = client(1)
    ch = c.channel()
    setup_queue(c, ch, "clu.c", {**QUORUM, "x-quorum-initial-group-size": 2})
    info = queue_info(1, "clu.c")
    tl.note(f"clu.c: {info}")
    from bench.cluster_tools import mgmt
    info_c = mgmt(1, "queues/%2F/clu.c")
    other = next(int(m.split("@")[0][-1]) for m in info_c.get("members", []) if m != info_c.get("leader"))
    c.rpc(ch, ConfirmSelect(False), ConfirmSelectOk)
    publish(c, ch, "clu.c", b"before")
    cch = c.channel()
    consume(c, cch, "clu.c", "qc", prefetch=10)
    watched = [("consumer", c, cch), ("pub", c, ch)]
    watch(tl, watched, 1.0)
    watch(tl, watched, 3.0, node(other, "stop", tl))
    for n in (1, 2):
        publish(c, ch, "clu.c", f"no-majority-{n}".encode())
    tl.note("published 2 with confirms without a majority")
    watch(tl, watched, 20.0)
    attempt(tl, "passive declare clu.c", c, c.channel(), declare(c, 0, "clu.c", QUORUM, passive=True),
            QueueDeclareOk, timeout=40)
    watch(tl, watched, 5.0, node(other, "start", tl))
    tl.note(f"clu.c after the restart: {queue_info(1, 'clu.c')}")


def scenario_f() -> None:
    """Consumer timeout 8 s of a quorum consumer; the leader's node stops right after the delivery."""
    for stop in (False, True):
        tl = Timeline(f"f: quorum queue clu.f (x-consumer-timeout 8000, leader node 3), stop node 3: {stop}")
        c3 = client(3)
        setup_queue(c3, c3.channel(), "clu.f", {**QUORUM, "x-consumer-timeout": 8000})
        c3.close()
        c = client(1)
        ch = c.channel()
        publish(c, ch, "clu.f", b"f1")
        consume(c, ch, "clu.f", "qf", prefetch=1)
        watch(tl, [("consumer", c, ch)], 0.5)
        if stop:
            watch(tl, [("consumer", c, ch)], 15.0, node(3, "stop", tl))
            finish(node(3, "start", tl), tl)
        else:
            watch(tl, [("consumer", c, ch)], 12.0)
        c.close()


SCENARIOS: dict[str, Callable[[], None]] = {"a": scenario_a, "ak": scenario_a_kill, "b": scenario_b, "c": scenario_c, "f": scenario_f}


def main(argv: list[str]) -> int:
    for name in list(SCENARIOS) if not argv or argv == ["all"] else argv:
        start = time.monotonic()
        SCENARIOS[name]()
        print(f"-- scenario {name}: {time.monotonic() - start:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
