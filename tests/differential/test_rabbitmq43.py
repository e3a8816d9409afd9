"""The differential test: every scenario of tests/differential/scenarios.py (and scenarios_delivery.py) against RabbitMQ 4.3.6
and against the reference broker, normalised transcripts compared.

It pins the reference broker's 4.3 behaviour (consumer timeouts above all) to the real 4.3.6.
Marked `rabbitmq43`: it needs the 4.3.6 node of `scripts/rabbitmq4.sh up 4.3` (URLs from
AMQPC_RMQ43_URL / AMQPC_RMQ43_ADMIN, defaults as the script's); skipped when it does not answer,
a failure under AMQPC_STRICT=1. The global consumer_timeout on 4.3.6 is changed through
`scripts/rabbitmq4.sh ctl 4.3` (rabbitmqctl in the chroot) and restored after each use.
AMQPC_DIFF_SCALE (default 1) stretches every timeout and checkpoint on a loaded machine.
"""

from __future__ import annotations

import difflib
import os
import pprint
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from conformance.drivers.raw import DriverError, RawClient
from conformance.run.admin import ManagementApi, Rabbitmqctl
from reference_broker.server import EmbeddedBroker
from tests.conftest import require
from tests.differential.scenarios import SCENARIOS
from tests.differential.script import Entry, Script, Side, run

ROOT = Path(__file__).resolve().parents[2]
RMQ43_URL = os.environ.get("AMQPC_RMQ43_URL", "amqp://guest:guest@127.0.0.1:5743/")
RMQ43_ADMIN = os.environ.get("AMQPC_RMQ43_ADMIN", "http://guest:guest@127.0.0.1:15743")
SCALE = float(os.environ.get("AMQPC_DIFF_SCALE", "1"))
GLOBAL = "consumer_timeout"


def side(name: str, url: str, api: ManagementApi, set_global: Callable[[int | None], None]) -> Side:
    return Side(name, url,
                put_policy=lambda n, pattern, definition: api.put_policy("/", n, pattern, definition),
                delete_policy=lambda n: api.delete_policy("/", n),
                set_global_timeout=set_global)


@pytest.fixture(scope="module")
def rabbitmq43() -> Iterator[Side]:
    try:
        with RawClient(RMQ43_URL, timeout=5.0) as client:
            version = str(client.server_properties.get("version"))
    except (OSError, DriverError) as exc:
        require(False, f"RabbitMQ 4.3.6 at {RMQ43_URL} (scripts/rabbitmq4.sh up 4.3): {exc}")
    require(version == "4.3.6", f"RabbitMQ 4.3.6 at {RMQ43_URL} (found {version})")
    ctl = Rabbitmqctl(f"{ROOT / 'scripts' / 'rabbitmq4.sh'} ctl 4.3", timeout=60.0)
    default = ctl.get_global(GLOBAL)

    def set_global(value: int | None) -> None:
        ctl.set_global(GLOBAL, default if value is None else value)

    api = ManagementApi(RMQ43_ADMIN)
    try:
        yield side("rabbitmq-4.3.6", RMQ43_URL, api, set_global)
    finally:
        api.close()


@pytest.fixture(scope="module")
def reference() -> Iterator[Side]:
    with EmbeddedBroker(management_port=0) as broker:
        assert broker.management_url is not None
        api = ManagementApi(broker.management_url)
        default = api.get_global(GLOBAL)

        def set_global(value: int | None) -> None:
            api.set_global(GLOBAL, default if value is None else value)

        try:
            yield side("reference", broker.url, api, set_global)
        finally:
            api.close()


# RabbitMQ 4.3.6 can lose a quorum queue's consumer-timeout timer. After a timeout, the queue's
# aux `eval` (rabbit_fifo:handle_aux, v4.3.5 L1319-1366) arms the timer for the next deadline only
# if the previous one has passed, `LastConTimeout0 < Ts` in whole milliseconds; Ra fires the timer
# at its deadline's millisecond (ra 3.1.10 ra_server_proc:handle_effect {timer, ..., {abs, true}}),
# and when the evaluation follows within that millisecond (an idle machine) the next deadline is
# remembered but no timer is armed. The next delivery then times out only at the queue's first
# command after its deadline, not on time. These scenarios end with such a command (`_nudge`).
# A real transcript that differs from the reference one exactly so is that race, and the scenario
# runs again; a difference of any other kind fails: the reference transcript after the checkpoint
# must be, entry for entry, 4.3.6's with the timeout on time (`on_time`). On an idle machine 4.3.6
# loses the race in most attempts (12 of 20 runs of the SAC suite test, all 4 attempts of one CI
# run): when every attempt meets it, the reference broker has still been judged, whole, against
# what 4.3.6 did (`lost_timer`), so the test passes with a warning saying that 4.3.6 lost its timer.
TIMER_RACE = frozenset(("tmo_partial_timeout_each_delivery_at_its_deadline",
                        "tmo_partial_timeout_after_cancel_ok_closes_the_channel"))
