"""The acknowledgement machine through a client library (issue 14): `--client pika|amqp|aio-pika`.

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
reply code only.

Rules:
- Every step ends with a round trip on the channel it used (queue.declare passive), so an
  asynchronous close (ACK-03/ACK-04) is seen at the step that caused it, and a publish has
  reached its queue before the next basic.get (RabbitMQ's queue.declare asks the queue process).
- After a broker channel close the channel is reopened (the library picks the number).
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Callable
from typing import Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from conformance.drivers.interface import (
    ChannelClosed,
    ClientDriver,
    ConnectionClosed,
    DriverError,
    Unsupported,
)
from conformance.model import BrokerModel, GetEmpty, GetOk, GetOutcome, outcomes
from conformance.suite.machine_support import machine_settings

KEYS = st.sampled_from([1, 2])
QUEUE = "q"  # the queue's name in the model
ACK_RULES = ("ACK-01", "ACK-03", "ACK-04", "ACK-05", "ACK-06", "ACK-07", "RQ-01", "RQ-03", "RQ-04")


def _scope(outcome: outcomes.Outcome) -> tuple[str, int | None]:
    """What a client can show of an outcome: its scope and reply code."""
    if isinstance(outcome, outcomes.ChannelClosed):
        return ("channel", outcome.code)
    if isinstance(outcome, outcomes.ConnectionClosed):
        return ("connection", outcome.code)
    return ("ok", None)


class ClientAckMachine(RuleBasedStateMachine):
    """ACK-01, ACK-03..07, RQ-01, RQ-03, RQ-04 through a client library (module doc)."""

    def __init__(self, make: Callable[[], ClientDriver], profile: str) -> None:
        super().__init__()
        self.model = BrokerModel(profile)
        self.bodies = itertools.count(1)
        self.queue = f"amqpc.mc.{uuid.uuid4().hex[:10]}"
        self.driver = make()
        self.numbers: dict[int, int] = {}
        self.model.open_connection("A")
        for key in (1, 2):
            self._open(key)
        self.driver.declare_queue(self.numbers[1], self.queue)
        self.model.declare_queue(QUEUE)

    def _open(self, key: int) -> None:
        self.numbers[key] = self.driver.open_channel()
        self.model.open_channel(key, "A")

    def _sync(self, key: int) -> outcomes.Outcome:
        """A round trip on `key`'s channel: the close it runs into, if any (module rules)."""
        try:
            self.driver.declare_queue(self.numbers[key], self.queue, passive=True)
        except ChannelClosed as exc:
            return outcomes.ChannelClosed(exc.code, exc.class_id, exc.method_id)
        except ConnectionClosed as exc:
            return outcomes.ConnectionClosed(exc.code, exc.class_id, exc.method_id)
        return outcomes.OK

    def _compare(self, what: str, key: int, observed: outcomes.Outcome, expected: outcomes.Outcome) -> None:
        note(f"{what} on channel {key}: {observed}")
        assert _scope(observed) == _scope(expected), \
            f"{what}: through the client the broker gave {observed}, the rules say {expected}"
        if isinstance(observed, outcomes.ChannelClosed):
            self._open(key)
        elif isinstance(observed, outcomes.ConnectionClosed):
            raise AssertionError(f"{what}: the connection closed ({observed}); the machine cannot go on")

    @rule(key=KEYS)
    def publish(self, key: int) -> None:
        body = f"b{next(self.bodies)}".encode()
        self.driver.publish(self.numbers[key], "", self.queue, body)
        self.model.publish(key, "", QUEUE, body)
        self._compare(f"basic.publish {body!r}", key, self._sync(key), outcomes.OK)
        self.model.quiesce()

    @rule(key=KEYS, no_ack=st.booleans())
    def get(self, key: int, no_ack: bool) -> None:
        allowed = self.model.get_outcomes(key, QUEUE)
        observed: GetOutcome
        got = self.driver.get(self.numbers[key], self.queue, no_ack=no_ack)
        observed = GetEmpty() if got is None else GetOk(got.delivery_tag, got.redelivered, got.body)
        note(f"basic.get no_ack={no_ack} on channel {key}: {observed}")
        assert observed in allowed, f"basic.get through the client: broker gave {observed}, the rules allow " \
            f"{sorted(allowed, key=repr)} (ACK-01 tag, RQ-01 order, RQ-04 redelivered)"
        self.model.get(key, QUEUE, observed, no_ack=no_ack)

    @rule(key=KEYS, how=st.sampled_from(["ack", "nack", "reject"]), tag=st.integers(0, 6),
          multiple=st.booleans(), requeue=st.booleans())
    def settle(self, key: int, how: str, tag: int, multiple: bool, requeue: bool) -> None:
        number = self.numbers[key]
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
        self._compare(f"basic.{how} delivery_tag={tag} multiple={multiple} requeue={requeue}", key,
                      self._sync(key), expected)
        self.model.quiesce()

    @rule(key=KEYS)
    def close_channel(self, key: int) -> None:
        self.driver.close_channel(self.numbers[key])
        self.model.close_channel(key)
        self._open(key)
        self._compare("channel.close and reopen", key, self._sync(key), outcomes.OK)  # RQ-03 shows at the next get
        self.model.quiesce()

    def teardown(self) -> None:
        with contextlib.suppress(DriverError, OSError):
            self.driver.delete_queue(self.driver.open_channel(), self.queue)
        with contextlib.suppress(DriverError, OSError):
            self.driver.close()


def run_client_ack_machine(make: Callable[[], ClientDriver], profile: str, *, examples: int, steps: int) -> None:
    def factory() -> Any:
        return ClientAckMachine(make, profile)

    run_state_machine_as_test(factory, settings=machine_settings(examples, steps))  # type: ignore[arg-type]
