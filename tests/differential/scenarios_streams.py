"""The differential scenarios of stream queues: what the reference broker's
streams (reference_broker/core/streams.py) must do as RabbitMQ 4.3.6 does, collected into
`scenarios.SCENARIOS`.

Rules:
- Each publish is confirmed before the next: a stream chunk is a batch of writes, so only then
  is every message a chunk of its own on 4.3.6 too, as the reference broker writes them (which
  `x-stream-offset: last` depends on).
- No counts are recorded: 4.3.6's queue.declare-ok message_count for a stream is a metric that
  catches up within seconds.
"""

from __future__ import annotations

from tests.differential.script import Script

OFFSET = "x-stream-offset"


def _stream(s: Script, count: int) -> int:
    """A stream holding m1..m<count>, one confirmed publish at a time; the publishing channel."""
    s.queue("s", "stream")
    s.connect("a")
    pub = s.channel()
    s.confirm(pub)
    for n in range(1, count + 1):
        s.publish_on(pub, "s", f"m{n}")
        s.await_confirms(pub, 1)
    return pub


def stream_offsets(s: Script) -> None:
    """first, last, next, an offset, one below the log and one past its end; then a publish."""
    pub = _stream(s, 3)
    for tag, offset in (("first", "first"), ("last", "last"), ("next", "next"), ("at-1", 1), ("below", -1),
                        ("beyond", 5), ("default", None)):
        ch = s.channel()
        s.qos(ch, 10)
        s.consume(ch, "s", tag, **({} if offset is None else {OFFSET: offset}))
        s.sync(ch)
    s.anchor()
    s.at(0.5)
    s.publish_on(pub, "s", "m4")
    s.await_confirms(pub, 1)
    s.at(1.0)


def stream_settlement_gives_credit_and_never_redelivers(s: Script) -> None:
    """Prefetch 2 from the first offset: ack, nack and reject (requeue or not) each let the next
    offset through, flagged redelivered=false; basic.recover brings nothing back; a new consumer
    reads the whole log again."""
    _stream(s, 6)
    ch = s.channel()
    s.qos(ch, 2)
    s.consume(ch, "s", "c", **{OFFSET: "first"})
    s.take(ch, 2)
    s.ack(ch, 1)
    s.take(ch)
    s.nack(ch, 2)
    s.take(ch)
    s.reject(ch, 3)
    s.take(ch)
    s.nack(ch, 4, requeue=False)
    s.take(ch)
    s.recover(ch)
    s.sync(ch)
    s.anchor()
    s.at(0.5)  # nothing redelivered
    s.close(ch)
    again = s.channel()
    s.qos(again, 10)
    s.consume(again, "s", "again", **{OFFSET: "first"})
    s.take(again, 6)


def stream_refusals(s: Script) -> None:
    """What a stream refuses: another type's argument, a consumer without a prefetch, a bad offset,
    the consumer timeout argument, and basic.get (a connection error)."""
    _stream(s, 1)
    for alias, args in (("prio", {"x-max-priority": 5}), ("ttl", {"x-message-ttl": 1000}),
                        ("timeout", {"x-consumer-timeout": 1000})):
        s.try_queue(alias, "stream", **args)
    s.consume(s.channel(), "s", "no-prefetch")
    for tag, args in (("bogus", {OFFSET: "bogus"}), ("timeout", {"x-consumer-timeout": 1000})):
        ch = s.channel()
        s.qos(ch, 10)
        s.consume(ch, "s", tag, **args)
    s.connect("g")
    s.get(s.channel("g"), "s", conn="g")
