"""RecordingRelay: a byte-exact TCP relay that records, through the codec, what a client library
and a broker say to each other (issue 14: verdicts reached through a client keep their frames).

Responsibility: listen on a free loopback port, connect each accepted socket to the broker,
copy bytes both ways unchanged, and decode each direction with the codec's `FrameReader` into
`FrameRecord`s for the test's `Recorder` ("out" = client to broker, as the raw driver records).

Rules:
- Never alter, delay on purpose or reorder a byte; decoding is a copy's side job. A stream that
  stops decoding (garbage, a frame over the reader's limit) is recorded once as raw bytes and
  relayed on unchanged.
- One thread runs every connection (selectors); `close()` ends it within its timeout. A side
  that resets or closes ends that pair only.
- Connection ids come from the raw driver's counter, so relayed and raw connections never share one.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field

from codec import CodecError
from codec.reader import NEED_DATA, FrameReader
from conformance.drivers.interface import FrameRecord, Recorder
from conformance.drivers.raw import next_connection_id

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
CHUNK = 65536


@dataclass
class _Side:
    sock: socket.socket
    peer: socket.socket
    direction: str  # how the bytes this side *receives* are recorded
    conn: int
    reader: FrameReader = field(default_factory=lambda: FrameReader(frame_max=0))
    header: bytes = b""  # client side: the protocol header, before any frame
    broken: bool = False


class RecordingRelay:
    """`with RecordingRelay("127.0.0.1", 5672, recorder) as relay: connect to relay.url_for(url)`."""

    def __init__(self, host: str, port: int, recorder: Recorder, timeout: float = 5.0) -> None:
        self.upstream, self.recorder, self.timeout = (host, port), recorder, timeout
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ, None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recording-relay", daemon=True)

    def __enter__(self) -> RecordingRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout)
        for key in list(self._selector.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.05):
                if key.data is None:
                    self._accept()
                else:
                    self._pump(key.data)

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
            broker = socket.create_connection(self.upstream, timeout=self.timeout)
        except OSError:
            return  # the client sees its connection end: the broker was not reachable
        conn = next_connection_id()
        for sock in (client, broker):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        from_client = _Side(client, broker, "out", conn, header=PROTOCOL_HEADER)
        from_broker = _Side(broker, client, "in", conn)
        self._selector.register(client, selectors.EVENT_READ, from_client)
        self._selector.register(broker, selectors.EVENT_READ, from_broker)

    def _pump(self, side: _Side) -> None:
        try:
            data = side.sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._end(side)
            return
        try:
            side.peer.setblocking(True)
            side.peer.settimeout(self.timeout)
            side.peer.sendall(data)  # unchanged, before it is decoded
            side.peer.setblocking(False)
        except OSError:
            self._end(side)
            return
        self._record(side, data)

    def _record(self, side: _Side, data: bytes) -> None:
        conn = side.conn
        if side.header:
            taken = min(len(side.header), len(data))
            side.header, data = side.header[taken:], data[taken:]
        if side.broken or not data:
            return
        side.reader.receive_data(data)
        try:
            while (frame := side.reader.next_frame()) is not NEED_DATA:
                self.recorder.add(FrameRecord(time.monotonic(), conn, side.direction, frame.channel, frame))  # type: ignore[union-attr]
        except CodecError:
            side.broken = True
            self.recorder.add(FrameRecord(time.monotonic(), conn, side.direction, 0, data))

    def _end(self, side: _Side) -> None:
        for sock in (side.sock, side.peer):
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            with contextlib.suppress(OSError):
                sock.close()
