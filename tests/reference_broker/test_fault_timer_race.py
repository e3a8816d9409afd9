"""The faults of the quorum queue's consumer-timeout timer (TMO-4.3-2), in the pure core, with the
timers the core arms tracked as the server would: `later_deadline_fires_at_next_command` is
RabbitMQ 4.3.6's lost-timer race (docs/findings-rabbitmq-4.3.6.md): a deadline that follows a firing
gets no timer, and times out only when a command reaches the queue after it;
`later_deadline_timer_lost` loses it for good. Through the suite, the race fails TMO-4.3-7 (the
SAC stall test) as the failure RabbitMQ 4.3.6's baseline accepts, and only that failure."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from codec import BasicCancel, BasicConsume, BasicDeliver, BasicQos, ChannelOpen, Method, QueueDeclare
from conformance.plugin.evidence import TestEvidence
from conformance.results.baseline import load_baseline
from conformance.results.parts import read_table
from conformance.suite.timeout import test_timeout_sac
from reference_broker.core import Effect, Meta, StartTimer
from reference_broker.server import EmbeddedBroker
from tests.conftest import cli_env
from tests.reference_broker.sim import Sim, methods, sends

KEY = ("qtimeout", "/", "q")
RACE = "later_deadline_fires_at_next_command"
LOST = "later_deadline_timer_lost"


class Clock:
    """A Sim whose queue timer fires only when armed, at its deadline's millisecond (as Ra does)."""

    def __init__(self, faults: list[str], **queue_args: object) -> None:
        self.sim = Sim(faults=faults)
        self.sim.connect()
        self.sim.open()
        self.armed: int | None = None
        self.note(self.sim.do(1, 1, QueueDeclare(queue="q", durable=True,
                                                 arguments={"x-queue-type": "quorum", **queue_args})))

    def note(self, effects: list[Effect]) -> list[Effect]:
        for effect in effects:
            if isinstance(effect, StartTimer) and effect.key == KEY:
                self.armed = effect.at_ms
        return effects

    def do(self, method: Method, ch: int = 1) -> list[Effect]:
        return self.note(self.sim.do(1, ch, method))

    def publish(self, body: bytes) -> list[Effect]:
        return self.note(self.sim.publish("q", body))

    def advance(self, to: int) -> list[Effect]:
        """Time moves to `to`; the armed timer fires (at once when armed in the past) if due."""
        effects: list[Effect] = []
        while self.armed is not None and self.armed <= to:
            self.sim.now = max(self.sim.now, self.armed)
            self.armed = None
            effects += self.note(self.sim.core.timer_fired(Meta(self.sim.now), KEY) + self.sim.core.flush())
        self.sim.now = max(self.sim.now, to)
        return effects


def two_in_flight(faults: list[str]) -> Clock:
    """m1 at t0 and m2 at t0+50 to one consumer (100 ms): deadlines t0+100 and t0+150."""
    clock = Clock(faults)
    clock.do(BasicQos(prefetch_count=10))
    clock.do(BasicConsume(queue="q", consumer_tag="c", arguments={"x-consumer-timeout": 100}))
    t0 = clock.sim.now
    assert sends(clock.publish(b"m1"), BasicDeliver)
    clock.advance(t0 + 50)
    assert sends(clock.publish(b"m2"), BasicDeliver)
    assert methods(clock.advance(t0 + 100)) == [BasicCancel("c", nowait=True)]  # m1 at its deadline
    return clock


def test_without_faults_the_later_deadline_fires_on_time() -> None:
    clock = two_in_flight([])
    assert clock.armed == clock.sim.now + 50
    assert methods(clock.advance(clock.sim.now + 50)) == [BasicCancel("c", nowait=True)]


def test_the_race_fault_arms_no_timer_for_the_later_deadline_until_a_command_after_it() -> None:
    clock = two_in_flight([RACE])
    fired = clock.sim.now
    assert clock.armed is None  # m2's deadline (fired + 50) has no timer
    clock.advance(fired + 30)
    clock.publish(b"before")  # a command before m2's deadline owes nothing
    assert clock.armed is None
    assert not methods(clock.advance(fired + 500))  # on time, nothing: the timer was lost
    clock.publish(b"after")  # the next command after the deadline arms it in the past
    assert clock.armed == fired + 50
    assert methods(clock.advance(clock.sim.now)) == [BasicCancel("c", nowait=True)]
    queue = clock.sim.core.find_queue("/", "q")
    assert queue is not None and [m.body for m in queue.ready_messages()][:2] == [b"m1", b"m2"]


