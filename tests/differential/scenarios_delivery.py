"""The differential scenarios outside consumer timeouts: acks, requeue order (classic, quorum, with
and without a delivery limit), confirms, prefetch and cancel notification, for RabbitMQ 4.3.6 and
the reference broker alike (collected into `scenarios.SCENARIOS`).
"""

from __future__ import annotations

from tests.differential.script import Script


def ack_multiple_and_single(s: Script) -> None:
    for kind in ("classic", "quorum"):
        s.queue(kind, kind)
        s.publish(kind, "m1", "m2", "m3", "m4")
        s.connect(kind)
        ch = s.channel(kind)
        s.consume(ch, kind, "c", conn=kind)
        s.take(ch, 4, conn=kind)
        s.ack(ch, 2, multiple=True, conn=kind)
        s.ack(ch, 4, conn=kind)
        s.sync(ch, conn=kind)
        s.close(ch, conn=kind)
        s.await_counts(kind, 1, consumers=0)  # m3 back, the consumer gone (asynchronous)


def _requeue_order(s: Script, kind: str, **args: int) -> None:
    s.queue("q", kind, **args)
    s.publish("q", "m1", "m2", "m3", "m4", "m5")
    s.connect("a")
    ch = s.channel()
    s.qos(ch, 3)
    s.consume(ch, "q", "c")
    s.take(ch, 3)
    s.nack(ch, 3)
    s.reject(ch, 1)
    s.sync(ch)
    s.take(ch, 2)  # classic: back in place (m1, m3); quorum: returns first, in return order (m3, m1)
    s.ack(ch, 0, multiple=True)
    s.sync(ch)
    s.take(ch, 2)
    s.ack(ch, 0, multiple=True)
    s.sync(ch)
    s.await_counts("q", 0)


def requeue_order_classic(s: Script) -> None:
    _requeue_order(s, "classic")


def requeue_order_quorum(s: Script) -> None:
    _requeue_order(s, "quorum")


def requeue_order_quorum_with_a_delivery_limit(s: Script) -> None:
    _requeue_order(s, "quorum", **{"x-delivery-limit": 5})


def requeue_delivery_limit_drops(s: Script) -> None:
    s.queue("q", "quorum", **{"x-delivery-limit": 1})
    s.publish("q", "m1", "m2")
    s.connect("a")
    ch = s.channel()
    s.qos(ch, 1)
    s.consume(ch, "q", "c")
    s.take(ch)
    s.reject(ch, 1)
    s.take(ch)
    s.reject(ch, 2)
    s.take(ch)  # m1 went over the limit and was dropped: m2
    s.ack(ch, 3)
    s.sync(ch)
    s.await_counts("q", 0)


def requeue_on_cancel_and_close(s: Script) -> None:
    for kind in ("classic", "quorum"):
        s.queue(kind, kind)
        s.publish(kind, "m1", "m2")
        s.connect(kind)
        ch = s.channel(kind)
        s.consume(ch, kind, "c", conn=kind)
        s.take(ch, 2, conn=kind)
        s.cancel(ch, "c", conn=kind)
        s.close(ch, conn=kind)
        ch = s.channel(kind)
        s.consume(ch, kind, "d", conn=kind)
        s.take(ch, 2, conn=kind)
        s.recover(ch, conn=kind)
        s.take(ch, 2, conn=kind)
        s.ack(ch, 0, multiple=True, conn=kind)
        s.sync(ch, conn=kind)


def confirms_on_quorum_and_classic(s: Script) -> None:
    s.queue("quorum", "quorum")
    s.queue("classic", "classic")
    s.connect("a")
    ch = s.channel()
    s.confirm(ch)
    s.publish_on(ch, "quorum", "m1", "m2")
    s.publish_on(ch, "classic", "m3")
    s.publish_on(ch, "nowhere", "m4")  # unroutable: confirmed at once
    s.await_confirms(ch, 4)
    s.counts("quorum")
    s.counts("classic")


def prefetch_per_consumer(s: Script) -> None:
    for global_ in (False, True):
        alias = f"q{int(global_)}"
        s.queue(alias, "classic")
        s.publish(alias, *(f"m{i}" for i in range(1, 7)))
        conn = f"g{int(global_)}"
        s.connect(conn)
        one = s.channel(conn)
        s.qos(one, 2, global_=global_, conn=conn)
        s.consume(one, alias, "x", conn=conn)
        s.take(one, 2, conn=conn)
        s.consume(one, alias, "y", conn=conn)  # 4.x: global=true is per consumer, so y gets 2 more
        s.take(one, 2, conn=conn)
        s.anchor()
        s.at(0.5)
        s.counts(alias)
        s.close(one, conn=conn)


def cancel_notification_on_queue_delete(s: Script) -> None:
    for capable in (True, False):
        conn = "cap" if capable else "nocap"
        alias = f"q-{conn}"
        s.queue(alias, "classic")
        s.connect(conn, capable=capable)
        ch = s.channel(conn)
        s.consume(ch, alias, "c", conn=conn)
        s.delete(alias)
        s.anchor()
        s.at(0.5)
        s.sync(ch, conn=conn)
