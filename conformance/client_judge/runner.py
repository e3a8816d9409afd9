"""Play scenarios at clients: one adapter per client, one scripted broker per scenario, a verdict each.

Responsibility: `play_scenario` (one scenario at one running client: a fresh `ScriptedBroker`,
the scenario function, the verdict and its evidence), `run_client` (every selected scenario at
one client, restarting its adapter after a hang) and `run_clients` (several clients in
parallel threads).

Rules:
- Verdicts: `passed`; `failed` for `ScenarioFailed`, for an operation the client could not
  finish within the bounded wait (a hang), and for an unexpected close or library exception
  out of an operation; `not-applicable` when the client's features exclude the scenario or it
  says so (`NotApplicable`); `broken` for anything else (the harness's fault).
- Every wait is bounded: the adapter's operations (`RemoteDriver` timeout), the scenario's
  waits, the adapter's shutdown. A client that hung or exited gets a fresh adapter before the
  next scenario. The application's close of the connection after the scenario is part of it: a
  client that hangs there was wedged by what the scenario played (a passed scenario becomes
  `failed`), and the next scenario never inherits the wedge.
- The frame log of every scenario is kept with its result; the adapter's stderr tail too.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from conformance.client_judge import scenarios  # noqa: F401  (registers the scenarios)
from conformance.client_judge.broker import ScriptedBroker
from conformance.client_judge.scenario import (
    SCENARIOS,
    NotApplicable,
    Play,
    Scenario,
    ScenarioFailed,
    check_no_failure,
)
from conformance.drivers import interface as di
from conformance.drivers.build import BuildFailed
from conformance.drivers.registry import ClientSpec, ClientUnavailable
from conformance.drivers.remote import AdapterError, ClientHung, RemoteDriver
from conformance.results.judge import observed_verdict
from conformance.results.verdicts import Verdict

OPERATION_TIMEOUT = 5.0  # seconds for one client operation, times the scale


@dataclass
class ScenarioResult:
    client: str
    client_version: str
    scenario: Scenario
    verdict: Verdict
    message: str
    started: datetime
    duration: float
    frames: list[di.FrameRecord] = field(default_factory=list)
    events: list[di.Event] = field(default_factory=list)
    stderr: str = ""
    hung: bool = False  # the adapter stopped answering (it is restarted before the next scenario)


def select(ids: Iterable[str] = (), smoke: bool = False) -> list[Scenario]:
    """The scenarios with these ids (all when none; the smoke subset with `smoke`)."""
    wanted = list(ids)
    unknown = [i for i in wanted if i not in SCENARIOS]
    if unknown:
        raise KeyError(f"unknown scenario(s): {', '.join(unknown)}; see `amqp-conformance clients --list`")
    chosen = [SCENARIOS[i] for i in wanted] if wanted else list(SCENARIOS.values())
    return [s for s in chosen if s.smoke] if smoke else chosen


def play_scenario(driver: RemoteDriver, info: di.ClientInfo, sc: Scenario, scale: float = 1.0) -> ScenarioResult:
    started, t0 = datetime.now(UTC), time.monotonic()
    if sc.excludes & info.features:
        return ScenarioResult(info.client, info.version, sc, Verdict.NOT_APPLICABLE, sc.why_excluded, started, 0.0)
    broker = ScriptedBroker(**sc.broker)
    play = Play(broker, driver, info, scale)
    stderr_mark = driver.stderr_count
    verdict, message, hung = Verdict.PASSED, "", False
    try:
        broker.start()
        sc.play(play)
        check_no_failure(play)
    except Exception as exc:  # the verdict is the kernel's (results.judge); the words are the client judge's
        hung = isinstance(exc, ClientHung)
        verdict, message = observed_verdict(exc, peer_replied=False), _outcome_text(exc)
    finally:
        closing = None if hung or driver.exited.is_set() else _close(driver)
        play.events.extend(_drain(driver))
        broker.stop()
    if closing is not None:
        hung = True
        if verdict == Verdict.PASSED:
            verdict, message = Verdict.FAILED, f"the client hung when the application closed the connection: {closing}"
    failures = play.seen(di.ClientFailure)
    if verdict == Verdict.FAILED and failures and failures[0].text not in message:
        message += f" [library: {failures[0].type}: {failures[0].text}]"
    return ScenarioResult(info.client, info.version, sc, verdict, message, started, time.monotonic() - t0,
                          broker.frames, play.events, driver.stderr_since(stderr_mark), hung)


def _outcome_text(exc: Exception) -> str:
    """What a scenario's outcome says, for people."""
    if isinstance(exc, ScenarioFailed | NotApplicable):
        return str(exc)
    if isinstance(exc, ClientHung):
        return f"the client hung: {exc}"
    if isinstance(exc, di.NoReply):  # a frame the scenario waited for never came
        return f"the client did not act: {exc}"
    if isinstance(exc, di.DriverError):
        return f"the client raised {getattr(exc, 'library_error', type(exc).__name__)}: {exc}"
    return f"harness error: {exc!r}\n{traceback.format_exc(limit=6)}"


