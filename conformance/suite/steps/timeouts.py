"""Shared steps of the consumer-timeout suite (timeout/test_timeout*.py) and machine
(timeout/test_machine_timeout.py).

Rules:
- Timeout values sent to the broker are either clearly short (SHORT, hundreds of ms) or clearly
  long (LONG, ten minutes): a wrong precedence shows as a timeout that fires or one that does
  not, never as a few hundred milliseconds of difference. Waits are bounded and scaled with
  `target.timeout()`: "fires" waits for the frame (basic.cancel or channel.close) up to the
  expected detection time plus a generous margin; "does not fire" is a round trip followed by
  a bounded poll that lasts several times the short value (and several ticks on ≤4.2).
- Broker settings outside AMQP go through the `admin` fixture (docs/design.md decision 6), recorded
  and undone at teardown. On ≤4.2 the global `consumer_timeout` is read when a channel opens
  (TMO-3x-4), so `open_with_global` sets it, opens the channels and puts the previous value
  back at once (a shared broker's other channels see the small value for a moment only); the
  tick interval (`channel_tick_interval`, read whenever the tick is armed) stays small until
  teardown.
- What a profile expects (value, reaction, detection window) comes from
  `conformance.model.timeouts`; these helpers only drive the wire.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from codec import (
    BasicCancel,
    BasicConsume,
    BasicConsumeOk,
    BasicQos,
    BasicQosOk,
    QueueDeclare,
    QueueDeclareOk,
)
from codec.constants import ReplyCode
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.model import timeouts as model
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.run.admin import Unavailable
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.queues import QUORUM, Publisher, declare, messages
from conformance.suite.steps.wire import sync, wait_channel_closed

Connect = Callable[..., RawClient]

SHORT = 200  # ms: fires within the test
LONG = 600_000  # ms: never fires within the test
MARGIN = 3.0  # s added to every expected detection time (scaled)
MARGIN_S = 5.0  # s (scaled): asynchronous queue effects (returns, consumer counts) and hand-overs
QUIET = 0.8  # s of "nothing happens" on 4.3 (4x SHORT, scaled)
TICK = 500  # ms: channel_tick_interval on ≤4.2 during a test
LEGACY_TIMEOUT = 1000  # ms: the global consumer_timeout of the ≤4.2 tests
LEGACY_QUIET = 2.0  # s of "nothing happens" on ≤4.2: several ticks past SHORT and LEGACY_TIMEOUT
NO_CAPABILITY = {"consumer_cancel_notify": False}


def per_delivery(target: Target) -> bool:
    """4.3 semantics (deadlines in the quorum queue) rather than a channel tick."""
    return model.per_delivery(target.profile.name)


def require_legacy(target: Target, what: str) -> None:
    if per_delivery(target):
        not_applicable(f"{what}: RabbitMQ ≤4.2 only")


def expected_reaction(target: Target, effective: int, *, cancel_notify: bool = True,
                      registered: bool = True) -> model.Reaction:
    return model.reaction(target.profile.name, effective, cancel_notify=cancel_notify,
                          consumer_registered=registered)


def quiet_window(target: Target) -> float:
    return target.timeout(QUIET if per_delivery(target) else LEGACY_QUIET)


def detection_deadline(target: Target, effective_ms: int) -> float:
    """Seconds to wait for a timeout of `effective_ms` to show (detection window + margin)."""
    _, latest = model.detection_window(target.profile.name, effective_ms, TICK)
    return latest / 1000 + target.timeout(MARGIN)


# -- declaring and consuming -------------------------------------------------------------------
def timeout_args(value: Any) -> dict[str, Any]:
    return {} if value is None else {model.ARGUMENT: value}


def queue_with(client: RawClient, ch: int, names: Names, kind: str = QUORUM, queue_arg: Any = None,
               count: int = 0, label: str | None = None, extra: Mapping[str, Any] | None = None) -> str:
    """A fresh queue of `kind` (optional x-consumer-timeout) holding m1..m<count>."""
    queue = declare(client, ch, names.queue(label or kind), kind, {**timeout_args(queue_arg), **(extra or {})})
    if count:
        Publisher(client).publish(queue, messages(count))
    return queue


def prefetch(client: RawClient, ch: int, count: int) -> None:
    client.rpc(ch, BasicQos(prefetch_count=count), BasicQosOk)


def consume(client: RawClient, ch: int, queue: str, tag: str, consumer_arg: Any = None) -> str:
    ok = client.rpc(ch, BasicConsume(queue=queue, consumer_tag=tag, arguments=timeout_args(consumer_arg)),
                    BasicConsumeOk).method
    assert isinstance(ok, BasicConsumeOk)
    return ok.consumer_tag


def queue_counts(client: RawClient, ch: int, queue: str) -> tuple[int, int]:
    """(ready messages, consumers) of `queue` from a passive declare (also a round trip)."""
    ok = client.rpc(ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk).method
    assert isinstance(ok, QueueDeclareOk)
    return ok.message_count, ok.consumer_count


def await_counts(client: RawClient, ch: int, queue: str, within: float, *, ready: int | None = None,
                 consumers: int | None = None) -> tuple[int, int]:
    """Poll (bounded) until the queue shows `ready` messages and/or `consumers` consumers: a quorum
    queue may apply a return or a consumer removal a moment after the frame that caused it."""
    deadline = time.monotonic() + within
    while True:
        seen = queue_counts(client, ch, queue)
        if (ready is None or seen[0] == ready) and (consumers is None or seen[1] == consumers):
            return seen
        assert time.monotonic() < deadline, (
            f"{queue}: (ready, consumers) = {seen} after {within:.1f} s, want ({ready}, {consumers})")
        time.sleep(0.02)


# -- what the client sees ----------------------------------------------------------------------
@dataclass(frozen=True)
class Fired:
    """A timeout seen on the wire: basic.cancel or channel.close, and after how long."""

    kind: str  # model.CANCEL or model.CLOSE
    seconds: float
    cancel: BasicCancel | None = None
    close: ChannelClosed | None = None


def await_cancel(client: RawClient, ch: int, within: float, since: float | None = None) -> Fired:
    """The broker's basic.cancel on `ch` (a channel.close instead raises ChannelClosed)."""
    start = time.monotonic() if since is None else since
    method = client.expect(ch, BasicCancel, timeout=within).method
    assert isinstance(method, BasicCancel)
    return Fired(model.CANCEL, time.monotonic() - start, cancel=method)


