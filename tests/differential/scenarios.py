"""The differential scenarios: the same raw-driver scripts for RabbitMQ 4.3.6 and the reference broker.

Each function is one scenario over `Script` (tests/differential/script.py). Consumer timeouts
(TMO-03, TMO-4.3-1..7): every precedence combination of consumer argument, queue argument, policy
and global value on quorum and classic queues, capable and incapable clients, partial timeouts,
late settles, the single-active-consumer hand-over, basic.cancel against channel.close; the
others (acks, requeue order, confirms, prefetch, cancel notification) are in scenarios_delivery.py,
stream queues in scenarios_streams.py.

Rules:
- Timeout values are `T` (1 s) or `LONG_T` (3 s), times the run's scale; checkpoints sit at
  least 0.4 s (scaled) away from every deadline, so a verdict never rides on a near miss.
- A scenario anchors (`s.anchor()`) right after the delivery whose deadline it checks.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.differential import scenarios_delivery, scenarios_streams
from tests.differential.script import Script

T, LONG_T = 1000, 3000  # ms, scaled by the script
ARG = "x-consumer-timeout"


def ms(s: Script, value: int) -> int:
    return int(value * s.scale)


def _timed_consumer(s: Script, *, capable: bool = True, consumer_arg: int | None = None,
                    kind: str = "quorum", **queue_args: int) -> int:
    s.queue("q", kind, **{k.replace("_", "-"): ms(s, v) for k, v in queue_args.items()})
    s.publish("q", "m1")
    s.connect("a", capable=capable)
    ch = s.channel()
    s.qos(ch, 10)
    args = {} if consumer_arg is None else {ARG: ms(s, consumer_arg)}
    s.consume(ch, "q", "c", **args)
    s.take(ch)
    s.anchor()
    return ch


def _fires_at(s: Script, seconds: float) -> None:
    """Nothing before `seconds` - 0.5, the reaction by `seconds` + 0.6, the message back ready."""
    s.at(seconds - 0.5)
    s.at(seconds + 0.6)
    s.await_counts("q", 1)


# -- TMO-03: which value wins ------------------------------------------------------------------------
def tmo_consumer_argument_capable(s: Script) -> None:
    ch = _timed_consumer(s, consumer_arg=T)
    _fires_at(s, 1.0)
    s.cancel_ok(ch, "c")
    s.sync(ch)
    s.at(1.8)


def tmo_consumer_argument_incapable(s: Script) -> None:
    _timed_consumer(s, capable=False, consumer_arg=T)
    _fires_at(s, 1.0)


def tmo_consumer_argument_beats_a_longer_queue_argument(s: Script) -> None:
    _timed_consumer(s, consumer_arg=T, x_consumer_timeout=LONG_T)
    _fires_at(s, 1.0)


def tmo_consumer_argument_beats_a_shorter_queue_argument(s: Script) -> None:
    _timed_consumer(s, consumer_arg=LONG_T, x_consumer_timeout=T)
    _fires_at(s, 3.0)


def tmo_queue_argument_alone(s: Script) -> None:
    _timed_consumer(s, x_consumer_timeout=T)
    _fires_at(s, 1.0)


def _policy_consumer(s: Script, policy: int, *, queue_arg: int | None = None, consumer_arg: int | None = None,
                     kind: str = "quorum") -> int:
    s.queue("q", kind, **({} if queue_arg is None else {ARG: ms(s, queue_arg)}))
    s.policy("q", {"consumer-timeout": ms(s, policy)})
    s.publish("q", "m1")
    s.connect("a")
    ch = s.channel()
    s.consume(ch, "q", "c", **({} if consumer_arg is None else {ARG: ms(s, consumer_arg)}))
    s.take(ch)
    s.anchor()
    return ch


def tmo_policy_alone(s: Script) -> None:
    _policy_consumer(s, T)
    _fires_at(s, 1.0)


def tmo_policy_shorter_than_queue_argument(s: Script) -> None:
    _policy_consumer(s, T, queue_arg=LONG_T)
    _fires_at(s, 1.0)


def tmo_queue_argument_shorter_than_policy(s: Script) -> None:
    _policy_consumer(s, LONG_T, queue_arg=T)
    _fires_at(s, 1.0)


def tmo_consumer_argument_beats_a_shorter_policy(s: Script) -> None:
    _policy_consumer(s, T, consumer_arg=LONG_T)
    _fires_at(s, 3.0)


def tmo_global_alone(s: Script) -> None:
    s.queue("q")
    s.publish("q", "m1")
    s.connect("a")
    ch = s.channel()
    with s.global_timeout(ms(s, T)):  # 4.3 reads it at basic.consume; restored after the checkpoints
        s.consume(ch, "q", "c")
        s.take(ch)
        s.anchor()
        _fires_at(s, 1.0)


def tmo_queue_argument_beats_a_shorter_global(s: Script) -> None:
    s.queue("q", **{ARG: ms(s, LONG_T)})
    s.publish("q", "m1")
    s.connect("a")
    ch = s.channel()
    with s.global_timeout(ms(s, T)):
        s.consume(ch, "q", "c")
        s.take(ch)
        s.anchor()
        _fires_at(s, 3.0)


# -- TMO-04 / TMO-4.3-1: classic queues never time out ------------------------------------------------
def tmo_classic_queue_argument_is_refused(s: Script) -> None:
    s.try_queue("c", "classic", **{ARG: ms(s, T)})


def tmo_classic_consumer_argument_is_refused(s: Script) -> None:
    s.queue("q", "classic")
    s.connect("a")
    ch = s.channel()
    s.consume(ch, "q", "c", **{ARG: ms(s, T)})


def tmo_classic_policy_and_global_never_fire(s: Script) -> None:
    s.queue("q", "classic")
    s.policy("q", {"consumer-timeout": ms(s, T)})
    s.publish("q", "m1")
    s.connect("a")
    ch = s.channel()
    with s.global_timeout(ms(s, T)):
        s.consume(ch, "q", "c")
        s.take(ch)
        s.anchor()
        s.at(2.0)
        s.counts("q")


def tmo_bad_values_are_refused(s: Script) -> None:
    s.queue("q")
    s.connect("a")
    for value in (-1, "soon"):
        ch = s.channel()
        s.consume(ch, "q", "c", **{ARG: value})


# -- TMO-4.3-2: partial timeouts ------------------------------------------------------------------------
def _two_in_flight(s: Script) -> int:
    s.queue("q")
    s.publish("q", "m1")
    s.connect("a")
    ch = s.channel()
    s.qos(ch, 10)
    s.consume(ch, "q", "c", **{ARG: ms(s, 1500)})
    s.take(ch)
    s.anchor()
    s.at(0.7)
    s.publish("q", "m2")
    s.take(ch)  # m2's deadline: about 2.2
    return ch


def _nudge(s: Script) -> None:
    """After every deadline, a command to the queue (a publish), its counts recorded, then what
    has arrived: RabbitMQ 4.3.6 arms a lost consumer-timeout timer again there, and the timeout's
    reaction comes then (test_rabbitmq43.TIMER_RACE)."""
    s.publish("q", "nudge")
    s.await_counts("q", 3)
    s.drain()


def tmo_partial_timeout_each_delivery_at_its_deadline(s: Script) -> None:
    _two_in_flight(s)
    s.at(1.9)  # m1 back, the consumer cancelled
    s.counts("q")
    s.at(2.8)  # m2 back at its own deadline: a second basic.cancel, the consumer still registered
    s.await_counts("q", 2)
    _nudge(s)


def tmo_partial_timeout_after_cancel_ok_closes_the_channel(s: Script) -> None:
    ch = _two_in_flight(s)
    s.at(1.9)
    s.cancel_ok(ch, "c")
    s.sync(ch)
    s.at(2.8)  # m2 expires with its consumer gone: channel.close 406 "-1 ms"
    s.await_counts("q", 2)
    _nudge(s)


def tmo_partial_timeout_ack_of_the_live_delivery_removes_it(s: Script) -> None:
    ch = _two_in_flight(s)
    s.at(1.9)
    s.ack(ch, 2)
    s.sync(ch)
    s.at(2.8)
    s.await_counts("q", 1)


# -- TMO-4.3-5: late settles ------------------------------------------------------------------------------
def _timed_out_with_prefetch_one(s: Script) -> int:
    s.queue("q")
    s.publish("q", "m1")
    s.connect("a")
    ch = s.channel()
    s.qos(ch, 1)
    s.consume(ch, "q", "c", **{ARG: ms(s, T)})
    s.take(ch)
    s.anchor()
    _fires_at(s, 1.0)
    return ch


def tmo_late_ack_is_accepted_and_the_consumer_resumes(s: Script) -> None:
    ch = _timed_out_with_prefetch_one(s)
    s.ack(ch, 1)
    s.sync(ch)
    s.take(ch)  # the same message again, on the cancelled consumer's tag
    s.ack(ch, 2)
    s.sync(ch)
    s.await_counts("q", 0)


def tmo_late_reject_is_accepted(s: Script) -> None:
    ch = _timed_out_with_prefetch_one(s)
    s.reject(ch, 1, requeue=False)
    s.sync(ch)
    s.take(ch)
    s.ack(ch, 2)
    s.sync(ch)
    s.await_counts("q", 0)


# -- TMO-4.3-3: basic.cancel against channel.close ----------------------------------------------------
def tmo_cancelled_by_the_client_then_timeout_closes_the_channel(s: Script) -> None:
    s.queue("q")
    s.publish("q", "m1")
    s.connect("a")
    ch = s.channel()
    s.consume(ch, "q", "c", **{ARG: ms(s, T)})
    s.take(ch)
    s.anchor()
    s.cancel(ch, "c")
    _fires_at(s, 1.0)


def tmo_basic_get_closes_the_channel(s: Script) -> None:
    s.queue("q", **{ARG: ms(s, T)})
    s.publish("q", "m1")
    s.connect("a")
    ch = s.channel()
    s.get(ch, "q")
    s.anchor()
    _fires_at(s, 1.0)


def tmo_other_consumers_on_the_channel_are_unaffected(s: Script) -> None:
    s.queue("q")
    s.queue("other", "classic")
    s.publish("q", "m1")
    s.connect("a")
    ch = s.channel()
    s.consume(ch, "other", "bystander")
    s.consume(ch, "q", "c", **{ARG: ms(s, T)})
    s.take(ch)
    s.anchor()
    _fires_at(s, 1.0)
    s.publish("other", "after")
    s.take(ch)
    s.ack(ch, 2)
    s.sync(ch)


def tmo_channel_close_after_timeout_returns_the_rest(s: Script) -> None:
    ch = _two_in_flight(s)
    s.at(1.9)
    s.close(ch)
    s.await_counts("q", 2)
    s.counts("q")


# -- TMO-4.3-7: single active consumer --------------------------------------------------------------------
def tmo_single_active_consumer_hands_over(s: Script) -> None:
    s.queue("q", **{"x-single-active-consumer": True})
    s.publish("q", "m1", "m2")
    s.connect("a")
    one, two = s.channel(), s.channel()
    s.qos(one, 1)
    s.qos(two, 1)
    s.consume(one, "q", "first", **{ARG: ms(s, T)})
    s.take(one)
    s.anchor()
    s.consume(two, "q", "second")
    s.at(0.5)
    s.at(1.6)  # first cancelled and moved to the waiting list: second gets m1 again
    s.take(two)
    s.ack(two, 1)
    s.take(two)
    s.ack(two, 2)
    s.sync(two)
    s.await_counts("q", 0)


SCENARIOS: dict[str, Callable[[Script], None]] = {
    name: fn for name, fn in sorted({**globals(), **vars(scenarios_delivery), **vars(scenarios_streams)}.items())
    if callable(fn) and name.startswith(("tmo_", "ack_", "requeue_", "confirms_", "prefetch_", "cancel_notification",
                                         "stream_"))
}