def _close(driver: RemoteDriver) -> str | None:
    """Close the client's connection as its application would; what it hung on, if it did."""
    try:
        driver.request("close")
    except ClientHung as exc:
        return str(exc)
    except di.DriverError:
        pass  # a close that fails is the library's business; one that hangs is not
    return None


def _drain(driver: RemoteDriver) -> list[di.Event]:
    found = []
    while (event := driver.next_event(0)) is not None:
        found.append(event)
    return found


class ClientSession:
    """One client's adapter across scenarios: started on first use, restarted after a hang or exit."""

    def __init__(self, spec: ClientSpec, scale: float = 1.0) -> None:
        self.spec, self.scale = spec, scale
        self.driver: RemoteDriver | None = None
        self.start_error: str | None = None

    def play(self, sc: Scenario) -> ScenarioResult:
        if self.start_error is None and (self.driver is None or self.driver.exited.is_set()):
            try:
                self.driver = self.spec.start(OPERATION_TIMEOUT * self.scale)
            except (AdapterError, BuildFailed, ClientUnavailable) as exc:  # nor will it for the next scenarios
                self.start_error = f"the adapter did not start: {exc}"
        if self.start_error is not None or self.driver is None:
            return ScenarioResult(self.spec.name, self.spec.installed_version() or "?", sc, Verdict.BROKEN,
                                  self.start_error or "no adapter", datetime.now(UTC), 0.0)
        result = play_scenario(self.driver, self.driver.info(), sc, self.scale)
        if result.hung or self.driver.exited.is_set():
            self.stop(graceful=False)
        return result

    def stop(self, graceful: bool = True) -> None:
        if self.driver is not None:
            self.driver.stop(graceful=graceful)
            self.driver = None


def run_client(spec: ClientSpec, chosen: list[Scenario], *, scale: float = 1.0,
               on_result: Callable[[ScenarioResult], None] | None = None) -> list[ScenarioResult]:
    """Every scenario at one client, in order."""
    session = ClientSession(spec, scale)
    results: list[ScenarioResult] = []
    try:
        for sc in chosen:
            results.append(session.play(sc))
            if on_result is not None:
                on_result(results[-1])
    finally:
        session.stop()
    return results


def run_clients(specs: list[ClientSpec], chosen: list[Scenario], *, jobs: int = 2, scale: float = 1.0,
                on_result: Callable[[ScenarioResult], None] | None = None) -> dict[str, list[ScenarioResult]]:
    """Each client in its own thread (its scenarios in order); results per client name."""
    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="client") as pool:
        futures = {spec.name: pool.submit(run_client, spec, chosen, scale=scale, on_result=on_result)
                   for spec in specs}
        return {name: future.result() for name, future in futures.items()}