def await_close(client: RawClient, ch: int, within: float, since: float | None = None) -> Fired:
    """The broker's channel.close of `ch`; a basic.cancel arriving first is a failure."""
    start = time.monotonic() if since is None else since
    closed = wait_channel_closed(client, ch, within)
    cancels = [c.method for c in client.pending(ch) if isinstance(c.method, BasicCancel)]
    assert not cancels, f"basic.cancel {cancels} before the channel.close (TMO-3x-2: never a cancel)"
    return Fired(model.CLOSE, time.monotonic() - start, close=closed)


def await_reaction(client: RawClient, ch: int, expected: model.Reaction, within: float,
                   since: float | None = None) -> Fired:
    """Wait for the reaction the model expects and check its shape (nowait cancel; close 406
    0/0 with the exact TMO-3x-2 text, the value used included)."""
    if expected.kind == model.CANCEL:
        fired = await_cancel(client, ch, within, since)
        assert fired.cancel is not None and fired.cancel.nowait, f"want basic.cancel nowait=true: {fired.cancel}"
        return fired
    fired = await_close(client, ch, within, since)
    assert_timeout_close(fired.close, ch, expected.timeout_in_text)
    return fired


def assert_timeout_close(closed: ChannelClosed | None, ch: int, value: int | None) -> None:
    """TMO-3x-2 / TMO-4.3-3: channel.close 406, class 0, method 0, and the text (it is part of
    the rule: the channel number and the value used, -1 on 4.3)."""
    assert closed is not None
    assert (closed.scope, closed.code, closed.class_id, closed.method_id) == ("channel", ReplyCode.PRECONDITION_FAILED, 0, 0), closed
    if value is not None:
        assert closed.text == model.close_text(ch, value), closed.text


def assert_nothing_fires(client: RawClient, ch: int, duration: float) -> None:
    """After a round trip, neither basic.cancel nor channel.close (nor anything else of
    interest) arrives on `ch` within the bounded `duration`."""
    sync(client, ch)
    cancels = [c for c in client.pending(ch) if isinstance(c.method, BasicCancel)]
    assert not cancels, f"unexpected basic.cancel on channel {ch}: {cancels}"
    late = client.poll(ch, BasicCancel, duration=duration)  # a channel.close raises ChannelClosed
    assert late is None, f"unexpected basic.cancel on channel {ch}: {late}"
    sync(client, ch)  # still open


# -- broker settings through the admin adapter -------------------------------------------------
def legacy_tick(admin: RestoringAdmin, target: Target) -> None:
    """≤4.2: a short channel_tick_interval (before the test's channels open); 4.3: nothing."""
    if not per_delivery(target):
        admin.set_global("channel_tick_interval", TICK)


def open_with_global(admin: RestoringAdmin, value: int | None, opener: Callable[[], list[int]]) -> list[int]:
    """Set the global consumer_timeout, open channels (`opener`), put the previous value back.
    The change is recorded (teardown restores it too); the early put-back is not."""
    previous = admin.get_global("consumer_timeout")
    admin.set_global("consumer_timeout", value)
    try:
        return opener()
    finally:
        admin.adapter.set_global("consumer_timeout", previous)


def set_global(admin: RestoringAdmin, value: int | None) -> None:
    """4.3: the global value is read when a consumer registers or basic.get fetches; it stays
    until teardown."""
    admin.set_global("consumer_timeout", value)


def registered(admin: RestoringAdmin, target: Target) -> None:
    """After the test's last basic.consume-ok or basic.get-ok: on 4.3, put the global value back and
    let the other tests run beside this one. RabbitMQ 4.3 reads the global consumer_timeout only
    when a consumer registers or basic.get fetches (rabbit_queue_type:consume and dequeue →
    get_consumer_timeout, v4.3.5 l. 544/778/944-952; the channel process reads it before it sends
    consume-ok), and the quorum queue keeps that value for the consumer's deliveries; the reference
    broker does the same (core/timeouts `effective_timeout`, `get_timeout`). The test must not
    consume, get or publish after this (an alarm of another test blocks only publishers). ≤4.2:
    nothing (the channel tick is read again at every tick: the test stays alone)."""
    if per_delivery(target):
        admin.end_broker_wide()


def can_set_global(admin: RestoringAdmin) -> bool:
    try:
        admin.get_global("consumer_timeout")
    except Unavailable:
        return False
    return True


def exact(name: str) -> str:
    """A policy pattern matching exactly `name` (queue names carry [ ] - from test ids)."""
    return "^" + re.escape(name) + "$"


def policy_on(admin: RestoringAdmin, target: Target, queue: str, value: int, label: str = "tmo") -> None:
    """A `consumer-timeout` policy matching exactly `queue` (highest priority, undone at teardown)."""
    admin.put_policy(target.vhost, f"{queue}.{label}", exact(queue), {model.POLICY_KEY: value}, "queues", 100)