RACE_CHECKPOINT = ("at", 2.8)  # the scenarios' checkpoint after the second delivery's deadline
ATTEMPTS = 4


def on_time(late: list[Entry]) -> list[Entry] | None:
    """The tail after RACE_CHECKPOINT of a transcript that lost the timer (one message ready at the
    checkpoint, all three after the nudge, then the timeout's reaction) as it is with the timer on
    time: the reaction at the checkpoint, then two ready and three, with the consumers left after
    the timeout (a cancelled consumer's channel is closed by it). None: not that shape."""
    if len(late) < 2 or late[0][:3] != ("counts", "q", 1) or late[1][:3] != ("counts", "q", 3):
        return None
    consumers = late[1][3]
    return [*late[2:], ("counts", "q", 2, consumers), ("counts", "q", 3, consumers)]


def lost_timer(name: str, real: list[Entry], ours: list[Entry]) -> bool:
    """Whether `real` is `ours` with TIMER_RACE's lost timer, and nothing else: the same up to the
    checkpoint, and after it ours is exactly real's tail with the timeout on time (`on_time`)."""
    if name not in TIMER_RACE or RACE_CHECKPOINT not in real or RACE_CHECKPOINT not in ours:
        return False
    cut = real.index(RACE_CHECKPOINT) + 1
    return real[:cut] == ours[:cut] and on_time(real[cut:]) == ours[cut:]


def render(transcript: list[Entry]) -> list[str]:
    return [pprint.pformat(entry, width=150) for entry in transcript]


@pytest.mark.rabbitmq43
@pytest.mark.timeout(120 * ATTEMPTS)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_reference_broker_matches_rabbitmq_4_3_6(name: str, rabbitmq43: Side, reference: Side) -> None:
    outcome = compare(name, rabbitmq43, reference)
    if outcome.raced == ATTEMPTS:  # the only difference, every time, is 4.3.6's race; the reference was on time
        warnings.warn(f"{name}: RabbitMQ 4.3.6 lost its consumer-timeout timer in all {outcome.raced} attempts "
                      "(TIMER_RACE); the reference broker's transcript was 4.3.6's with the timeout on time",
                      stacklevel=1)
        return
    assert not outcome.diff, f"{name}: the transcripts differ\n" + "\n".join(outcome.diff)
    assert outcome.real, f"{name}: an empty transcript proves nothing"


@dataclass(frozen=True)
class Outcome:
    """The last attempt's transcripts and diff, and how many attempts met TIMER_RACE."""

    real: list[Entry]
    ours: list[Entry]
    diff: list[str]
    raced: int


def compare(name: str, real_side: Side, our_side: Side) -> Outcome:
    """Run `name` on both sides, again while the only difference is TIMER_RACE (ATTEMPTS at most)."""
    scenario: Callable[[Script], None] = SCENARIOS[name]
    raced = 0
    for _ in range(ATTEMPTS):
        with ThreadPoolExecutor(2) as pool:  # both at once: the same wall-clock windows, half the time
            real, ours = pool.map(lambda s: run(scenario, s, SCALE), (real_side, our_side))
        diff = list(difflib.unified_diff(render(real), render(ours), real_side.name, our_side.name, lineterm=""))
        if not diff or not lost_timer(name, real, ours):
            break
        raced += 1
    return Outcome(real, ours, diff, raced)


def compare_with_fault(fault: str, rabbitmq43: Side,
                       name: str = "tmo_partial_timeout_each_delivery_at_its_deadline") -> Outcome:
    """`compare` of a partial-timeout scenario: 4.3.6 against a reference broker with `fault`."""
    with EmbeddedBroker(faults=[fault], management_port=0) as broker:
        assert broker.management_url is not None
        api = ManagementApi(broker.management_url)
        try:
            return compare(name, rabbitmq43, side(f"reference+{fault}", broker.url, api, lambda _: None))
        finally:
            api.close()


