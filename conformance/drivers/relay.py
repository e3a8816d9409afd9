"""The suite through client libraries records, through the codec, what a library and a broker say
to each other (verdicts reached through a client keep their frames).

Responsibility: `recording_relay(host, port, recorder)` runs the one interposer
(`conformance.interpose.relay`) on a free loopback port in a thread, bytes copied both ways
unchanged, with `RecorderSink` as its sink: each direction decoded with the codec's
`FrameReader` into `FrameRecord`s for the test's `Recorder` ("out" = client to broker, as the
raw driver records).

Rules:
- Never alter, delay on purpose or reorder a byte; decoding is a copy's side job. A stream that
  stops decoding (garbage, a frame over the reader's limit) is recorded once as raw bytes.
- The client's protocol header is not recorded (the library sent it, the raw driver records its own).
- A side that resets or closes ends that link only; `close()` ends the relay within its timeout.
- Connection ids come from the raw driver's counter, so relayed and raw connections never share one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from codec import PROTOCOL_HEADER, CodecError
from codec.reader import NEED_DATA, FrameReader
from conformance.drivers.interface import FrameRecord, Recorder
from conformance.drivers.raw import next_connection_id
from conformance.interpose.relay import (
    FORWARD_THEN_ABORT,
    IN,
    OUT,
    Interposer,
    Link,
    Plumbing,
    Relay,
    RelayThread,
)


class _DirectionDecoder:
    """One direction of one link, bytes in, `FrameRecord`s to the recorder."""

    def __init__(self, recorder: Recorder, conn: int, direction: str) -> None:
        self.recorder, self.conn, self.direction = recorder, conn, direction
        self.reader = FrameReader(frame_max=0)
        self.header = PROTOCOL_HEADER if direction == OUT else b""  # the client's, before any frame
        self.broken = False

    def feed(self, data: bytes) -> None:
        if self.header:
            taken = min(len(self.header), len(data))
            self.header, data = self.header[taken:], data[taken:]
        if self.broken or not data:
            return
        self.reader.receive_data(data)
        try:
            while (frame := self.reader.next_frame()) is not NEED_DATA:
                self.recorder.add(FrameRecord(time.monotonic(), self.conn, self.direction, frame.channel, frame))  # type: ignore[union-attr]
        except CodecError:
            self.broken = True
            self.recorder.add(FrameRecord(time.monotonic(), self.conn, self.direction, 0, data))


class RecorderSink(Interposer):
    """Every relayed link's frames, decoded, into `recorder`."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def plumb(self, link: Link) -> Plumbing:
        conn = next_connection_id()
        decoders = {d: _DirectionDecoder(self.recorder, conn, d) for d in (OUT, IN)}
        return Plumbing(FORWARD_THEN_ABORT, FORWARD_THEN_ABORT, (lambda d, data: decoders[d].feed(data),))


@contextlib.contextmanager
def recording_relay(host: str, port: int, recorder: Recorder, timeout: float = 5.0) -> Iterator[RelayThread]:
    """`with recording_relay("127.0.0.1", 5672, recorder) as relay:` a library connects to `relay.port`."""
    relay = Relay((host, port), RecorderSink(recorder), connect_timeout=timeout, close_timeout=timeout)
    with RelayThread(relay, timeout=timeout + 1, name="recording-relay") as running:
        yield running
