"""LibraryDriver: what the client-library drivers share (events, confirm bookkeeping, versions).

Responsibility: the common half of a `ClientDriver` over a Python client library: the event
queue and `next_event` (which runs the library's I/O through `pump`), publish sequence numbers
and the expansion of a broker's multiple confirm into one `Confirmed` per publish, the
library's version, and property conversion for libraries that name `message_type` "type".

Rules: an exception that escapes the library while it runs its I/O and is not a close is a
`ClientFailure` event, never raised to the caller; `pump` never blocks past its timeout.
"""

from __future__ import annotations

import platform
import time
from collections import deque
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar

from codec import BasicProperties
from conformance.drivers import interface as di

# basic property name in the codec -> the name most Python libraries use
_LIBRARY_NAMES = {"message_type": "type"}


def library_version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def to_library(props: BasicProperties) -> dict[str, Any]:
    """Keyword arguments for a library's properties class (pika, py-amqp, kombu, aio-pika)."""
    return {_LIBRARY_NAMES.get(k, k): v for k, v in di.present(props).items() if k != "cluster_id"}


def from_library(get: Any) -> BasicProperties:
    """codec properties from a library's object or mapping (`get(name)` or attributes)."""
    values = {}
    for name in BasicProperties._fields:
        key = _LIBRARY_NAMES.get(name, name)
        value = get.get(key) if isinstance(get, dict) else getattr(get, key, None)
        if name == "timestamp" and value is not None and hasattr(value, "timestamp"):  # a datetime (aio-pika)
            value = int(value.timestamp())
        if name == "cluster_id" and value == "":  # pamqp (aiormq, aio-pika) shows an absent one as ""
            value = None
        values[name] = plain(value)
    return BasicProperties(**values)


def plain(value: Any) -> Any:
    """A header value as plain Python (bytearray, memoryview and library decimals flattened)."""
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


class LibraryDriver:
    """Base of the Python client-library drivers."""

    client: ClassVar[str] = ""
    distribution: ClassVar[str] = ""
    api: ClassVar[str] = ""
    features: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self.events: deque[di.Event] = deque()
        self.published: dict[int, int] = {}  # channel -> publishes since confirm.select
        self.outstanding: dict[int, list[int]] = {}  # channel -> seqs not confirmed yet
        self.failures: set[tuple[str, str, str]] = set()

    def info(self) -> di.ClientInfo:
        runtime = f"{platform.python_implementation()} {platform.python_version()}"
        return di.ClientInfo(self.client, library_version(self.distribution), "python", runtime, self.api,
                             self.features)

    # -- events ---------------------------------------------------------------------------------
    def emit(self, event: di.Event) -> None:
        self.events.append(event)

    def failure(self, exc: BaseException, where: str) -> None:
        """Report an exception out of the library once (a loop that keeps raising it reports it once)."""
        key = (type(exc).__name__, str(exc)[:2000], where)
        if key not in self.failures:
            self.failures.add(key)
            self.emit(di.ClientFailure(*key))

    def next_event(self, timeout: float) -> di.Event | None:
        deadline = time.monotonic() + timeout
        while not self.events:
            remaining = deadline - time.monotonic()
            try:
                self.pump(max(remaining, 0.0))
            except Exception as exc:  # the library's own code failed while running its I/O
                self.failure(exc, "I/O loop")
            if remaining <= 0:
                break
        return self.events.popleft() if self.events else None

    def pump(self, timeout: float) -> None:
        """Run the library's I/O for up to `timeout` seconds (callbacks fire here)."""
        time.sleep(timeout)

    # -- confirms -------------------------------------------------------------------------------
    def confirm_mode(self, channel: int) -> None:
        self.published[channel] = 0
        self.outstanding[channel] = []

    def next_seq(self, channel: int) -> int | None:
        """The publish's seq in confirm mode (None outside it)."""
        if channel not in self.published:
            return None
        self.published[channel] += 1
        self.outstanding[channel].append(self.published[channel])
        return self.published[channel]

    def confirmed(self, channel: int, tag: int, multiple: bool, ack: bool, shows_multiple: bool = True) -> None:
        """The library reported a broker confirm: one event per publish it covers."""
        waiting = self.outstanding.get(channel, [])
        covered = [s for s in waiting if s <= tag] if multiple else [s for s in waiting if s == tag]
        if not covered and tag == 0 and multiple:
            covered = list(waiting)
        for seq in covered:
            waiting.remove(seq)
            self.emit(di.Confirmed(channel, seq, ack, multiple if shows_multiple else None))
        if not covered:
            self.emit(di.ClientFailure("UnknownConfirm", f"confirm of tag {tag} (multiple={multiple}) matches no "
                                       "publish", "confirm callback"))

    def confirmed_seqs(self, channel: int, seqs: Iterable[int], ack: bool) -> None:
        for seq in seqs:
            if seq in self.outstanding.get(channel, []):
                self.outstanding[channel].remove(seq)
            self.emit(di.Confirmed(channel, seq, ack, None))
