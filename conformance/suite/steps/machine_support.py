"""Support pieces of the model-vs-broker machines: target, settings, client, picks, teardown.

Responsibility: what the machines (machine_base and the test_machine_* files) need around
Hypothesis and the raw driver, kept apart so machine_base holds only the run loop.
Rules:
- `AMQPC_MACHINE_EXAMPLES` overrides every machine's example count (deeper runs); deadlines
  are off (a broker's latency is not the code under test). The search is derandomized and
  keeps no example database: the same broker gets the same examples, so a verdict does not
  depend on luck or on files an earlier run (against another broker) left behind.
- Every wait is scaled by the target's timeout scale (`MachineTarget.timeout`).
- Broker closes become model outcomes (`to_outcome`): scope, code, class and method id.
- Data generation never depends on the broker: a value taken from the machine's state is
  drawn as a plain index (`from_machine` -> `Pick`) and resolved against the model when the
  step runs, so every replay of a choice sequence draws the same shapes (no
  FlakyStrategyDefinition, whatever the broker answered).
- The derandomized seed is Hypothesis's digest of the machine factory's source (the
  `factory` closures of `run_machine` and `run_client_machine`): changing a line of one
  changes every example its machines run, and the fault tests are proven on those examples.
  Keep those few lines as they are. A machine split into shards that run side by side (the
  topology machine's three) seeds each shard by its number instead (`hypothesis.seed`, which wins
  over `derandomize`): the same examples on every run, different ones in each shard.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from codec import ExchangeDeleteOk, QueueDeleteOk
from conformance.drivers.raw import ChannelClosed as WireChannelClosed
from conformance.drivers.raw import ConnectionClosed as WireConnectionClosed
from conformance.drivers.raw import DriverError, RawClient
from conformance.model import ChannelClosed, ConnectionClosed, Outcome, wording

ENV_EXAMPLES = "AMQPC_MACHINE_EXAMPLES"
ENV_SHRINK = "AMQPC_MACHINE_SHRINK"
PICKS = 8  # an index into what the machine holds at that step: 0..PICKS-1, wrapping


@dataclass(frozen=True)
class MachineTarget:
    """Where and how a machine runs: broker URL, profile name, timeout scale, and whether the broker
    is RabbitMQ (its base profile), not another broker judged by a RabbitMQ profile for the
    extensions it claims."""

    url: str
    profile: str
    timeout_scale: float = 1.0
    rabbitmq_base: bool = True

    def timeout(self, seconds: float) -> float:
        return seconds * self.timeout_scale


def machine_settings(examples: int, steps: int) -> settings:
    count = int(os.environ.get(ENV_EXAMPLES, "0") or 0) or examples
    phases: tuple[Phase, ...] = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)  # no explain
    if os.environ.get(ENV_SHRINK) == "0":  # a kill matters, not its minimal form
        phases = (Phase.explicit, Phase.reuse, Phase.generate)
    return settings(max_examples=count, stateful_step_count=steps, deadline=None, derandomize=True, report_multiple_bugs=False,
                    database=None, suppress_health_check=list(HealthCheck), phases=phases)


@dataclass(frozen=True)
class Pick:
    """A value taken from the machine's state at the step: `index` into what `choices` lists
    then, counted from the end (wrapping), or None when it lists nothing. From the end, because
    Hypothesis favours small indices and the newest item (the highest delivery tag, the latest
    consumer) is the one whose handling shows most: a multiple ack of the newest tag covers
    every older one."""

    index: int
    choices: Callable[[Any], list[Any] | tuple[Any, ...]]

    def resolve(self, machine: Any) -> Any:
        items = list(self.choices(machine))
        return items[-1 - self.index % len(items)] if items else None

    def __repr__(self) -> str:
        return f"pick({self.index})"


def from_machine(choices: Callable[[Any], list[Any] | tuple[Any, ...]]) -> st.SearchStrategy[Pick]:
    """A value from the running machine's state, drawn as a plain index (see the module rules):
    rules given None do nothing, which shrinks better than preconditions."""
    return st.integers(0, PICKS - 1).map(lambda index: Pick(index, choices))


def to_outcome(exc: DriverError) -> Outcome:
    if isinstance(exc, WireChannelClosed):
        return ChannelClosed(exc.code, exc.class_id, exc.method_id)
    if isinstance(exc, WireConnectionClosed):
        return ConnectionClosed(exc.code, exc.class_id, exc.method_id)
    raise exc




class MachineClient(RawClient):
    """RawClient plus one non-blocking read, for waiting on several connections at once, and the
    channels it published on since a settle last pinged them (`published`: machine_settle)."""

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.published: set[int] = set()

    def send(self, channel: int, method: Any, properties: Any = None, body: bytes = b"") -> None:
        super().send(channel, method, properties, body)
        if method.HAS_CONTENT:
            self.published.add(channel)

    def connect(self) -> MachineClient:
        super().connect()
        return self

    def read_available(self) -> None:
        """Read what the socket holds now (the caller saw it readable) into the inboxes."""
        self._read(0.001)


def count_meaning(missing: int, failed_over: int, settle_rules: str) -> str:
    """What a queue's count mismatch means: CLU-05 when the missing messages can be the deliveries
    that were unacked across a failover and returned since (the broker dropped them), else the
    machine's settlement rules."""
    if 0 < missing <= failed_over:
        return (f"({missing} missing, and {failed_over} of the model's were unacked "
                "deliveries when a node stop moved the queue's leader, returned since: CLU-05 keeps them "
                "checked out across the failover, so they come back)")
    return wording.settled_differs(settle_rules)


def delete_after_close(deletes: list[Any], url: str, timeout: float) -> None:
    """An example's teardown, once every connection of the example has closed (no consumer of theirs
    is left on what is deleted: GarageMQ deadlocks on the queue.delete of a queue with a consumer,
    docs/garagemq.md): its queue and exchange deletes on a connection of its own, one channel."""
    if deletes:
        with contextlib.suppress(DriverError, OSError), RawClient(url, timeout=timeout) as c:
            _delete_each(c, c.channel(), deletes)


def _delete_each(client: RawClient, number: int, deletes: list[Any]) -> None:
    """Each delete in turn, one channel; a channel error (an exclusive queue whose closed owner the
    broker has not yet cleared: 405) skips that delete on a new channel; a connection error ends it."""
    for method in deletes:
        try:
            client.rpc(number, method, QueueDeleteOk, ExchangeDeleteOk)
        except WireChannelClosed:
            number = client.channel()
