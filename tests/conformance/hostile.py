"""HostileProxy: a TCP proxy in front of a broker that misbehaves on demand (issue 9, part 6).

Responsibility: stand between the harness and a real broker (an `EmbeddedBroker`) and make
the broker look wedged, dead, broken or wrong, so tests can show that the harness still ends
every test with a clear verdict and the run with the right exit status.

Rules:
- Each accepted connection (a `Link`, numbered from 1) is forwarded to `upstream` under a
  `Plan`. What the client sends is forwarded untouched (and parsed with the codec, to see
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

import asyncio
import contextlib
import enum
import socket
import struct
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

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

T = TypeVar("T")
_HEADER = struct.Struct(">BHI")  # frame type, channel, payload size (0-9-1 §4.2.3)
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
class Link:
    """One proxied connection and where its plan stands."""

    number: int
    plan: Plan
    client: asyncio.StreamWriter
    broker: asyncio.StreamWriter
    triggered: bool = False
    candidates: tuple[Plan, ...] = ()  # several plans: the first whose on_request fires wins
    passed: int = 0  # broker frames forwarded since the trigger
    silent: bool = False  # blackholed: nothing more either way
    requests: FrameReader = field(default_factory=lambda: FrameReader(frame_max=0, expect_protocol_header=True))
    parse_requests: bool = True
    replies: bytes = b""

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


class HostileProxy:
    """`with HostileProxy(("127.0.0.1", port), Plan(Mode.BLACKHOLE)) as proxy: proxy.url`."""

    def __init__(self, upstream: tuple[str, int], plan: Plans | Callable[[int], Plans] = PASS) -> None:
        self.upstream = upstream
        self._plan = plan
        self._wedge: Plan | None = None
        self.links: list[Link] = []
        self.actions: list[Action] = []
        self._acted = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hostile-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def start(self) -> HostileProxy:
        self._thread.start()
        server = self._call(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self._server, self.port = server, server.sockets[0].getsockname()[1]
        return self

    def switch(self, plan: Plans, *, existing: bool = True) -> None:
        """From now on, `plan` for new links and, unless `existing=False`, the open ones."""
        async def apply() -> None:
            self._plan = plan
            for link in self.links if existing else ():
                link.set_plan(plan)

        self._call(apply())

    def wait_for_action(self, timeout: float, count: int = 1) -> list[Action]:
        """The actions so far, once there are at least `count` (or the timeout passed)."""
        with self._acted:
            self._acted.wait_for(lambda: len(self.actions) >= count, timeout)
            return list(self.actions)

    def close(self) -> None:
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for link in self.links:
                link.client.transport.abort()
                link.broker.transport.abort()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=2)

        with contextlib.suppress(Exception):
            self._call(stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> HostileProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro: Coroutine[object, object, T], timeout: float = 5.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # -- on the proxy's loop ---------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.upstream), 5)
        except (OSError, TimeoutError):
            writer.transport.abort()
            return
        link = Link(len(self.links) + 1, PASS, writer, up_writer)
        if self._wedge is not None:
            link.set_plan(self._wedge)
            link.passed = self._wedge.after_frames
        else:
            link.set_plan(self._plan(link.number) if callable(self._plan) else self._plan)
        self.links.append(link)
        await asyncio.gather(self._from_client(link, reader), self._from_broker(link, up_reader))

    async def _from_client(self, link: Link, reader: asyncio.StreamReader) -> None:
        while data := await _read(reader):
            if link.silent:
                continue
            self._watch_requests(link, data)
            link.broker.write(data)
        if not link.silent:
            link.broker.transport.abort()

    def _watch_requests(self, link: Link, data: bytes) -> None:
        if not link.parse_requests or link.triggered:
            return
        link.requests.receive_data(data)
        try:
            while (frame := link.requests.next_frame()) is not NEED_DATA:
                if isinstance(frame, MethodFrame) and link.trigger_on(frame.method):
                    self._record(link, f"triggered by {frame.method.NAME} on channel {frame.channel}")
                    return
        except CodecError:
            link.parse_requests = False  # malformed on purpose (a framing test): stop looking

    async def _from_broker(self, link: Link, reader: asyncio.StreamReader) -> None:
        while data := await _read(reader):
            link.replies += data
            for frame in _split(link):
                self._on_broker_frame(link, frame)
        if not link.silent:
            link.client.transport.abort()

    def _on_broker_frame(self, link: Link, frame: bytes) -> None:
        if link.silent:
            return
        if not link.acting:
            link.passed += link.triggered
            link.client.write(frame)
            return
        plan = link.plan
        if plan.wedge and self._wedge is None:
            self._spread(plan)
        if plan.mode is Mode.BLACKHOLE:
            link.silent = True
            self._record(link, f"blackholed from {_describe(frame)}")
        elif plan.mode is Mode.CLOSE:
            link.silent = True
            _reset(link.client)
            link.broker.transport.abort()
            self._record(link, f"reset the connection instead of sending {_describe(frame)}")
        elif plan.mode is Mode.GARBAGE:
            link.silent = True
            link.client.write(plan.garbage)
            self._record(link, f"sent {len(plan.garbage)} garbage octets instead of {_describe(frame)}")
        elif plan.mode is Mode.WRONG_METHOD:
            link.client.write(self._rewritten(link, frame))
        elif plan.mode is Mode.DELAY:
            self._loop.call_later(plan.delay, _write_if_open, link.client, frame)
            self._record(link, f"delayed {_describe(frame)} by {plan.delay:g} s")

    def _rewritten(self, link: Link, frame: bytes) -> bytes:
        decoded = _decode(frame)
        replacement = link.plan.rewrite(decoded.method) if isinstance(decoded, MethodFrame) else None
        if replacement is None or not isinstance(decoded, MethodFrame):
            return frame
        self._record(link, f"sent {replacement.NAME} instead of {decoded.method.NAME} on channel {decoded.channel}")
        return encode_method(decoded.channel, replacement)

    def _spread(self, plan: Plan) -> None:
        """wedge=True: every link, open or new, now acts on this plan at once."""
        self._wedge = replace(plan, on_request=None)
        for other in self.links:
            other.set_plan(self._wedge)
            other.passed = plan.after_frames

    def _record(self, link: Link, text: str) -> None:
        with self._acted:
            self.actions.append(Action(link.number, link.plan.mode.value, text))
            self._acted.notify_all()


async def _read(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.read(65536)
    except OSError:
        return b""


def _split(link: Link) -> list[bytes]:
    """Whole frames (and a version-refusal protocol header) off the front of `link.replies`."""
    frames, buf = [], link.replies
    while True:
        if buf.startswith(b"AMQP") and len(buf) >= 8:
            frames.append(buf[:8])
            buf = buf[8:]
            continue
        if len(buf) < _HEADER.size:
            break
        end = _HEADER.size + _HEADER.unpack_from(buf)[2] + 1
        if len(buf) < end:
            break
        frames.append(buf[:end])
        buf = buf[end:]
    link.replies = buf
    return frames


def _decode(frame: bytes) -> object:
    reader = FrameReader(frame_max=0)
    reader.receive_data(frame)
    try:
        return reader.next_frame()
    except CodecError:
        return None


def _describe(frame: bytes) -> str:
    decoded = _decode(frame)
    if isinstance(decoded, MethodFrame):
        return f"{decoded.method.NAME} on channel {decoded.channel}"
    return f"a frame of type {frame[0]}" if frame else "nothing"


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0): an abrupt end, not a FIN after the data."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _write_if_open(writer: asyncio.StreamWriter, data: bytes) -> None:
    if not writer.transport.is_closing():
        writer.write(data)
