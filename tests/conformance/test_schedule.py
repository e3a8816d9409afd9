"""The order pytest-xdist hands the suite's tests out in (conformance/plugin/schedule.py, issue 31)."""

from __future__ import annotations

from conformance.plugin.schedule import MACHINE, PLAIN, TIMERS, arrange, weight

SUITE = [
    "conformance/suite/ack/test_ack.py::test_a",
    "conformance/suite/ack/test_machine_ack.py::test_acks",
    "conformance/suite/qos/test_qos.py::test_b",
    "conformance/suite/qos/test_machine_prefetch.py::test_prefetch",
    "conformance/suite/requeue/test_machine_requeue.py::test_requeue",
    "conformance/suite/timeout/test_timeout.py::test_c[1]",
    "conformance/suite/timeout/test_timeout.py::test_c[2]",
    "conformance/suite/cancel/test_machine_cancel.py::test_cancel",
    "conformance/suite/cancel/test_cancel.py::test_d",
    "conformance/suite/framing/test_framing.py::test_e",
    "conformance/suite/errors/test_errors.py::test_f",
    "conformance/suite/messages/test_messages.py::test_g",
]


def test_weights_name_the_machines_and_the_timer_tests() -> None:
    assert [weight(n) for n in SUITE[:6]] == [PLAIN, MACHINE, PLAIN, MACHINE, MACHINE, TIMERS]


def test_each_worker_starts_with_a_heavy_test_and_a_light_one() -> None:
    order = [SUITE[i] for i in arrange(SUITE, 3)]
    assert sorted(order) == sorted(SUITE)  # every test, once
    firsts = order[:6]  # xdist's first distribution: two tests per worker, in this order
    heavy, light = firsts[0::2], firsts[1::2]
    assert [weight(n) for n in heavy] == [MACHINE] * 3  # no machine waits behind another
    assert all(weight(n) == PLAIN for n in light)
    rest = [weight(n) for n in order[6:]]
    assert rest == sorted(rest, reverse=True)  # then the heaviest first


def test_too_few_tests_or_one_worker_keep_the_weight_order() -> None:
    assert SUITE[arrange(SUITE, 1)[0]] == SUITE[1]
    assert sorted(arrange(SUITE[:3], 4)) == [0, 1, 2]
