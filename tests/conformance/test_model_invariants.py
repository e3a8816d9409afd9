"""The model's invariants over random command logs (the rabbit_fifo way): after every step and
after the broker settles, tags ascend (ACK-01), a consumer's unacked deliveries match its count and
its prefetch (QOS-02), and no message is in two places at once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.model import BrokerModel
from tests.conformance.model_steps import RABBIT_PROFILES, model

# -- property tests: fold random command logs through the model ------------------------------

COMMANDS = st.lists(st.tuples(
    st.sampled_from(["publish", "get", "consume", "cancel", "ack", "nack", "reject", "recover", "close",
                     "qos", "deliver"]),
    st.sampled_from([1, 2]), st.sampled_from(["c", "qq"]), st.integers(0, 6), st.booleans(),
), max_size=40)


def _run(m: BrokerModel, command: tuple[str, int, str, int, bool], counter: list[int]) -> None:
    op, ch, queue, n, flag = command
    if not m.is_open(ch):
        m.open_channel(ch)
    if op == "publish":
        counter[0] += 1
        m.publish(ch, "", queue, f"m{counter[0]}".encode())
    elif op == "get":
        answer = sorted(m.get_outcomes(ch, queue), key=repr)[0]
        m.get(ch, queue, answer, no_ack=flag)
    elif op == "consume":
        counter[1] += 1
        m.consume(ch, queue, f"c{counter[1]}", no_ack=flag)
    elif op == "cancel":
        tags = m.consumer_tags(ch)
        if tags:
            m.cancel(ch, tags[n % len(tags)])
    elif op in ("ack", "nack", "reject"):
        tags = m.unacked_tags(ch)
        tag = tags[n % len(tags)] if tags and n else n
        if op == "ack":
            m.ack(ch, tag, flag)
        elif op == "nack":
            m.nack(ch, tag, flag, requeue=True)
        else:
            m.reject(ch, tag, requeue=flag)
    elif op == "recover":
        m.recover(ch, requeue=True)
    elif op == "close":
        m.close_channel(ch)
    elif op == "qos":
        m.qos(ch, n % 4, flag)
    else:
        allowed = sorted(m.deliveries(ch), key=repr)
        if allowed:
            m.deliver(ch, allowed[n % len(allowed)])


def _check_invariants(m: BrokerModel) -> None:
    seen: list[bytes] = []
    for queue in m.queues():
        seen += m.ready_bodies(queue)
    for channel in m.state.channels.values():
        tags = list(channel.unacked)
        assert tags == sorted(tags) and all(0 < t < channel.next_tag for t in tags)  # ACK-01
        seen += [u.message.body for u in channel.unacked.values()]
        for consumer in channel.consumers.values():
            held = sum(1 for u in channel.unacked.values() if u.consumer == consumer.tag)
            assert consumer.outstanding == held
            assert consumer.no_ack or consumer.prefetch == 0 or held <= consumer.prefetch  # QOS-02
        assert channel.volume_low <= channel.volume
    assert len(seen) == len(set(seen)), "a message is in two places at once"


@pytest.mark.parametrize("profile", RABBIT_PROFILES)
@settings(max_examples=60, deadline=None)
@given(commands=COMMANDS)
def test_model_invariants_hold_over_any_command_log(profile: str, commands: list[tuple[str, int, str, int, bool]]) -> None:
    m = model(profile, ("c", "classic"), ("qq", "quorum"))
    counter = [0, 0]
    for command in commands:
        _run(m, command, counter)
        _check_invariants(m)
        m.quiesce()
        _check_invariants(m)
