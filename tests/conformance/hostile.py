"""HostileProxy: the relay (`conformance.interpose`) in front of a broker, misbehaving on demand (part 6).

Responsibility: stand between the harness and a real broker (an `EmbeddedBroker`) and make
the broker look wedged, dead, broken or wrong, so tests can show that the harness still ends
every test with a clear verdict and the run with the right exit status.

Rules:
- Each accepted connection (a link, numbered from 1; its `Hostility`) is forwarded to `upstream`
  under a `Plan`. What the client sends is forwarded untouched (and parsed with the codec, to see
  requests); what the broker sends is cut into frames, so a plan can act on one frame.
- Modes: PASS forwards; BLACKHOLE keeps both sockets open and drops everything, both ways;
  CLOSE resets the client's socket (RST) and closes the broker's; GARBAGE sends bytes that
  are no AMQP frame instead of the broker's frame, then nothing; WRONG_METHOD replaces every
  broker method that `rewrite` maps with that valid-but-wrong method (encoded by the codec),
  e.g. queue.declare-ok -> exchange.declare-ok; DELAY holds every broker frame `delay` s.
- When: a plan acts once it is triggered (the client sent a method `on_request` accepts; no
  `on_request`: from the start) and the broker has sent `after_frames` more frames. With
  `wedge=True`, the first time it acts on one link it applies to every open and every new
  link: the broker as a whole stops answering.
- Choice: `plan` is one plan for every link, several (each link takes the first whose
  `on_request` fires: one run, a different hostility per suite test), or a function of the
  link's number giving either; `switch(plan)` changes it at runtime, for new links and
  (unless `existing=False`) open ones.
- `actions` records what the proxy did (link number, mode, text); `wait_for_action` waits
  for one, bounded. Every wait here is bounded; `close()` ends everything within seconds.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from codec import (
    NEED_DATA,
    CodecError,
    ExchangeDeclareOk,
    FrameReader,
    Method,
    MethodFrame,
    QueueDeclare,
    QueueDeclareOk,
    encode_method,
)
from conformance.interpose.frames import Frame
from conformance.interpose.relay import (
    IN,
    OUT,
    Framed,
    Interposer,
    Link,
    Plumbing,
    Relay,
    RelayThread,
    Transform,
)

GARBAGE = b"\x01\x00\x01\x00\x00\x00\x02\xde\xad\xff"  # a method frame too short for its ids, bad end octet


class Mode(enum.StrEnum):
    PASS = "pass"
    BLACKHOLE = "blackhole"
    CLOSE = "close"
    GARBAGE = "garbage"
    WRONG_METHOD = "wrong-method"
    DELAY = "delay"


def declare_ok_as_exchange_declare_ok(method: Method) -> Method | None:
    """The default rewrite: a queue.declare-ok becomes an exchange.declare-ok."""
    return ExchangeDeclareOk() if isinstance(method, QueueDeclareOk) else None


def declares_queue(prefix: str = "amqpc.") -> Callable[[Method], bool]:
    """A trigger: the client declares a queue named with `prefix` (the suite's names; the
    harness's health probe uses "amqpc-health.", so it is never the one triggering)."""
    return lambda m: isinstance(m, QueueDeclare) and m.queue.startswith(prefix)


@dataclass(frozen=True)
class Plan:
    mode: Mode = Mode.PASS
    on_request: Callable[[Method], bool] | None = None
    after_frames: int = 0
    wedge: bool = False
    delay: float = 0.0
    rewrite: Callable[[Method], Method | None] = declare_ok_as_exchange_declare_ok
    garbage: bytes = GARBAGE


PASS = Plan()
Plans = Plan | Sequence[Plan]


@dataclass(frozen=True)
class Action:
    link: int
    mode: str
    text: str


@dataclass
class Hostility:
    """One proxied connection (its relay `link`) and where its plan stands."""

    link: Link
    plan: Plan
    triggered: bool = False
    candidates: tuple[Plan, ...] = ()  # several plans: the first whose on_request fires wins
    passed: int = 0  # broker frames forwarded since the trigger
    silent: bool = False  # blackholed: nothing more either way
    requests: FrameReader = field(default_factory=lambda: FrameReader(frame_max=0, expect_protocol_header=True))
    parse_requests: bool = True

    @property
    def number(self) -> int:
        return self.link.number

    def set_plan(self, plans: Plans) -> None:
        several = tuple(plans) if not isinstance(plans, Plan) else ()
        if any(p.on_request is None for p in several) and len(several) > 1:
            raise ValueError("each of several plans needs an on_request trigger")
        plan = plans if isinstance(plans, Plan) else several[0] if len(several) == 1 else PASS
        self.plan, self.candidates, self.passed = plan, several if len(several) > 1 else (), 0
        self.triggered = plan.on_request is None and not self.candidates

    def trigger_on(self, method: Method) -> bool:
        """Does `method` from the client trigger a plan (which becomes the link's)?"""
        for plan in self.candidates or (self.plan,):
            if plan.on_request is not None and plan.on_request(method):
                self.plan, self.candidates, self.triggered = plan, (), True
                return True
        return False

    @property
    def acting(self) -> bool:
        return self.triggered and self.plan.mode is not Mode.PASS and self.passed >= self.plan.after_frames


class HostileProxy(Interposer, RelayThread):
    """`with HostileProxy(("127.0.0.1", port), Plan(Mode.BLACKHOLE)) as proxy: proxy.url`."""

    def __init__(self, upstream: tuple[str, int], plan: Plans | Callable[[int], Plans] = PASS) -> None:
        self._plan = plan
        self._wedge: Plan | None = None
        self.links: list[Hostility] = []
        self.actions: list[Action] = []
        self._acted = threading.Condition()
        RelayThread.__init__(self, Relay(upstream, self, close_timeout=2), name="hostile-proxy")

    def switch(self, plan: Plans, *, existing: bool = True) -> None:
        """From now on, `plan` for new links and, unless `existing=False`, the open ones."""
        async def apply() -> None:
            self._plan = plan
            for hostility in self.links if existing else ():
                hostility.set_plan(plan)

        self.call(apply())

    def wait_for_action(self, timeout: float, count: int = 1) -> list[Action]:
        """The actions so far, once there are at least `count` (or the timeout passed)."""
        with self._acted:
            self._acted.wait_for(lambda: len(self.actions) >= count, timeout)
            return list(self.actions)

    # -- on the relay's loop -----------------------------------------------------------------
    def plumb(self, link: Link) -> Plumbing:
        hostility = Hostility(link, PASS)
        if self._wedge is not None:
            hostility.set_plan(self._wedge)
            hostility.passed = self._wedge.after_frames
        else:
            hostility.set_plan(self._plan(link.number) if callable(self._plan) else self._plan)
        self.links.append(hostility)
        return Plumbing(_FromClient(self, hostility), _FromBroker(self, hostility))

    def watch_requests(self, hostility: Hostility, data: bytes) -> None:
        if not hostility.parse_requests or hostility.triggered:
            return
        hostility.requests.receive_data(data)
        try:
            while (frame := hostility.requests.next_frame()) is not NEED_DATA:
                if isinstance(frame, MethodFrame) and hostility.trigger_on(frame.method):
                    self._record(hostility, f"triggered by {frame.method.NAME} on channel {frame.channel}")
                    return
        except CodecError:
            hostility.parse_requests = False  # malformed on purpose (a framing test): stop looking

    def on_broker_frame(self, hostility: Hostility, frame: Frame) -> None:
        if hostility.silent:
            return
        link = hostility.link
        if not hostility.acting:
            hostility.passed += hostility.triggered
            link.to_client(frame.raw)
            return
        plan = hostility.plan
        if plan.wedge and self._wedge is None:
            self._spread(plan)
        if plan.mode is Mode.BLACKHOLE:
            hostility.silent = True
            self._record(hostility, f"blackholed from {frame.describe()}")
        elif plan.mode is Mode.CLOSE:
            hostility.silent = True
            link.reset_client()
            link.abort(OUT)
            self._record(hostility, f"reset the connection instead of sending {frame.describe()}")
        elif plan.mode is Mode.GARBAGE:
            hostility.silent = True
            link.to_client(plan.garbage)
            self._record(hostility, f"sent {len(plan.garbage)} garbage octets instead of {frame.describe()}")
        elif plan.mode is Mode.WRONG_METHOD:
            link.to_client(self._rewritten(hostility, frame))
        elif plan.mode is Mode.DELAY:
            link.send_later(plan.delay, IN, frame.raw)
            self._record(hostility, f"delayed {frame.describe()} by {plan.delay:g} s")

    def _rewritten(self, hostility: Hostility, frame: Frame) -> bytes:
        method = frame.method
        replacement = hostility.plan.rewrite(method) if method is not None else None
        if replacement is None or method is None:
            return frame.raw
        self._record(hostility, f"sent {replacement.NAME} instead of {method.NAME} on channel {frame.channel}")
        return encode_method(frame.channel, replacement)

    def _spread(self, plan: Plan) -> None:
        """wedge=True: every link, open or new, now acts on this plan at once."""
        self._wedge = replace(plan, on_request=None)
        for other in self.links:
            other.set_plan(self._wedge)
            other.passed = plan.after_frames

    def _record(self, hostility: Hostility, text: str) -> None:
        with self._acted:
            self.actions.append(Action(hostility.number, hostility.plan.mode.value, text))
            self._acted.notify_all()


class _FromClient(Transform):
    """Requests are forwarded untouched (unless silenced) and watched for the plan's trigger."""

    def __init__(self, proxy: HostileProxy, hostility: Hostility) -> None:
        super().__init__(half_close=False)
        self.proxy, self.hostility = proxy, hostility

    def received(self, link: Link, direction: str, data: bytes) -> None:
        if not self.hostility.silent:
            self.proxy.watch_requests(self.hostility, data)
            link.to_broker(data)

    def ended(self, link: Link, direction: str) -> None:
        if not self.hostility.silent:
            link.abort(OUT)


class _FromBroker(Framed):
    """Replies are cut into frames, each acted on by the plan (`HostileProxy.on_broker_frame`)."""

    def __init__(self, proxy: HostileProxy, hostility: Hostility) -> None:
        super().__init__(lambda frame: proxy.on_broker_frame(hostility, frame))
        self.hostility = hostility

    def ended(self, link: Link, direction: str) -> None:
        if not self.hostility.silent:
            link.abort(IN)
