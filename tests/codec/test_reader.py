"""FrameReader: chunking, frame_max, protocol header and one test per error class."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codec import (
    NEED_DATA,
    PROTOCOL_HEADER,
    BasicAck,
    BasicProperties,
    BodyFrame,
    FrameError,
    FrameReader,
    FrameSyntaxError,
    HeartbeatFrame,
    MethodFrame,
    ProtocolHeader,
    ProtocolHeaderError,
    QueueDeclare,
    ReplyCode,
    UnknownMethodError,
    encode_content,
    encode_frame,
    encode_heartbeat,
    encode_method,
)
from codec import BasicPublish as Publish
from tests.codec import strategies as s


@settings(max_examples=100, deadline=None)
@given(methods=st.lists(s.any_method, min_size=1, max_size=6), cuts=st.lists(st.integers(1, 50), max_size=40))
def test_reader_any_chunking_gives_the_same_frames(methods: list, cuts: list[int]) -> None:
    wire = b"".join(encode_method(i % 3, m) for i, m in enumerate(methods)) + encode_heartbeat()
    whole = FrameReader(frame_max=0)
    whole.receive_data(wire)
    expected = whole.frames()
    reader, got, pos = FrameReader(frame_max=0), [], 0
    for size in [*cuts, len(wire)]:
        reader.receive_data(wire[pos : pos + size])
        pos += size
        got.extend(reader.frames())
    assert got == expected
    assert expected[-1] == HeartbeatFrame(0)
    assert reader.buffered == 0


def test_reader_accepts_payload_of_exactly_frame_max() -> None:
    """FRM-03: RabbitMQ tolerates payloads up to exactly frame_max."""
    reader = FrameReader(frame_max=4096)
    reader.receive_data(encode_frame(3, 1, b"x" * 4096))
    assert reader.frames() == [BodyFrame(1, b"x" * 4096)]


def test_reader_rejects_oversize_frame_from_its_header_alone() -> None:
    reader = FrameReader(frame_max=4096)
    reader.receive_data(encode_frame(3, 1, b"x" * 4097)[:7])
    with pytest.raises(FrameError) as info:
        reader.next_frame()
    assert info.value.code == ReplyCode.FRAME_ERROR
    assert "frame_too_large,4097,4088" in info.value.text
    assert info.value.scope == "connection"


def test_reader_bad_frame_end_is_frame_error() -> None:
    reader = FrameReader()
    reader.receive_data(encode_frame(8, 0, b"", frame_end=b"\x00"))
    with pytest.raises(FrameError) as info:
        reader.next_frame()
    assert info.value.code == 501
    assert "[00]" in info.value.window


@pytest.mark.parametrize("frame_type", [0, 4, 7, 9, 255])
def test_reader_unknown_frame_type_is_frame_error(frame_type: int) -> None:
    reader = FrameReader()
    reader.receive_data(encode_frame(frame_type, 1, b"abc"))
    with pytest.raises(FrameError) as info:
        reader.next_frame()
    assert info.value.code == 501


def test_reader_heartbeat_with_payload_is_frame_error() -> None:
    reader = FrameReader()
    reader.receive_data(encode_frame(8, 0, b"\x00"))
    with pytest.raises(FrameError):
        reader.next_frame()


def test_reader_truncated_field_is_syntax_error_with_path_and_window() -> None:
    payload = encode_method(1, QueueDeclare(queue="orders", arguments={"x-max-length": 5}))[7:-1]
    reader = FrameReader()
    reader.receive_data(encode_frame(1, 1, payload[:-3]))
    with pytest.raises(FrameSyntaxError) as info:
        reader.next_frame()
    err = info.value
    assert err.code == ReplyCode.SYNTAX_ERROR == 502
    assert err.path is not None and "arguments" in err.path
    assert (err.class_id, err.method_id) == (50, 10)
    assert "offset" in err.window


def test_reader_trailing_octets_in_method_are_syntax_error() -> None:
    payload = encode_method(1, BasicAck(5, True))[7:-1] + b"\x00"
    reader = FrameReader()
    reader.receive_data(encode_frame(1, 1, payload))
    with pytest.raises(FrameSyntaxError):
        reader.next_frame()


def test_reader_unknown_method_is_not_implemented() -> None:
    reader = FrameReader()
    reader.receive_data(encode_frame(1, 1, struct.pack(">HH", 60, 999)))
    with pytest.raises(UnknownMethodError) as info:
        reader.next_frame()
    assert info.value.code == 540
    assert (info.value.class_id, info.value.method_id) == (60, 999)


def test_reader_illegal_property_flags_are_syntax_error() -> None:
    payload = struct.pack(">HHQH", 60, 0, 0, 0x0001)
    reader = FrameReader()
    reader.receive_data(encode_frame(2, 1, payload))
    with pytest.raises(FrameSyntaxError):
        reader.next_frame()


def test_reader_error_is_final() -> None:
    reader = FrameReader()
    reader.receive_data(encode_frame(9, 0, b""))
    with pytest.raises(FrameError):
        reader.next_frame()
    reader.receive_data(encode_heartbeat())
    with pytest.raises(FrameError):
        reader.next_frame()


def test_reader_server_side_protocol_header() -> None:
    reader = FrameReader(expect_protocol_header=True)
    reader.receive_data(PROTOCOL_HEADER[:3])
    assert reader.next_frame() is NEED_DATA
    reader.receive_data(PROTOCOL_HEADER[3:] + encode_heartbeat())
    assert reader.frames() == [ProtocolHeader(PROTOCOL_HEADER), HeartbeatFrame(0)]


@pytest.mark.parametrize("header", [b"AMQP\x00\x00\x09\x00", b"AMQP\x01\x01\x00\x0a", b"HTTP/1.1", b"AMQP0091"])
def test_reader_server_side_rejects_other_protocol_headers(header: bytes) -> None:
    reader = FrameReader(expect_protocol_header=True)
    reader.receive_data(header)
    with pytest.raises(ProtocolHeaderError):
        reader.next_frame()


def test_reader_client_side_sees_a_version_refusal() -> None:
    reader = FrameReader()
    reader.receive_data(PROTOCOL_HEADER)
    assert reader.frames() == [ProtocolHeader(PROTOCOL_HEADER)]


def test_reader_content_frames() -> None:
    props = BasicProperties(content_type="text/plain", headers={"n": 1}, delivery_mode=2)
    reader = FrameReader(frame_max=0)
    reader.receive_data(encode_content(2, Publish(routing_key="q"), props, b"hello"))
    frames = reader.frames()
    assert frames[0] == MethodFrame(2, Publish(routing_key="q"))
    assert frames[1].properties == props
    assert frames[2] == BodyFrame(2, b"hello")