@pytest.mark.rabbitmq43
@pytest.mark.timeout(120)
def test_a_partial_timeout_deviation_fails_at_once_not_as_the_race(rabbitmq43: Side) -> None:
    # the reference broker returning every delivery at the first deadline (TMO-4.3-2's fault)
    # differs before the checkpoint: one attempt, no retry, the diff shows m2 back too early
    outcome = compare_with_fault("partial_timeout_returns_all", rabbitmq43)
    assert outcome.diff and outcome.raced == 0, outcome.diff
    assert "+('counts', 'q', 2, 1)" in outcome.diff, "\n".join(outcome.diff)  # at 1.9: both back, not m1 alone


@pytest.mark.rabbitmq43
@pytest.mark.timeout(120)
def test_a_reference_broker_losing_the_timer_fails_at_once(rabbitmq43: Side) -> None:
    # the reference broker with 4.3.6's race made permanent (m2 never times out, even after the
    # nudge): whether or not 4.3.6 raced in that attempt, the difference is not the race
    outcome = compare_with_fault("later_deadline_timer_lost", rabbitmq43)
    assert outcome.diff and outcome.raced == 0, outcome.diff
    assert "-('counts', 'q', 3, 1)" in outcome.diff, "\n".join(outcome.diff)  # 4.3.6: all three back after the nudge


@pytest.mark.rabbitmq43
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(TIMER_RACE))
def test_the_race_fault_is_4_3_6s_race_and_never_taken_for_it(name: str, rabbitmq43: Side) -> None:
    # the reference broker with the race as a fault (later_deadline_fires_at_next_command) loses
    # it every time: its transcript is 4.3.6's when 4.3.6 raced too, and otherwise exactly 4.3.6's
    # on-time transcript with the race (the reference broker late, never taken for 4.3.6's race)
    outcome = compare_with_fault("later_deadline_fires_at_next_command", rabbitmq43, name)
    assert outcome.raced == 0, outcome.diff
    assert not outcome.diff or lost_timer(name, outcome.ours, outcome.real), "\n".join(outcome.diff)


def test_lost_timer_recognises_only_the_race() -> None:
    name = "tmo_partial_timeout_each_delivery_at_its_deadline"
    head: list[Entry] = [("deliver", "a", 1, "c", 1, "m1", False, ()), ("at", 1.9), ("broker-cancel", "a", 1, "c"),
                         ("counts", "q", 1, 1), ("at", 2.8)]
    cancel = ("broker-cancel", "a", 1, "c")
    on_time = [*head, cancel, ("counts", "q", 2, 1), ("counts", "q", 3, 1)]
    raced = [*head, ("counts", "q", 1, 1), ("counts", "q", 3, 1), cancel]
    never = [*head, ("counts", "q", 1, 1), ("counts", "q", 2, 1)]  # m2 never times out, even after a command
    early = [*head[:-2], ("counts", "q", 2, 1), ("at", 2.8), ("counts", "q", 1, 1), ("counts", "q", 3, 1), cancel]
    closed = [*head, ("channel.close", "a", 1, 406, 0, 0, "PRECONDITION_FAILED"), ("counts", "q", 2, 1),
              ("counts", "q", 3, 1)]  # on time, but the wrong reaction
    silent = [*head, ("counts", "q", 2, 1), ("counts", "q", 3, 1)]  # on time, no reaction at all
    assert lost_timer(name, raced, on_time)
    assert not lost_timer(name, never, on_time)
    assert not lost_timer(name, early, on_time)  # differs before the checkpoint
    assert not lost_timer(name, raced, never)  # the reference broker is not on time either: not the race
    assert not lost_timer(name, on_time, raced)  # the reference broker lost the timer, not 4.3.6
    assert not lost_timer(name, raced, closed)  # counts on time, reaction wrong: compared whole, it fails
    assert not lost_timer(name, raced, silent)
    assert not lost_timer(name, raced, [*on_time, ("basic.deliver", "a", 1)])  # anything more after it fails
    assert not lost_timer("tmo_partial_timeout_ack_of_the_live_delivery_removes_it", raced, on_time)
    # m2 expires with its consumer cancelled: the channel closes, and the consumer goes with it
    close = ("channel.close", "a", 1, 406, 0, 0, "PRECONDITION_FAILED - … Timeout value used: -1 ms …")
    cancelled = "tmo_partial_timeout_after_cancel_ok_closes_the_channel"
    closed_late = [*head, ("counts", "q", 1, 1), ("counts", "q", 3, 0), close]
    assert lost_timer(cancelled, closed_late, [*head, close, ("counts", "q", 2, 0), ("counts", "q", 3, 0)])
    assert not lost_timer(cancelled, closed_late, [*head, close, ("counts", "q", 2, 1), ("counts", "q", 3, 1)])
