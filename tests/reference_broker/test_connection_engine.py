"""The sans-IO connection engine: handshake, negotiation (FRM-01/02), auth, malformed frames."""

from __future__ import annotations

import struct
from typing import Any

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
    QueueDeclare,
    encode_frame,
    encode_heartbeat,
    encode_method,
)
from codec.frames import encode_method_payload
from reference_broker.config import BrokerConfig
from reference_broker.core import BrokerCore, Send
from reference_broker.protocol.connection import CloseTransport, ServerConnection, Write

PLAIN = b"\x00guest\x00guest"


class Client:
    """Feeds bytes to one engine and decodes what it writes back."""

    def __init__(self, **config: Any) -> None:
        self.engine = ServerConnection(1, BrokerCore(BrokerConfig(**config)))
        self.reader = FrameReader(frame_max=0)
        self.closed = False
        self.now = 0

    def send(self, data: bytes) -> list[Any]:
        self.now += 1
        out = self.engine.receive_data(data, self.now)
        frames: list[Any] = []
        for item in out:
            if isinstance(item, Write):
                self.reader.receive_data(item.data)
                frames += self.reader.frames()
            elif isinstance(item, Send) and item.conn == 1:
                self.reader.receive_data(self.engine.encode(item))
                frames += self.reader.frames()
            elif isinstance(item, CloseTransport):
                self.closed = True
        return [f.method if isinstance(f, MethodFrame) else f for f in frames]

    def handshake(self, caps: dict[str, Any] | None = None, response: bytes = PLAIN,
                  tune: ConnectionTuneOk | None = None) -> list[Any]:
        start = self.send(PROTOCOL_HEADER)
        assert isinstance(start[0], ConnectionStart)
        props = {"capabilities": caps or {"authentication_failure_close": True}}
        out = self.send(encode_method(0, ConnectionStartOk(props, "PLAIN", response, "en_US")))
        if not out or not isinstance(out[0], ConnectionTune):
            return out
        tune_ok = tune or ConnectionTuneOk(out[0].channel_max, out[0].frame_max, 0)
        out = self.send(encode_method(0, tune_ok))
        if out:
            return out
        return self.send(encode_method(0, ConnectionOpen(virtual_host="/")))

    def opened(self) -> Client:
        assert self.handshake() == [ConnectionOpenOk()]
        assert self.send(encode_method(1, ChannelOpen())) == [ChannelOpenOk()]
        return self


def close_of(frames: list[Any]) -> ConnectionClose:
    closes = [f for f in frames if isinstance(f, ConnectionClose)]
    assert closes, frames
    return closes[0]


def test_engine_handshake_advertises_capabilities_and_tune_values() -> None:
    """CCN-01, FRM-01."""
    client = Client()
    start = client.send(PROTOCOL_HEADER)[0]
    caps = start.server_properties["capabilities"]
    assert caps["consumer_cancel_notify"] and caps["publisher_confirms"] and caps["basic.nack"]
    assert b"PLAIN" in start.mechanisms and b"AMQPLAIN" in start.mechanisms
    tune = client.send(encode_method(0, ConnectionStartOk({}, "PLAIN", PLAIN, "en_US")))[0]
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)


def test_engine_wrong_protocol_header_gets_ours_and_closes() -> None:
    client = Client()
    out = client.engine.receive_data(b"AMQP\x00\x00\x09\x00", 1)
    assert out[0] == Write(1, PROTOCOL_HEADER) and isinstance(out[1], CloseTransport)
    assert client.engine.receive_data(b"more", 2) == []
    fresh = Client()
    out = fresh.engine.receive_data(b"HTTP/1.1 GET /", 1)
    assert out[0] == Write(1, PROTOCOL_HEADER) and isinstance(out[1], CloseTransport)


@pytest.mark.parametrize("frame_max,word", [(4096, "lower"), (0, "higher"), (200000, "higher")])
def test_engine_tune_ok_bounds_are_530(frame_max: int, word: str) -> None:
    """FRM-01 (FRAME_MIN_SIZE 8192 from 4.1, FRM-02)."""
    close = close_of(Client().handshake(tune=ConnectionTuneOk(2047, frame_max, 0)))
    assert close.reply_code == 530 and (close.class_id, close.method_id) == (10, 31)
    assert f"negotiated frame_max = {frame_max} is {word} than" in close.reply_text


def test_engine_wrong_password_with_capability_is_403_close() -> None:
    out = Client().handshake(response=b"\x00guest\x00nope")
    close = close_of(out)
    assert close.reply_code == 403
    assert close.reply_text == ("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
                                "For details see the broker logfile.")


def test_engine_wrong_password_without_capability_just_closes() -> None:
    client = Client()
    assert client.handshake(caps={"other": True}, response=b"\x00guest\x00nope") == []
    assert client.closed


