"""The order pytest-xdist hands the suite's tests out in (conformance/plugin/schedule.py)."""

from __future__ import annotations

from types import SimpleNamespace

from conformance.plugin.schedule import MACHINE, PLAIN, TIMEOUT_MACHINE, TIMERS, admin_last, arrange, rank

SUITE = [
    "conformance/suite/ack/test_ack.py::test_a",
    "conformance/suite/ack/test_machine_ack.py::test_acks",
    "conformance/suite/qos/test_qos.py::test_b",
    "conformance/suite/qos/test_machine_prefetch.py::test_prefetch",
    "conformance/suite/requeue/test_machine_requeue.py::test_requeue",
    "conformance/suite/timeout/test_timeout.py::test_c[1]",
    "conformance/suite/timeout/test_machine_timeout.py::test_timeouts",
    "conformance/suite/timeout/test_timeout.py::test_c[2]",
    "conformance/suite/cancel/test_machine_cancel.py::test_cancel",
    "conformance/suite/cancel/test_cancel.py::test_d",
    "conformance/suite/framing/test_framing.py::test_e",
    "conformance/suite/errors/test_errors.py::test_f",
    "conformance/suite/messages/test_messages.py::test_g",
]


def test_ranks_name_the_machines_and_the_timeout_area() -> None:
    assert [rank(n) for n in SUITE[:8]] == [PLAIN, MACHINE, PLAIN, MACHINE, MACHINE, TIMERS, TIMEOUT_MACHINE, TIMERS]


def test_each_worker_starts_with_a_machine_and_a_short_test_and_the_timeout_area_comes_last() -> None:
    order = [SUITE[i] for i in arrange(SUITE, 3)]
    assert sorted(order) == sorted(SUITE)  # every test, once
    firsts = order[:6]  # xdist's first distribution: two tests per worker, in this order
    assert [rank(n) for n in firsts[0::2]] == [MACHINE] * 3  # no machine waits behind another
    assert [rank(n) for n in firsts[1::2]] == [PLAIN] * 3
    ranks = [rank(n) for n in order[6:]]
    assert ranks == sorted(ranks)  # then by rank: machines, short tests, the timeout machine, the timeout area
    assert order[-3:] == [SUITE[6], SUITE[5], SUITE[7]]


def test_one_worker_or_too_few_short_tests_keep_the_rank_order() -> None:
    assert SUITE[arrange(SUITE, 1)[0]] == SUITE[1]
    machines_only = [n for n in SUITE if rank(n) == MACHINE]
    assert arrange(machines_only, 2) == list(range(len(machines_only)))


def test_a_workers_collection_puts_the_tests_using_admin_last() -> None:
    items = [SimpleNamespace(name=n, fixturenames=f) for n, f in
             [("a", ["target", "admin"]), ("b", ["target"]), ("c", ["admin"]), ("d", [])]]
    admin_last(items)
    assert [i.name for i in items] == ["b", "d", "a", "c"]
