"""Scenarios: what the scripted broker plays at a client, and how the client's reaction is judged.

Responsibility: the `Scenario` record and its registry (`SCENARIOS`, filled by the
`scenarios_*` modules through `@scenario`), and `Play`, what a scenario function gets: the
scripted broker, the client (a `ClientDriver`), and bounded ways to wait for what the client
sends (`sent`) and what its application sees (`event`, `settle`).

Rules:
- A scenario names the catalogue rules it checks (area "client"); `ScenarioFailed` is the
  client's failure of them, `NotApplicable` says why the client cannot express the scenario
  (e.g. its publish blocks on confirms), anything else is the harness's fault (`broken`).
- The broker side is exact: the scenario acts after it has seen the client's frame or event
  it waits for, never after a delay. Every wait is bounded and names what it waited for.
- After the scenario, an exception that escaped the library's own code (a `ClientFailure`
  event) fails it, whatever the scenario checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.client_judge.broker import ScriptedBroker, ScriptedConnection
from conformance.drivers import interface as di
from conformance.results.verdicts import Verdict

SETTLE = 0.3  # seconds: how long `settle` watches for events that must not come


class ScenarioFailed(AssertionError):
    """The client did not behave as the scenario's rules require."""


class NotApplicable(Exception):
    """The client's API cannot express this scenario (the reason is the verdict's message)."""

    verdict = Verdict.NOT_APPLICABLE


@dataclass(frozen=True)
class Scenario:
    id: str
    rules: tuple[str, ...]
    title: str
    play: Callable[[Play], None]
    broker: dict[str, Any] = field(default_factory=dict)  # BrokerConfig overrides
    excludes: frozenset[str] = frozenset()  # client features that make it not applicable
    why_excluded: str = ""
    smoke: bool = False  # in the representative subset `make test` runs


SCENARIOS: dict[str, Scenario] = {}


def scenario(id: str, rules: tuple[str, ...], title: str, *, broker: dict[str, Any] | None = None,
             excludes: frozenset[str] = frozenset(), why_excluded: str = "",
             smoke: bool = False) -> Callable[[Callable[[Play], None]], Callable[[Play], None]]:
    def register(play: Callable[[Play], None]) -> Callable[[Play], None]:
        if id in SCENARIOS:
            raise ValueError(f"scenario {id!r} registered twice")
        SCENARIOS[id] = Scenario(id, rules, title, play, dict(broker or {}), excludes, why_excluded, smoke)
        return play

    return register


@dataclass
class Play:
    """One scenario being played at one client."""

    broker: ScriptedBroker
    client: di.ClientDriver
    info: di.ClientInfo
    scale: float = 1.0
    events: list[di.Event] = field(default_factory=list)  # everything the client reported
    taken: set[int] = field(default_factory=set)  # indexes of events an `event` call returned

    def t(self, seconds: float) -> float:
        return seconds * self.scale

    # -- client side --------------------------------------------------------------------------
    def connect(self, **options: Any) -> ScriptedConnection:
        self.client.connect(self.broker.url, di.ConnectOptions(**options))
        return self.broker.connection()

    def event(self, *kinds: type, timeout: float = 3.0, what: str = "",
              where: Callable[[Any], bool] = lambda e: True) -> Any:
        """The next event of these kinds (that `where` accepts); fails the scenario after `timeout`."""
        deadline = time.monotonic() + self.t(timeout)
        for index, seen in enumerate(self.events):  # one collected while waiting for another kind
            if index not in self.taken and isinstance(seen, kinds) and where(seen):
                self.taken.add(index)
                return seen
        while (remaining := deadline - time.monotonic()) > 0:
            found = self.client.next_event(remaining)
            if found is None:
                break
            self.events.append(found)
            if isinstance(found, kinds) and where(found):
                self.taken.add(len(self.events) - 1)
                return found
        names = "/".join(k.KIND for k in kinds)  # type: ignore[attr-defined]
        subject = what.removeprefix("the ") if what else f"{names} event"
        raise ScenarioFailed(f"no {subject} reached the application within {self.t(timeout):.1f} s"
                             f"{self._seen()}")

    def settle(self, duration: float = SETTLE) -> list[di.Event]:
        """Collect what the client reports during `duration` (a bounded look for what must not come)."""
        deadline = time.monotonic() + self.t(duration)
        fresh = []
        while (remaining := deadline - time.monotonic()) > 0:
            found = self.client.next_event(remaining)
            if found is None:
                break
            self.events.append(found)
            fresh.append(found)
        return fresh

    def _seen(self) -> str:
        kinds = [e.KIND for e in self.events]
        return f" (it saw: {', '.join(kinds)})" if kinds else " (it saw nothing)"

    def seen(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def alive(self, what: str) -> None:
        """The connection is still open, as the library tells it (and it reported no close)."""
        closes = [e for e in self.events if isinstance(e, di.ConnectionClosedEvent)]
        state = self.client.state()
        if closes or state.get("connection") != "open":
            detail = f": {closes[0].text}" if closes else ""
            raise ScenarioFailed(f"the connection did not survive {what}{detail}")

    # -- broker side --------------------------------------------------------------------------
    def sent(self, method_type: type, timeout: float = 3.0, *, start: int = 0,
             where: Callable[[Any], bool] = lambda m: True) -> Any:
        """The first `method_type` the client sent (from frame index `start` on)."""
        try:
            return self.broker.wait_method(method_type, self.t(timeout), start=start, where=where)
        except di.NoReply:
            name = getattr(method_type, "NAME", method_type)
            raise ScenarioFailed(f"the client sent no {name} within {self.t(timeout):.1f} s") from None

    def sent_at(self, method_type: type, timeout: float = 3.0) -> int:
        """The frame-log index just after the first `method_type` the client sent."""
        method = self.sent(method_type, timeout)
        frames = self.broker.frames
        return next(i + 1 for i, r in enumerate(frames) if r.direction == "in" and getattr(r.frame, "method", None) is method)

    def mark(self) -> int:
        """The frame log's position now (for `sent(..., start=mark)`)."""
        return len(self.broker.frames)

    def expect(self, condition: bool, message: str) -> None:
        if not condition:
            raise ScenarioFailed(message)

    def not_applicable(self, reason: str) -> None:
        raise NotApplicable(reason)


def check_no_failure(play: Play) -> None:
    """After the scenario: an exception out of the library's own code fails it."""
    play.settle(0.05)
    failures = play.seen(di.ClientFailure)
    if failures:
        f = failures[0]
        raise ScenarioFailed(f"the library raised {f.type} in its {f.where}: {f.text}")