def test_engine_amqplain_login() -> None:
    from codec.fast_tables import RABBITMQ_TABLES

    client = Client()
    client.send(PROTOCOL_HEADER)
    response = RABBITMQ_TABLES.encode_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]
    out = client.send(encode_method(0, ConnectionStartOk({}, "AMQPLAIN", response, "en_US")))
    assert isinstance(out[0], ConnectionTune)


def test_engine_pre_tune_frames_limited_to_frame_min_size() -> None:
    """FRM-02: an oversized start-ok is a frame error before tune."""
    client = Client()
    client.send(PROTOCOL_HEADER)
    big = encode_method(0, ConnectionStartOk({"pad": "x" * 9000}, "PLAIN", PLAIN, "en_US"))
    client.send(big)
    assert client.closed


def test_engine_client_close_is_answered_with_close_ok() -> None:
    """NET-02: close-ok, and the socket is the client's to close (bounded by closing_timeout_ms)."""
    client = Client().opened()
    assert client.send(encode_method(0, ConnectionClose(200, "bye", 0, 0))) == [ConnectionCloseOk()]
    assert not client.closed and client.engine.core.connections == {}
    assert client.send(encode_method(1, QueueDeclare(queue="after"))) == []  # discarded
    assert isinstance(client.engine.tick(client.now + client.engine.closing_timeout_ms())[-1], CloseTransport)


@pytest.mark.parametrize(
    "data,code",
    [
        (encode_frame(1, 1, struct.pack(">HH", 60, 999)), 540),  # unknown method
        (encode_frame(9, 1, b""), 501),  # unknown frame type
        (encode_frame(8, 1, b""), 505),  # heartbeat on a channel
        (encode_frame(3, 1, b"body"), 505),  # body without method
        (encode_method(1, BasicPublish()) + encode_method(1, BasicPublish()), 505),  # missing header
        (encode_frame(1, 1, encode_method_payload(QueueDeclare(queue="q"))[:-2]), 501),  # cannot decode
        (encode_method(2, QueueDeclare(queue="q")), 504),  # channel not open
        (encode_method(1, ChannelOpen()), 504),  # second channel.open
        (encode_frame(1, 1, encode_method_payload(ChannelOpen()), frame_end=b"\x00"), 501),
        (encode_frame(3, 1, b"x" * 200_000), 501),  # over frame_max
        (encode_method(1, ConnectionOpen()), 503),  # connection method on a channel
    ],
)
def test_engine_malformed_input_gets_the_rules_close_code(data: bytes, code: int) -> None:
    """ERR-04: each malformed input ends in connection.close with the code RULES.md gives."""
    client = Client().opened()
    assert close_of(client.send(data)).reply_code == code
    assert client.send(encode_method(1, QueueDeclare(queue="after"))) == []  # closing: ignored
    client.send(encode_method(0, ConnectionCloseOk()))
    if not client.closed:  # a corrupt stream cannot carry close-ok: the grace period ends it
        from reference_broker.protocol.connection import CLOSE_GRACE_MS

        assert isinstance(client.engine.tick(client.now + CLOSE_GRACE_MS)[-1], CloseTransport)


def test_engine_heartbeats_sent_when_idle_and_silence_closes() -> None:
    """HB-01."""
    client = Client()
    client.handshake(tune=ConnectionTuneOk(2047, 131072, 2))
    engine = client.engine
    assert engine.tick(engine.last_send + 999) == []
    assert engine.tick(engine.last_send + 1000) == [Write(1, encode_heartbeat())]
    assert isinstance(engine.tick(engine.last_recv + 4001)[-1], CloseTransport)


def test_engine_handshake_table_every_state_and_method() -> None:
    """h2's state-machine property over the handshake table: a listed (state, method) moves
    to the listed state; anything else is a 503 connection error (or a silent close before
    the client can read closes)."""
    from codec import METHOD_CLASSES
    from reference_broker.protocol import states

    steps = {states.START_OK: 1, states.TUNE_OK: 2, states.OPEN: 3}
    for state, depth in steps.items():
        for _index, cls in sorted(METHOD_CLASSES.items()):
            client = Client()
            client.send(PROTOCOL_HEADER)
            if depth >= 2:
                client.send(encode_method(0, ConnectionStartOk({}, "PLAIN", PLAIN, "en_US")))
            if depth >= 3:
                client.send(encode_method(0, ConnectionTuneOk(2047, 131072, 0)))
            assert client.engine.state == state
            method = cls()
            if cls is ConnectionStartOk:
                method = ConnectionStartOk({}, "PLAIN", PLAIN, "en_US")
            if cls is ConnectionTuneOk:
                method = ConnectionTuneOk(2047, 131072, 0)
            if cls is ConnectionOpen:
                method = ConnectionOpen(virtual_host="/")
            body = encode_method(0, method)
            if cls.HAS_CONTENT:
                continue  # content methods need a header: covered by the malformed-input tests
            out = client.send(body)
            expected = states.HANDSHAKE.get((state, cls))
            if expected is None:
                assert close_of(out).reply_code == 503, (state, cls.NAME)
            else:
                assert client.engine.state == expected, (state, cls.NAME)
