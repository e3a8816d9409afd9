"""Queue length limits in the reference broker's pure core (core/limits.py, LEN-01..05): the
argument checks' texts, and, for drawn limits and message sizes, the confirms, the queue's
contents and what is dead-lettered agree with the suite's `predict` (the catalogue's rules)
for classic and quorum queues, each overflow mode, as 4.3 and as 3.x (legacy mode)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codec import (
    AmqpError,
    BasicAck,
    BasicGet,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    ConfirmSelect,
    QueueDeclare,
)
from codec.frames import encode_header_payload
from conformance.suite.steps.limits import HEADER_FIXED, Limits, Outcome, Trial, predict
from reference_broker.core.limits import check_arguments
from tests.reference_broker.sim import Sim, methods, sends

WHAT = "queue 'q' in vhost '/'"


@pytest.mark.parametrize(("arguments", "why"), [
    ({"x-max-length": -3}, "invalid arg 'x-max-length' for {w}: {{value_negative,-3}}"),
    ({"x-max-length-bytes": "10"}, "invalid arg 'x-max-length-bytes' for {w}: \"expected integer, got longstr\""),
    ({"x-max-length": True}, "invalid arg 'x-max-length' for {w}: \"expected integer, got bool\""),
    ({"x-overflow": "drop-tail"}, "invalid arg 'x-overflow' for {w}: invalid_overflow"),
    ({"x-overflow": 5}, "invalid arg 'x-overflow' for {w}: {{unacceptable_type,byte}}"),
    ({"x-overflow": 70000}, "invalid arg 'x-overflow' for {w}: {{unacceptable_type,signedint}}"),
    ({"x-overflow": b"drop-head"}, "invalid arg 'x-overflow' for {w}: {{unacceptable_type,binary}}"),
])
def test_invalid_arguments_get_rabbitmqs_texts(arguments: dict[str, object], why: str) -> None:
    with pytest.raises(AmqpError) as raised:
        check_arguments(dict(arguments), WHAT)
    assert (raised.value.code, raised.value.text) == (406, why.format(w=WHAT))


@pytest.mark.parametrize("arguments", [{}, {"x-max-length": 0}, {"x-max-length-bytes": 2**63 - 1},
                                       *({"x-overflow": o} for o in ("drop-head", "reject-publish", "reject-publish-dlx"))])
def test_valid_arguments_pass(arguments: dict[str, object]) -> None:
    check_arguments(dict(arguments), WHAT)


def run(kind: str, limits: Limits, bodies: list[bytes], legacy: bool) -> tuple[list[str], list[bytes], list[bytes]]:
    """(confirms, what the queue holds, what reached its dead-letter queue with reason maxlen)."""
    sim = Sim(**({"timeout_mode": "legacy"} if legacy else {}))
    sim.connect()
    sim.open()
    sim.do(1, 1, QueueDeclare(queue="dlq", durable=True))
    arguments = {**limits.arguments(), "x-queue-type": kind, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    sim.do(1, 1, QueueDeclare(queue="q", durable=True, arguments=arguments))
    sim.do(1, 1, ConfirmSelect())
    confirms = []
    for body in bodies:
        sent = methods(sim.do(1, 1, BasicPublish(routing_key="q"), BasicProperties(), body))
        confirms += ["ack" if isinstance(m, BasicAck) else "nack" for m in sent if isinstance(m, BasicAck | BasicNack)]

    def drain(queue: str) -> list[bytes]:
        out = []
        while oks := sends(sim.do(1, 1, BasicGet(queue=queue, no_ack=True)), BasicGetOk):
            headers = dict((oks[0].properties.headers or {}) if oks[0].properties else {})
            assert queue == "q" or headers["x-death"][0]["reason"] == "maxlen"
            out.append(oks[0].body)
        return out

    return confirms, drain("q"), drain("dlq")


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(["classic", "quorum"]), overflow=st.sampled_from([None, "reject-publish", "reject-publish-dlx"]),
       max_length=st.none() | st.integers(0, 4), max_bytes=st.none() | st.integers(0, 30),
       sizes=st.lists(st.integers(0, 10), min_size=1, max_size=8), legacy=st.booleans())
def test_the_core_agrees_with_the_suites_prediction(kind: str, overflow: str | None, max_length: int | None,
                                                    max_bytes: int | None, sizes: list[int], legacy: bool) -> None:
    limits = Limits(max_length, max_bytes, overflow)
    bodies = [bytes([65 + i]) * size for i, size in enumerate(sizes)]
    extra = len(encode_header_payload(0, BasicProperties())) - HEADER_FIXED if kind == "quorum" and not legacy else 0
    want = predict(kind, limits, [size + extra for size in sizes])
    assert run(kind, limits, bodies, legacy) == (want.confirms, [bodies[i] for i in want.kept],
                                                 [bodies[i] for i in want.dead])


def test_one_more_taken_names_only_the_late_refusal_of_a_quorum_queue() -> None:
    """The failure seen on a loaded RabbitMQ 4.3.6 (LEN-04: the publish right after the one that went
    over the limit was taken) is named as such; any other difference, or a classic queue, is not."""
    limits = Limits(max_bytes=13, overflow="reject-publish")
    sent = [b"a" * 12, b"", b"c" * 7]
    want = predict("quorum", limits, [14, 2, 9])
    assert want == Outcome(confirms=["ack", "nack", "nack"], kept=[0], dead=[])

    def trial(kind: str, confirms: list[str], held: list[bytes]) -> Trial:
        return Trial(kind, limits, sent, [14, 2, 9], confirms, held, None, want)

    late = trial("quorum", ["ack", "ack", "nack"], sent[:2])
    assert late.one_more_taken() and not late.kept_as_predicted()
    assert "one publish more, the one right after the publish that went over the limit" in late.told()
    assert not trial("quorum", ["ack", "ack", "ack"], sent).one_more_taken()  # two more: not that race
    assert not trial("quorum", ["ack", "ack", "nack"], sent[:1]).one_more_taken()  # acked, not kept
    assert not trial("quorum", ["ack", "nack", "ack"], [sent[0], sent[2]]).one_more_taken()  # a later one
    assert not trial("classic", ["ack", "ack", "nack"], sent[:2]).one_more_taken()
    assert not trial("quorum", want.confirms, sent[:1]).one_more_taken()  # as predicted


def test_one_more_taken_with_a_dead_letter_queue_only_when_it_got_what_the_rules_say() -> None:
    """The same race in the dead-letter variant (seen on a loaded RabbitMQ 4.3.6, --jobs 8, in
    test_a_refused_message_is_not_dead_lettered[quorum]): named as such only when the dead-letter
    queue got what the rules say, here nothing."""
    limits = Limits(max_length=2, overflow="reject-publish")
    sent = [b"m1", b"m2", b"m3", b"m4", b"m5"]
    want = predict("quorum", limits, [4] * 5)
    assert want == Outcome(confirms=["ack", "ack", "ack", "nack", "nack"], kept=[0, 1, 2], dead=[])

    def trial(confirms: list[str], held: list[bytes], dead: list[tuple[bytes, Any, Any]]) -> Trial:
        return Trial("quorum", limits, sent, [4] * 5, confirms, held, dead, want)

    seen = trial(["ack", "ack", "ack", "ack", "nack"], sent[:4], [])  # the run's own shape
    assert seen.one_more_taken() and not seen.kept_as_predicted()
    assert "one publish more" in seen.told()
    assert not trial(["ack", "ack", "ack", "ack", "nack"], sent[:4], [(b"m5", "maxlen", "maxlen")]).one_more_taken()
