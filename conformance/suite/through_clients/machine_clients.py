"""The acknowledgement machine through a client library: `--client NAME`.

Responsibility: a reduced AckMachine whose steps are calls of the `ClientDriver` interface, so
the library, not the raw codec, speaks to the broker; the model (conformance.model) is the
oracle, as in the raw machines (machine_base). The relay in front of the broker records the
frames, as for every test run through a client.

What it covers: basic.publish, basic.get (with and without no-ack), basic.ack / nack / reject
with any tag (0, unknown, settled, multiple), and client channel.close, on two channels of one
connection and one classic queue. Left out, because a library does not let an application
express it or its timing is the library's: consumers (deliveries arrive on the library's own
schedule), basic.recover requeue=false (pika and aio-pika do not send it), and the class and
method ids of a broker close (pika and aio-pika drop them): outcomes are compared by scope and
reply code only; a code the library hides is read from the recorded frames (recorded_replies).

Rules:
- Every step ends with a round trip on the channel it used (queue.declare passive), so an
  asynchronous close (ACK-03/ACK-04) is seen at the step that caused it, and a publish has
  reached its queue before the next basic.get (RabbitMQ's queue.declare asks the queue process).
  A library whose hello says "settle-close-only-as-event" (Bunny: an operation waiting on a
  channel closed for a settle hangs) is waited on for that close's event instead, where the
  rules say the settle closes the channel.
- After a broker channel close the channel is reopened (the library picks the number).
- A run is what the raw machines' is (machine_budget: `run_within_budget`, `example_ended`):
  the machine budget, shrinking included, the smallest failure seen when Hypothesis cannot replay
  one, and a failure reported as the program of its steps with the frames the relay recorded in
  that example.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from codec import ChannelClose, ConnectionClose
from conformance.drivers.interface import (
    ChannelClosedEvent,
    ClientDriver,
    Delivery,
    DriverError,
    Event,
    Recorder,
    Unsupported,
    attempt,
)
from conformance.model import BrokerModel, GetEmpty, GetOk, GetOutcome, outcomes
from conformance.suite.steps.machine_budget import (
    Budget,
    SetupRecorded,
    Smallest,
    example_ended,
    run_within_budget,
)
from conformance.suite.steps.machine_program import FrameLog, Program
from conformance.suite.steps.machine_support import Pick, from_machine
from conformance.suite.through_clients.recorded_replies import RecordedReplies

KEYS = st.sampled_from([1, 2])
HOW = st.sampled_from(["ack", "nack", "reject"])
OUTSTANDING = from_machine(lambda m: m.outstanding())  # (channel key, delivery tag)
F = TypeVar("F", bound=Callable[..., None])
QUEUE = "q"  # the queue's name in the model
ACK_RULES = ("ACK-01", "ACK-03", "ACK-04", "ACK-05", "ACK-06", "ACK-07", "RQ-01", "RQ-03", "RQ-04")
REPLY_WAIT_S = 2.0  # what a hidden reply code may take to be recorded after the library reported it
CLOSE_EVENT_S = 2.0  # what a broker's close of a channel may take to reach the library's error callback
# a library that tells a broker's close answering basic.ack / nack / reject only to its error callback,
# while an operation waiting on the channel hangs (Bunny): the machine waits for that event instead
SETTLE_CLOSE_AS_EVENT = "settle-close-only-as-event"


def _scope(outcome: outcomes.Outcome) -> tuple[str, int | None]:
    """What a client can show of an outcome: its scope and reply code."""
    if isinstance(outcome, outcomes.ChannelClosed):
        return ("channel", outcome.code)
    if isinstance(outcome, outcomes.ConnectionClosed):
        return ("connection", outcome.code)
    return ("ok", None)


def client_step(fn: F) -> F:
    """Wrap a rule: resolve its picks, add it to the program, mark the run busy while it executes
    (a failed step leaves it busy, and the final check is not run over a failure), then run
    `after_step`."""

    @functools.wraps(fn)
    def wrapper(self: ClientMachine, **kwargs: Any) -> None:
        kwargs = {k: v.resolve(self) if isinstance(v, Pick) else v for k, v in kwargs.items()}
        self.program.add(fn.__name__, kwargs)
        self.step_since = self.replies.mark()
        self.busy = True
        fn(self, **kwargs)
        self.after_step()
        self.busy = False

    return wrapper  # type: ignore[return-value]


class ClientMachine(SetupRecorded, RuleBasedStateMachine):
    """What every machine through a client shares: one driver (connection "A" in the model),
    channels 1 and 2 (the library numbers them), queues by logical name, the round trip that
    shows an asynchronous close (module rules) and the comparison by scope and code."""

    failures: Smallest | None = None  # the run's failures, the smallest kept (run_client_machine's factory sets it)

    def __init__(self, make: Callable[[], ClientDriver], profile: str, *, recorder: Recorder,
                 budget: Budget | None = None) -> None:
        super().__init__()
        self.budget = budget
        self.replies = RecordedReplies(recorder, REPLY_WAIT_S)  # before the driver: its connection is next
        self.step_since = self.replies.since
        self.program = Program(type(self).__name__)
        self.model = BrokerModel(profile)
        self.bodies = itertools.count(1)
        self.prefix = f"amqpc.mc.{uuid.uuid4().hex[:10]}"
        self.real: dict[str, str] = {}  # logical queue name -> the broker's
        self.busy = False
        self.requeued_by_close: set[bytes] = set()
        self.closes_seen: list[int] = []  # reply codes of broker channel closes a step has met
        self.early_events: list[Event] = []  # events taken while waiting for another (`_close_event`)
        self.driver = make()
        self.features = self.driver.info().features
        self.numbers: dict[int, int] = {}
        self.model.open_connection("A")
        for key in (1, 2):
            self._open(key)
        self.setup_queues()

    def setup_queues(self) -> None:
        """Hook: declare the machine's queues (and what they hold at the start)."""

    def after_step(self) -> None:
        """Hook: what every step ends with (the consuming machines check the library's events)."""

    def _open(self, key: int) -> None:
        self.numbers[key] = self.driver.open_channel()
        self.model.open_channel(key, "A")

    def declare(self, logical: str, kind: str = "classic", **arguments: Any) -> None:
        """Declare a queue on channel 1 (`arguments` are x-arguments, e.g. x-max-length)."""
        self.real[logical] = f"{self.prefix}.{logical}"
        args: dict[str, Any] = {f"x-{k.replace('_', '-')}": v for k, v in arguments.items()}
        if kind != "classic":
            args["x-queue-type"] = kind
        self.driver.declare_queue(self.numbers[1], self.real[logical], durable=kind == "quorum", arguments=args)
        self.model.declare_queue(logical, kind, max_length=arguments.get("max_length"),
                                 overflow=arguments.get("overflow", "drop-head"))

    def body(self) -> bytes:
        return f"b{next(self.bodies)}".encode()

    def _sync(self, key: int, logical: str | None = None) -> outcomes.Outcome:
        """A round trip on `key`'s channel: the close it runs into, if any (module rules)."""
        queue = self.real[logical or next(iter(self.real))]
        return attempt(lambda: self.driver.declare_queue(self.numbers[key], queue, passive=True))

    def _close_event(self, key: int) -> outcomes.Outcome:
        """The broker's close of `key`'s channel as the library's event reports it (a library whose
        operations hang on a channel closed for a settle: SETTLE_CLOSE_AS_EVENT); OK when none comes
        (bounded). Other events taken meanwhile are kept for the machine (`early_events`)."""
        number = self.numbers[key]
        deadline = time.monotonic() + CLOSE_EVENT_S
        while (remaining := deadline - time.monotonic()) > 0:
            event = self.driver.next_event(remaining)
            if event is None:
                break
            if isinstance(event, ChannelClosedEvent) and event.channel == number:
                return outcomes.ChannelClosed(event.code or 0, 0, 0)
            self.early_events.append(event)
        return outcomes.OK

    def _compare(self, what: str, key: int, observed: outcomes.Outcome, expected: outcomes.Outcome,
                 rule: str = "") -> None:
        observed = self._with_sent_code(key, observed)
        note(f"{what} on channel {key}: {observed}")
        assert _scope(observed) == _scope(expected), \
            f"{what}: through the client the broker gave {observed}, the rules say {expected}" + \
            (f" ({rule})" if rule else "")
        if isinstance(observed, outcomes.ChannelClosed):
            self.closes_seen.append(observed.code)  # the library may report it as an event too
            self._open(key)
        elif isinstance(observed, outcomes.ConnectionClosed):
            raise AssertionError(f"{what}: the connection closed ({observed}); the machine cannot go on")

    def _with_sent_code(self, key: int, observed: outcomes.Outcome) -> outcomes.Outcome:
        """`observed` with the reply code the broker sent in this step, when the library hid it (0)."""
        if isinstance(observed, outcomes.ChannelClosed):
            code = self.replies.code(observed.code, ChannelClose, self.numbers[key], since=self.step_since)
        elif isinstance(observed, outcomes.ConnectionClosed):
            code = self.replies.code(observed.code, ConnectionClose, 0, since=self.step_since)
        else:
            return observed
        return dataclasses.replace(observed, code=code)

    def outstanding(self) -> list[tuple[int, int]]:
        """(channel key, delivery tag) of every delivery the model holds unacked."""
        return [(key, tag) for key in (1, 2) for tag in self.model.unacked_tags(key)]

    def settle_tag(self, key: int, how: str, tag: int, multiple: bool, requeue: bool) -> None:
        """basic.ack / nack / reject through the library, compared with the model."""
        number, held = self.numbers[key], self._held(key)
        try:
            if how == "ack":
                self.driver.ack(number, tag, multiple=multiple)
                expected = self.model.ack(key, tag, multiple)
            elif how == "nack":
                self.driver.nack(number, tag, multiple=multiple, requeue=requeue)
                expected = self.model.nack(key, tag, multiple, requeue)
            else:
                multiple = False
                self.driver.reject(number, tag, requeue=requeue)
                expected = self.model.reject(key, tag, requeue)
        except Unsupported:  # not in the library's API (py-amqp has no basic_nack): nothing was sent
            note(f"basic.{how}: not expressible through this library, step left out")
            return
        except DriverError as exc:  # a library that refuses the tag itself: the client's view
            raise AssertionError(f"basic.{how} delivery_tag={tag}: the library raised {exc!r}") from exc
        closing = not self.model.is_open(key)
        if closing:  # the broker closes the channel: what it held comes back
            self.requeued_by_close |= held
        observed = self._close_event(key) if closing and SETTLE_CLOSE_AS_EVENT in self.features else self._sync(key)
        self._compare(f"basic.{how} delivery_tag={tag} multiple={multiple} requeue={requeue}", key, observed,
                      expected)
        self.model.quiesce()

    def get_from(self, key: int, logical: str, no_ack: bool) -> GetOutcome:
        """basic.get through the library, checked against what the model allows."""
        allowed = self.model.get_outcomes(key, logical)
        got = self.driver.get(self.numbers[key], self.real[logical], no_ack=no_ack)
        observed: GetOutcome = GetEmpty() if got is None else GetOk(got.delivery_tag, got.redelivered, got.body)
        note(f"basic.get {logical} no_ack={no_ack} on channel {key}: {observed}")
        assert observed in allowed, f"basic.get {logical} through the client: broker gave {observed}, the rules " \
            f"allow {sorted(allowed, key=repr)} ({self._broken(logical, observed, allowed, got)})"
        self.model.get(key, logical, observed, no_ack=no_ack)
        return observed

    def _broken(self, logical: str, observed: GetOutcome, allowed: frozenset[GetOutcome],
                got: Delivery | None) -> str:
        """The rule a wrong basic.get answer breaks, as far as the difference shows it."""
        oks = [a for a in allowed if isinstance(a, GetOk)]
        if isinstance(observed, GetOk) and any(observed.body in self._held(k) for k in (1, 2)):
            return ("ACK-10: the message is still unacked by the rules (a nack, reject, recover or channel close "
                    "puts it back; cancelling its consumer does not)")
        if isinstance(observed, GetOk) and any(a.body == observed.body for a in oks):
            same = any(a.body == observed.body and a.delivery_tag == observed.delivery_tag for a in oks)
            return "RQ-04 redelivered flag" if same else "ACK-01 delivery tag"
        left = self.model.ready(logical) - 1  # get-ok's message-count: what the queue holds after it
        lost = got is None or (got.message_count is not None and got.message_count < left)
        if lost and any(a.body in self.requeued_by_close for a in oks):
            return "RQ-03 requeue of what a closed channel held"
        kind = self.model.state.queues[logical].kind
        return "RQ-02 quorum returns first" if kind == "quorum" else "RQ-01 classic requeue position"

    def _held(self, key: int) -> set[bytes]:
        """The bodies channel `key` holds unacked (requeued should it close, RQ-03)."""
        channel = self.model.state.channels.get(key)
        return {u.message.body for u in channel.unacked.values()} if channel is not None else set()

    def _close(self, key: int) -> None:
        """Client channel.close through the library and in the model (RQ-03)."""
        self.requeued_by_close |= self._held(key)
        self.driver.close_channel(self.numbers[key])
        self.model.close_channel(key)

    def final_check(self) -> None:
        """Close both channels (RQ-03: what was unacked comes back), then take every queue's
        messages with basic.get: each must be the one the model says, in its order."""
        for key in (1, 2):
            self._close(key)
        self.model.quiesce()
        self._open(1)
        for logical in self.real:
            while not isinstance(self.get_from(1, logical, no_ack=True), GetEmpty):
                pass

    def teardown(self) -> None:
        try:
            if not self.busy:
                self.step_since = self.replies.mark()
                self.final_check()
        finally:
            self.cleanup()
            example_ended(self.budget, self.failures, self.program, FrameLog(self.replies.recorder, self.replies.since))

    def cleanup(self) -> None:
        """Delete the machine's queues, then close: best effort, whatever state the library is in."""
        with contextlib.suppress(Exception):
            ch = self.driver.open_channel()
            for queue in self.real.values():
                self.driver.delete_queue(ch, queue)
        with contextlib.suppress(Exception):
            self.driver.close()


