"""ERR-04.u: channel numbers over their whole range (drawn by Hypothesis).

A channel number is an unsigned 16-bit number (0-9-1 §4.2.3; 0 is the connection's own). RabbitMQ
counts open channels against channel_max and bounds no number, so on a connection that negotiated
channel_max 2 any number from 1 to 65535 opens while one other channel is open. Each example opens
a channel numbered as drawn (the ends and the signed 16-bit boundary 32767/32768 first-class),
makes a round trip on it and closes it again, on one connection; a broker that keeps the number as
a signed 16-bit one refuses or mixes up the numbers from 32768 up. The examples are derandomized; a
failure shrinks to the smallest number that shows it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given

from conformance.drivers.raw import ChannelClosed, ConnectionClosed, RawClient
from conformance.plugin.session import Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.field_values import drawn, ranged
from conformance.suite.steps.wire import sync

Connect = Callable[..., RawClient]
CHANNEL_EXAMPLES = 25
FIRST = 1  # the channel kept open beside each example's, so the count of open channels is channel_max


@pytest.mark.rules("ERR-04")
@pytest.mark.clauses("ERR-04.q", "ERR-04.u")
def test_any_channel_number_opens_while_fewer_than_channel_max_are_open(connect: Connect, target: Target) -> None:
    if not target.profile.rabbitmq:
        not_applicable("the spec bounds channel numbers by channel_max; RabbitMQ counts open channels")
    held: list[RawClient] = []

    def connection() -> RawClient:
        if not held:
            client = connect(channel_max=2)
            client.channel(FIRST)
            held.append(client)
        return held[0]

    @drawn(CHANNEL_EXAMPLES)
    @example(number=2)
    @example(number=32767)
    @example(number=32768)
    @example(number=65535)
    @given(number=ranged(2, 65535))
    def opens(number: int) -> None:
        client = connection()
        try:
            client.channel(number)
            sync(client, number)
            client.close_channel(number)
        except (ChannelClosed, ConnectionClosed, AssertionError) as refused:
            held.clear()  # the next example (a shrink) starts on a new connection
            raise AssertionError(f"ERR-04: with channel_max 2 and one channel ({FIRST}) open, channel.open on "
                                 f"channel {number} must be answered channel.open-ok (RabbitMQ counts open "
                                 f"channels and bounds no number from 1 to 65535); {refused}") from None

    opens()
