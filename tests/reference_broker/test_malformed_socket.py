"""Malformed input over a real socket: the offender gets the rules' close code, the broker
keeps serving every other connection, and nothing confirmed is lost."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

import pika
import pytest

from codec import (
    NEED_DATA,
    PROTOCOL_HEADER,
    ChannelOpen,
    ConnectionClose,
    ConnectionOpen,
    ConnectionStartOk,
    ConnectionTuneOk,
    FrameReader,
    MethodFrame,
    encode_frame,
    encode_method,
)
from reference_broker.server import EmbeddedBroker


def raw_session(broker: EmbeddedBroker) -> tuple[socket.socket, Callable[[], object]]:
    sock = socket.create_connection((broker.host, broker.port), timeout=5)
    reader = FrameReader(frame_max=0)

    def recv() -> object:
        while (frame := reader.next_frame()) is NEED_DATA:
            data = sock.recv(65536)
            if not data:
                return None
            reader.receive_data(data)
        return frame.method if isinstance(frame, MethodFrame) else frame

    sock.sendall(PROTOCOL_HEADER)
    recv()
    sock.sendall(encode_method(0, ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest", "en_US")))
    tune = recv()
    sock.sendall(encode_method(0, ConnectionTuneOk(tune.channel_max, tune.frame_max, 0)))  # type: ignore[attr-defined]
    sock.sendall(encode_method(0, ConnectionOpen(virtual_host="/")))
    recv()
    sock.sendall(encode_method(1, ChannelOpen()))
    recv()
    return sock, recv


@pytest.mark.parametrize("garbage,code", [
    (encode_frame(7, 1, b"??"), 501),
    (encode_frame(1, 1, struct.pack(">HH", 60, 4242)), 540),
    (encode_frame(3, 1, b"orphan body"), 505),
    (encode_frame(1, 1, b"\x00\x32\x00\x0a\x00"), 501),
])
def test_malformed_frame_closes_only_the_offender(broker: EmbeddedBroker, unique_name: Callable[..., str],
                                                  garbage: bytes, code: int) -> None:
    queue = unique_name()
    good = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = good.channel()
    ch.queue_declare(queue)
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"before")
    sock, recv = raw_session(broker)
    sock.sendall(garbage)
    close = recv()
    assert isinstance(close, ConnectionClose) and close.reply_code == code
    sock.close()
    ch.basic_publish("", queue, b"after")  # confirmed: the broker still serves this connection
    bodies = []
    for _ in range(2):
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        assert method is not None
        bodies.append(body)
    assert bodies == [b"before", b"after"]
    ch.queue_delete(queue)
    good.close()