class ClientAckMachine(ClientMachine):
    """ACK-01, ACK-03..07, RQ-01, RQ-03, RQ-04 through a client library (module doc)."""

    def setup_queues(self) -> None:
        self.declare(QUEUE)
        self.queue = self.real[QUEUE]
        for _ in range(2):  # messages from the start: a get then a requeue shows the order (RQ-01)
            body = self.body()
            self.driver.publish(self.numbers[1], "", self.queue, body)
            self.model.publish(1, "", QUEUE, body)
        self._sync(1)

    @rule(key=KEYS)
    @client_step
    def publish(self, key: int) -> None:
        body = self.body()
        self.driver.publish(self.numbers[key], "", self.queue, body)
        self.model.publish(key, "", QUEUE, body)
        self._compare(f"basic.publish {body!r}", key, self._sync(key), outcomes.OK)
        self.model.quiesce()

    @rule(key=KEYS, no_ack=st.booleans())
    @client_step
    def get(self, key: int, no_ack: bool) -> None:
        self.get_from(key, QUEUE, no_ack)

    @rule(key=KEYS, how=HOW, tag=st.integers(0, 6), multiple=st.booleans(), requeue=st.booleans())
    @client_step
    def settle(self, key: int, how: str, tag: int, multiple: bool, requeue: bool) -> None:
        self.settle_tag(key, how, tag, multiple, requeue)  # ACK-03..06: any tag

    @rule(delivery=OUTSTANDING, how=HOW, requeue=st.booleans())
    @client_step
    def settle_outstanding(self, delivery: tuple[int, int] | None, how: str, requeue: bool) -> None:
        if delivery is not None:  # an unacked delivery (ACK-07, RQ-01, RQ-04)
            key, tag = delivery
            self.settle_tag(key, how, tag, False, requeue)

    @rule(key=KEYS)
    @client_step
    def close_channel(self, key: int) -> None:
        self._close(key)
        self._open(key)
        self._compare("channel.close and reopen", key, self._sync(key), outcomes.OK)  # RQ-03 shows at the next get
        self.model.quiesce()


def run_client_machine(machine_class: type[ClientMachine], make: Callable[[], ClientDriver], profile: str, *,
                       recorder: Recorder, examples: int, steps: int) -> None:
    """Run `machine_class` through the drivers `make` returns, whose relay records into `recorder`,
    as a Hypothesis test within the machine budget, as the raw machines run (`run_within_budget`)."""
    budget, failures = Budget(Budget.seconds_configured()), Smallest()
    machine: Callable[[Callable[[], ClientDriver], str], ClientMachine] = \
        functools.partial(machine_class, recorder=recorder, budget=budget)

    def factory() -> Any:  # its source seeds the examples: keep it (machine_support rules)
        made = machine(make, profile)
        made.failures = failures
        return made

    run_within_budget(factory, budget, failures, examples=examples, steps=steps)


def run_client_ack_machine(make: Callable[[], ClientDriver], profile: str, *, recorder: Recorder, examples: int,
                           steps: int) -> None:
    run_client_machine(ClientAckMachine, make, profile, recorder=recorder, examples=examples, steps=steps)