def test_the_lost_timer_fault_is_not_caught_up_by_a_command() -> None:
    clock = two_in_flight([LOST])
    fired = clock.sim.now
    clock.advance(fired + 500)
    clock.publish(b"after")
    assert clock.armed is None
    assert not methods(clock.advance(fired + 1000))


def test_the_race_fault_leaves_the_sac_handover_consumer_without_a_timer() -> None:
    """TMO-4.3-7: b takes m1 in the firing that times a out; b's deadline waits for a command."""
    clock = Clock([RACE], **{"x-single-active-consumer": True})
    clock.do(ChannelOpen(), ch=2)
    clock.publish(b"m1")
    clock.do(BasicConsume(queue="q", consumer_tag="a", arguments={"x-consumer-timeout": 100}))
    clock.do(BasicConsume(queue="q", consumer_tag="b", arguments={"x-consumer-timeout": 100}), ch=2)
    handover = clock.advance(clock.sim.now + 100)
    assert methods(handover, BasicCancel) == [BasicCancel("a", nowait=True)]
    assert [s.channel for s in sends(handover, BasicDeliver)] == [2]  # b took m1
    fired = clock.sim.now
    assert clock.armed is None and not clock.advance(fired + 1000)
    clock.publish(b"m2")
    assert sends(clock.advance(clock.sim.now), BasicCancel)[0].channel == 2


def test_the_race_fault_times_a_new_delivery_out_on_time_after_a_firing_that_left_none() -> None:
    """A firing that leaves no deadline loses nothing: the next delivery's timer is armed."""
    clock = Clock([RACE])
    clock.do(BasicConsume(queue="q", consumer_tag="c", arguments={"x-consumer-timeout": 100}))
    clock.publish(b"m1")
    assert methods(clock.advance(clock.sim.now + 100)) == [BasicCancel("c", nowait=True)]
    clock.advance(clock.sim.now + 10)
    clock.do(BasicConsume(queue="q", consumer_tag="d", arguments={"x-consumer-timeout": 100}))  # takes m1
    assert clock.armed == clock.sim.now + 100


BASELINE = Path(__file__).resolve().parents[2] / "baselines" / "rabbitmq-4.3.6.toml"


def test_through_the_suite_the_race_fails_tmo_4_3_7_and_the_4_3_6_baseline_accepts_it(tmp_path: Path) -> None:
    suite = tmp_path / "suite"  # the SAC tests alone: collecting the whole suite costs more than they take
    suite.mkdir()
    shutil.copy(Path(test_timeout_sac.__file__), suite / "test_timeout_sac.py")
    with EmbeddedBroker(faults=[RACE]) as broker:
        run = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--broker-url", broker.url,
                              "--suite", str(suite), "--baseline", str(BASELINE), "--out", str(tmp_path / "out")],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300, env=cli_env())
    assert run.returncode == 0, run.stdout + run.stderr  # failed, and expected by the baseline
    tests = {t["test_id"].rsplit("::", 1)[-1]: t for t in read_table(tmp_path / "out" / "results", "tests").to_pylist()}
    stall = tests["test_sac_stalls_once_every_consumer_timed_out"]
    assert (stall["verdict"], list(stall["failed_rules"])) == ("failed", ["TMO-4.3-7", "TMO-4.3-2"]), stall["message"]
    assert "the timeout waited for the queue's next command" in stall["message"], stall["message"]
    assert tests["test_sac_timed_out_active_consumer_hands_over"]["verdict"] == "passed"
    assert "1 expected failure" in run.stdout and "TMO-4.3-7 (" in run.stdout


def test_the_4_3_6_baseline_accepts_a_late_cancel_only_when_a_command_brought_it() -> None:
    (entry,) = [d for d in load_baseline(BASELINE).deviations if d.rule == "TMO-4.3-7"]
    assert entry.intermittent and entry.message

    def failed(violation: AssertionError) -> TestEvidence:
        text = f"{type(violation).__name__}: {violation}"
        return TestEvidence("conformance/suite/timeout/test_timeout_sac.py::test_sac_stalls_once_every_consumer_timed_out",
                            "failed", "timeout", ("TMO-4.3-7",), text, failures={"TMO-4.3-7": text})

    assert entry.matches_failure(failed(test_timeout_sac.late_timeout("b", 3.2, 0.01, 1.0)))  # the race
    assert not entry.matches_failure(failed(test_timeout_sac.late_timeout("b", 3.2, None, 1.0)))  # never
    assert not entry.matches_failure(failed(AssertionError("no delivery after a timed-out message was settled")))
