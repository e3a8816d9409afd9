"""basic.qos over the whole range of its two numbers (drawn by Hypothesis): QOS-02.e, QOS-01.c.

- prefetch_count is an unsigned 16-bit number (0-9-1 §1.8.3.1.1). Each example gives a new
  channel a count drawn from 0 to 65535, with its ends and the signed 16-bit boundary (32767,
  32768) first-class, then consumes a queue holding `READY` messages: the consumer must get
  min(count, READY) deliveries (every one for 0, unlimited), each due at once (`take_now`); where
  the count is below READY, nothing more may follow within the quiet window. A broker that keeps
  the count as a signed 16-bit number has a negative window from 32768 up and delivers nothing.
- prefetch_size is an unsigned 32-bit number. Each example sends one drawn from 1 to 2^32 - 1
  (the ends and 2^31 first-class) on a new connection: RabbitMQ closes the connection 540 naming
  the size in decimal as sent (`~w` of the decoded unsigned number); a broker that reads it as
  signed names sizes from 2^31 up as negative numbers.
- The examples are derandomized (the same broker gets the same values); a failure shrinks to the
  smallest value that shows it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given

from codec import BasicQos, BasicQosOk
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import ConnectionClosed, RawClient
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.field_values import drawn, ranged
from conformance.suite.steps.queues import Publisher, assert_quiet, consume, declare, messages, take_now

Connect = Callable[..., RawClient]
READY = 3  # messages waiting in each example's queue
QUIET = 0.3  # seconds (scaled): as test_qos.py, how long "nothing more arrives" is watched
COUNT_EXAMPLES = 20
SIZE_EXAMPLES = 12


@pytest.mark.rules("QOS-02")
@pytest.mark.clauses("QOS-02.c", "QOS-02.e")
def test_every_prefetch_count_limits_a_new_consumer_as_sent(connect: Connect, names: Names, target: Target) -> None:
    if target.profile.expect("QOS-02") != "required":
        not_applicable("AMQP 0-9-1: global=false is a channel limit, not a per-consumer one")
    client = connect()
    setup = client.channel()
    publisher = Publisher(client)

    @drawn(COUNT_EXAMPLES)
    @example(count=0)
    @example(count=1)
    @example(count=32767)
    @example(count=32768)
    @example(count=65535)
    @given(count=ranged(0, 65535))
    def limited(count: int) -> None:
        queue = declare(client, setup, names.queue("prefetch"))
        publisher.publish(queue, messages(READY))
        ch = client.channel()
        client.rpc(ch, BasicQos(prefetch_count=count), BasicQosOk)
        consume(client, ch, queue)
        due = READY if count == 0 else min(count, READY)
        try:
            take_now(client, ch, due)
            if due < READY:
                assert_quiet(client, ch, target.timeout(QUIET))
        except AssertionError as wrong:
            raise AssertionError(f"QOS-02: a consumer of a queue holding {READY} messages, on a channel with "
                                 f"basic.qos prefetch_count={count} global=false, must get {due} deliveries before "
                                 f"it settles any ({'0 is unlimited' if count == 0 else 'min(count, ready)'}); "
                                 f"{wrong}") from None
        client.close_channel(ch)  # its deliveries go back; the next example has a channel of its own

    limited()


@pytest.mark.rules("QOS-01")
@pytest.mark.clauses("QOS-01.a", "QOS-01.b", "QOS-01.c")
def test_every_prefetch_size_is_refused_540_naming_it(connect: Connect, target: Target) -> None:
    if target.profile.expect("QOS-01") != "required":
        not_applicable("AMQP 0-9-1: prefetch_size is a spec field a broker may honour")

    @drawn(SIZE_EXAMPLES)
    @example(size=1)
    @example(size=2**31)
    @example(size=2**32 - 1)
    @given(size=ranged(1, 2**32 - 1))
    def refused(size: int) -> None:
        client = connect()
        ch = client.channel()
        client.send(ch, BasicQos(prefetch_size=size, prefetch_count=0))
        want = f"NOT_IMPLEMENTED - prefetch_size!=0 ({size})"
        try:
            client.expect(ch, BasicQosOk)
        except ConnectionClosed as closed:
            got = (closed.scope, closed.code, closed.class_id, closed.method_id, closed.text)
            assert got == ("connection", ReplyCode.NOT_IMPLEMENTED, *METHOD_IDS["basic.qos"], want), (
                f"QOS-01: basic.qos prefetch_size={size} must close the connection 540 (60/10) {want!r}; "
                f"the broker closed it {closed}")
            return
        finally:
            client.close()
        raise AssertionError(f"QOS-01: basic.qos prefetch_size={size} must close the connection 540 {want!r}; "
                             "the broker answered basic.qos-ok")

    refused()
