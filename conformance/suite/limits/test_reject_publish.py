"""reject-publish and reject-publish-dlx: a full queue refuses new messages (LEN-04, LEN-05).

Rules:
- Limits and messages are drawn (Hypothesis, `LIMIT_SETTINGS`); each example is a new queue,
  filled one publish at a time under confirms (a quorum queue looks at its limits after the
  enqueue, so what it refuses depends on what it took: LEN-04), then read with basic.get
  (`trial`); what it must confirm, hold and dead-letter is `predict`'s. The nack is PC-08's.
- "Nothing dead-lettered" is watched on the dead-letter queue for a quarter of `prompt` (0.5 s,
  scaled): the source queue dead-letters right after its own reply.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codec import BasicProperties, BasicPublish
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.limits import (
    LIMIT_SETTINGS,
    REJECT,
    REJECT_DLX,
    Limits,
    bodies,
    held,
    opened,
    publish_one_by_one,
    sized,
    trial,
)
from conformance.suite.steps.queues import CLASSIC, QUORUM, declare, poll_ready, prompt, ready, require_kind

Connect = Callable[..., RawClient]
KINDS = [CLASSIC, QUORUM]


def how(kind: str) -> str:
    return ("refuses a publish that would take it over the limit" if kind == CLASSIC else
            "takes the publish that goes over the limit, then refuses until it is back at 80 %")


@pytest.mark.rules("LEN-04")
@pytest.mark.parametrize("kind", KINDS)
def test_a_full_queue_refuses_by_count(connect: Connect, names: Names, target: Target, kind: str) -> None:
    client, ch = opened(connect, target, kind)

    @LIMIT_SETTINGS
    @given(max_length=st.integers(min_value=0, max_value=4), count=st.integers(min_value=1, max_value=7))
    def check(max_length: int, count: int) -> None:
        run = trial(client, ch, names, target, kind, Limits(max_length=max_length, overflow=REJECT), bodies(count))
        assert run.kept_as_predicted(), f"LEN-04: a {kind} queue under reject-publish {how(kind)}: {run.told()}"

    check()


@pytest.mark.rules("LEN-04")
@pytest.mark.parametrize("kind", KINDS)
def test_a_full_queue_refuses_by_bytes(connect: Connect, names: Names, target: Target, kind: str) -> None:
    client, ch = opened(connect, target, kind)

    @LIMIT_SETTINGS
    @given(max_bytes=st.integers(min_value=0, max_value=40), sizes=st.lists(st.integers(0, 12), min_size=1, max_size=6))
    def check(max_bytes: int, sizes: list[int]) -> None:
        run = trial(client, ch, names, target, kind, Limits(max_bytes=max_bytes, overflow=REJECT), sized(sizes))
        assert run.kept_as_predicted(), (f"LEN-04: a {kind} queue under reject-publish {how(kind)} "
                                         f"({target.profile.name}): {run.told()}")

    check()


@pytest.mark.rules("LEN-04")
@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_message_is_not_dead_lettered(connect: Connect, names: Names, target: Target, kind: str) -> None:
    require_kind(target.profile, kind)
    client = connect()
    run = trial(client, client.channel(), names, target, kind, Limits(max_length=2, overflow=REJECT), bodies(5),
                dead_letter=True)
    assert run.kept_as_predicted() and run.dead == [], (
        f"LEN-04: a publish refused under reject-publish is not dead-lettered, nor is anything dropped from the "
        f"head, even with a dead-letter exchange: {run.told()}")


@pytest.mark.rules("LEN-04")
def test_without_confirms_a_refused_message_is_dropped_silently(connect: Connect, names: Names,
                                                                target: Target) -> None:
    """A classic queue (which refuses before the enqueue); a quorum queue learns that it is over
    its limit only after publishes already sent, so a burst without confirms is not pinned there.
    The count is asked again until it is 2, bounded (a passive declare may overtake the channel's
    publishes to the queue: seen on 3.10.8, a count of 1); what the queue holds then decides."""
    client = connect()
    ch = client.channel()
    queue = declare(client, ch, names.queue(), CLASSIC, Limits(max_length=2, overflow=REJECT).arguments())
    pch = client.channel()
    for body in bodies(5):
        client.send(pch, BasicPublish(exchange="", routing_key=queue), BasicProperties(), body)
    ready(client, pch, queue)  # a round trip on the publishing channel: it is still open
    count = poll_ready(client, ch, queue, 2, prompt(client))
    assert count == 2, f"LEN-04: a classic queue with x-max-length 2 and reject-publish holds 2; it counts {count}"
    assert held(client, ch, queue) == bodies(2), "LEN-04: the queue keeps the first two it took"


@pytest.mark.rules("LEN-04")
@pytest.mark.parametrize("kind", KINDS)
def test_a_drained_queue_takes_publishes_again(connect: Connect, names: Names, target: Target, kind: str) -> None:
    client, ch = opened(connect, target, kind)
    limits = Limits(max_length=2, overflow=REJECT)
    queue = declare(client, ch, names.queue(kind), kind, limits.arguments())
    first = publish_one_by_one(client, queue, bodies(4))
    assert "nack" in first, f"LEN-04: a {kind} queue with {limits} refuses some of 4 publishes; confirmed {first}"
    held(client, ch, queue)
    again = publish_one_by_one(client, queue, [b"again"])
    assert again == ["ack"], (f"LEN-04: once emptied, a {kind} queue with {limits} takes a publish again "
                              f"(basic.ack); the broker sent {again}")
    assert held(client, ch, queue) == [b"again"]


@pytest.mark.rules("LEN-05")
@pytest.mark.parametrize("kind", KINDS)
def test_reject_publish_dlx(connect: Connect, names: Names, target: Target, kind: str) -> None:
    """Classic: refused (nack) and dead-lettered with reason maxlen; quorum: drop-head (LEN-05)."""
    client, ch = opened(connect, target, kind)
    what = ("refuses what would take it over the limit and dead-letters it" if kind == CLASSIC
            else "does not support the mode and drops its head, dead-lettering it")

    @LIMIT_SETTINGS
    @given(max_length=st.integers(min_value=0, max_value=3), count=st.integers(min_value=1, max_value=6))
    def check(max_length: int, count: int) -> None:
        run = trial(client, ch, names, target, kind, Limits(max_length=max_length, overflow=REJECT_DLX),
                    bodies(count), dead_letter=True)
        assert run.kept_as_predicted() and run.dead == run.want_dead, (
            f"LEN-05: a {kind} queue under reject-publish-dlx {what}: {run.told()}")

    check()
