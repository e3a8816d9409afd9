"""The replies a broker sent a client library, read from the frames the relay recorded.

Responsibility: `RecordedReplies`, for checks through a client library (test_through_clients,
the client machines): the reply code of a channel.close, connection.close or basic.return the
broker sent on the library's connection, read from what the `RecordingRelay` recorded, so a
check asserts the exact code even where the library does not show it (aio-pika's basic.return,
a close reported without its code). A missing code is never accepted as a pass.

Rules:
- The library's connection is the first one whose connection.start-ok was recorded after the
  reader was made: make the reader, then the driver (each check, each machine example).
- A code the library shows is the one asserted (`code`); the frames are read only when it hides
  it: None, or 0 (no AMQP reply code is 0).
- The relay records a frame just after it forwards it, so the library may report a frame before
  it is recorded: a read waits for it, bounded by the reader's timeout.
- The broker's frames are assembled into commands with the codec's `ContentAssembler` (a
  return's body tells it from the others); a stream the relay could not decode ends the read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from codec import CodecError, Command, ConnectionStartOk, ContentAssembler, Method
from codec.frames import MethodFrame
from conformance.drivers.interface import Recorder

POLL_S = 0.005  # between two looks at the recorder while a frame is not recorded yet


class RecordedReplies:
    """What the broker sent on the library's connection (module rules)."""

    def __init__(self, recorder: Recorder, timeout: float) -> None:
        self.recorder, self.timeout = recorder, timeout
        self.since = len(recorder.frames)
        self._connection: int | None = None

    def mark(self) -> int:
        """The current end of the recording: pass it as `since` to read only what comes after."""
        return len(self.recorder.frames)

    def connection(self) -> int | None:
        """The library's connection id in the recording, once its connection.start-ok is there."""
        if self._connection is None:
            for record in self.recorder.frames[self.since:]:
                if record.direction == "out" and isinstance(record.frame, MethodFrame) \
                        and isinstance(record.frame.method, ConnectionStartOk):
                    self._connection = record.connection
                    break
        return self._connection

    def sent(self, kind: type[Method], channel: int, since: int = 0) -> list[Command]:
        """The broker's `kind` commands on `channel` of the library's connection, recorded at or
        after index `since`, oldest first."""
        conn = self.connection()
        assembler, found = ContentAssembler(), []
        for index, record in enumerate(self.recorder.frames[self.since:], self.since):
            if record.connection != conn or record.direction != "in":
                continue
            if isinstance(record.frame, bytes):
                break  # the relay stopped decoding this stream
            try:
                command = assembler.feed(record.frame)
            except CodecError:
                break
            if isinstance(command, Command) and index >= since and command.channel == channel \
                    and isinstance(command.method, kind):
                found.append(command)
        return found

    def wait_for(self, kind: type[Method], channel: int, matching: Callable[[Command], bool] = lambda _c: True,
                 since: int = 0) -> Command | None:
        """The last matching `kind` the broker sent on `channel`, waiting for it (bounded)."""
        deadline = time.monotonic() + self.timeout
        while True:
            found = [c for c in self.sent(kind, channel, since) if matching(c)]
            if found or time.monotonic() >= deadline:
                return found[-1] if found else None
            time.sleep(POLL_S)

    def code(self, shown: int | None, kind: type[Method], channel: int, *,
             matching: Callable[[Command], bool] = lambda _c: True, since: int = 0) -> int:
        """`shown` when the library showed a reply code, else the one the broker sent in the last
        matching `kind` on `channel` (an AssertionError when it sent none)."""
        if shown:
            return shown
        command = self.wait_for(kind, channel, matching, since)
        assert command is not None, (f"the library showed no reply code, and the broker sent no {kind.NAME} "
                                     f"on channel {channel} (the recorded frames of its connection)")
        method: Any = command.method  # a ChannelClose, ConnectionClose or BasicReturn: each has reply_code
        return int(method.reply_code)
