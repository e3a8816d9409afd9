"""The close handshake over real sockets (NET-02): after connection.close-ok the reference broker
leaves closing the TCP connection to the client, as RabbitMQ's reader does, for a bounded time
(the heartbeat interval when it is below 30 s, else 30 s: rabbit_reader:close_connection/1), so
a client still writing or reading its own close sees neither EOF nor a reset before close-ok.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from codec import (
    PROTOCOL_HEADER,
    BasicPublish,
    ChannelOpen,
    ChannelOpenOk,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    FrameReader,
    MethodFrame,
    encode_content,
    encode_method,
)
from reference_broker.config import BrokerConfig
from reference_broker.core import BrokerCore
from reference_broker.protocol.connection import CloseTransport, ServerConnection
from reference_broker.server import EmbeddedBroker

TIMEOUT = 5.0


class Wire:
    """A raw socket speaking just enough AMQP to open, close and watch the socket's end."""

    def __init__(self, port: int, heartbeat: int = 0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.reader = FrameReader(frame_max=0)
        self.sock.sendall(PROTOCOL_HEADER)
        assert isinstance(self.expect(), ConnectionStart)
        self.sock.sendall(encode_method(0, ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest", "en_US")))
        tune = self.expect()
        assert isinstance(tune, ConnectionTune)
        self.sock.sendall(encode_method(0, ConnectionTuneOk(tune.channel_max, tune.frame_max, heartbeat)))
        self.sock.sendall(encode_method(0, ConnectionOpen(virtual_host="/")))
        assert isinstance(self.expect(), ConnectionOpenOk)

    def expect(self) -> object:
        """The next method (heartbeats skipped); fails on EOF, reset or timeout."""
        while True:
            for frame in self.reader.frames():
                if isinstance(frame, MethodFrame):
                    return frame.method
            data = self.sock.recv(65536)
            assert data, "EOF before the expected method"
            self.reader.receive_data(data)

    def end_within(self, seconds: float) -> str:
        """How the socket ends within `seconds`: "eof", "reset" or "open" (nothing happened)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                if not self.sock.recv(65536):
                    return "eof"
            except TimeoutError:
                break
            except ConnectionResetError:
                return "reset"
        return "open"


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def test_after_close_ok_the_socket_stays_until_the_client_closes_it(broker: EmbeddedBroker) -> None:
    wire = Wire(broker.port)
    wire.sock.sendall(encode_method(0, ConnectionClose(200, "bye", 0, 0)))
    assert wire.expect() == ConnectionCloseOk()
    assert wire.end_within(1.0) == "open"
    assert broker.call(lambda: len(broker.server.core.connections)) == 0  # closed for the broker
    wire.sock.close()
    deadline = time.monotonic() + TIMEOUT
    while broker.call(lambda: len(broker.server.clients)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert broker.call(lambda: len(broker.server.clients)) == 0


def test_the_wait_is_bounded_by_the_heartbeat(broker: EmbeddedBroker) -> None:
    """rabbit_reader: terminate_connection after the heartbeat interval when it is below 30 s."""
    wire = Wire(broker.port, heartbeat=1)
    wire.sock.sendall(encode_method(0, ConnectionClose(200, "bye", 0, 0)))
    assert wire.expect() == ConnectionCloseOk()
    started = time.monotonic()
    assert wire.end_within(TIMEOUT) in ("eof", "reset")
    assert time.monotonic() - started >= 0.8  # not at once: about the 1 s heartbeat


def test_pipelined_writes_after_close_get_close_ok_and_no_reset(broker: EmbeddedBroker) -> None:
    """A client whose publishes are still in flight behind its connection.close reads close-ok and
    then the socket stays open: no reset from a broker that closed with unread input."""
    port = broker.port
    publish = encode_content(1, BasicPublish(routing_key="nowhere"), body=bytes(4000))
    for _ in range(10):
        wire = Wire(port)
        wire.sock.sendall(encode_method(1, ChannelOpen()))
        assert wire.expect() == ChannelOpenOk()
        wire.sock.sendall(encode_method(0, ConnectionClose(200, "bye", 0, 0)) + publish * 50)
        wire.sock.sendall(publish * 50)  # still writing after the close
        assert wire.expect() == ConnectionCloseOk()
        assert wire.end_within(0.2) == "open"
        wire.sock.close()


def test_engine_closes_the_transport_after_the_closing_timeout() -> None:
    """Without a heartbeat the bound is RabbitMQ's ?CLOSING_TIMEOUT, 30 s."""
    engine = ServerConnection(1, BrokerCore(BrokerConfig()))
    engine.receive_data(PROTOCOL_HEADER, 0)
    engine.receive_data(encode_method(0, ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest", "en_US")), 0)
    engine.receive_data(encode_method(0, ConnectionTuneOk(2047, 131072, 0)), 0)
    engine.receive_data(encode_method(0, ConnectionOpen(virtual_host="/")), 0)
    out = engine.receive_data(encode_method(0, ConnectionClose(200, "bye", 0, 0)), 1_000)
    assert not [o for o in out if isinstance(o, CloseTransport)]
    assert engine.tick(30_999) == []
    assert [type(o) for o in engine.tick(31_000)] == [CloseTransport]
