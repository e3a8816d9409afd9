"""ACK-03 over the whole range of a delivery tag (drawn by Hypothesis).

A delivery tag is a 64-bit unsigned number (0-9-1 §1.4.2.6). Each example settles one tag, drawn
from 0 to 2^64-1 with its ends first-class, by basic.ack, basic.reject or basic.nack, on a channel
that holds no delivery, so every tag is unknown: the channel must close 406 (class 60, the settling
method's id) and, where the profile requires the text, name the tag in decimal, as the broker got
it. A broker that keeps tags as signed 64-bit numbers names a tag above 2^63 - 1 as a negative
number; one that keeps 32 bits, another number. The examples are derandomized (the same broker
gets the same tags); a failure shrinks to the smallest tag that shows it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from codec import BasicAck, BasicNack, BasicReject, Method
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.field_values import drawn, ranged
from conformance.suite.steps.queues import declare, prompt, ready
from conformance.suite.steps.replies import assert_unknown_tag

Connect = Callable[..., RawClient]
TAG_EXAMPLES = 25
SETTLES: dict[str, Callable[[int], Method]] = {
    "ack": lambda tag: BasicAck(delivery_tag=tag), "reject": lambda tag: BasicReject(delivery_tag=tag, requeue=True),
    "nack": lambda tag: BasicNack(delivery_tag=tag, requeue=True)}


@pytest.mark.rules("ACK-03")
@pytest.mark.clauses("ACK-03.a", "ACK-03.d", "ACK-03.e", "ACK-03.g")
def test_an_unknown_tag_anywhere_in_its_range_closes_the_channel_naming_it(connect: Connect, names: Names,
                                                                          target: Target) -> None:
    held: list[tuple[RawClient, str]] = []  # the connection and its queue; empty after an example that broke it

    def connection() -> tuple[RawClient, str]:
        if not held:
            client = connect()
            held.append((client, declare(client, client.channel(), names.queue("tags"))))
        return held[0]

    @drawn(TAG_EXAMPLES)
    @example(tag=2**64 - 1, kind="ack")
    @example(tag=2**63, kind="nack")
    @example(tag=0, kind="reject")
    @given(tag=ranged(0, 2**64 - 1), kind=st.sampled_from(sorted(SETTLES)))
    def settle_unknown(tag: int, kind: str) -> None:
        client, queue = connection()
        try:
            ch = client.channel()  # a fresh channel: it holds no delivery, so every tag is unknown
            client.send(ch, SETTLES[kind](tag))
            ready(client, ch, queue, timeout=prompt(client))
        except ChannelClosed as closed:
            try:
                assert_unknown_tag(closed, tag, kind, target, "ACK-03")
            except AssertionError as wrong:
                raise AssertionError(f"ACK-03: basic.{kind} of the unknown tag {tag} must close the channel 406 "
                                     f"(60/{SETTLES[kind](0).METHOD_ID}) 'PRECONDITION_FAILED - unknown delivery tag "
                                     f"{tag}'; the broker closed it {closed}") from wrong
            return
        except BaseException:
            held.clear()  # the next example (a shrink) starts on a new connection
            raise
        raise AssertionError(f"ACK-03: basic.{kind} of the unknown tag {tag} (no delivery on the channel) must "
                             f"close the channel 406; the channel stayed open")

    settle_unknown()
