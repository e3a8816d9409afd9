"""ContentAssembler: frame sequences (java UnexpectedFrames; RULES.md ERR-04)."""

from __future__ import annotations

import pytest

from codec import (
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    BodyFrame,
    ChannelOpen,
    Command,
    ContentAssembler,
    FrameError,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    UnexpectedFrameError,
)

PUBLISH = MethodFrame(1, BasicPublish(routing_key="q"))
PROPS = BasicProperties(delivery_mode=2)


def header(size: int, channel: int = 1, class_id: int = 60) -> HeaderFrame:
    return HeaderFrame(channel, class_id, 0, size, PROPS if class_id == 60 else None)


def test_assembler_complete_message_over_several_bodies() -> None:
    a = ContentAssembler()
    assert a.feed(PUBLISH) is None
    assert a.feed(header(5)) is None
    assert a.feed(BodyFrame(1, b"he")) is None
    assert a.feed(BodyFrame(1, b"llo")) == Command(1, PUBLISH.method, PROPS, b"hello")
    assert a.pending_channels() == frozenset()


def test_assembler_empty_body_has_no_body_frames() -> None:
    a = ContentAssembler()
    a.feed(PUBLISH)
    assert a.feed(header(0)) == Command(1, PUBLISH.method, PROPS, b"")


def test_assembler_channels_interleave() -> None:
    a = ContentAssembler()
    a.feed(PUBLISH)
    a.feed(MethodFrame(2, BasicDeliver("c", 1, False, "", "q")))
    a.feed(header(1, channel=2))
    a.feed(header(1))
    assert a.feed(BodyFrame(2, b"b")).body == b"b"  # type: ignore[union-attr]
    assert a.feed(BodyFrame(1, b"a")).body == b"a"  # type: ignore[union-attr]


def test_assembler_missing_header_is_unexpected_frame() -> None:
    """java UnexpectedFrames.missingHeader."""
    a = ContentAssembler()
    a.feed(PUBLISH)
    with pytest.raises(UnexpectedFrameError) as info:
        a.feed(BodyFrame(1, b"x"))
    assert info.value.code == 505
    assert info.value.text == "expected content header for class 60, got non content header frame instead"
    assert (info.value.class_id, info.value.method_id) == (60, 40)


def test_assembler_method_instead_of_header_is_unexpected_frame() -> None:
    a = ContentAssembler()
    a.feed(PUBLISH)
    with pytest.raises(UnexpectedFrameError):
        a.feed(MethodFrame(1, ChannelOpen()))


def test_assembler_missing_method_is_unexpected_frame() -> None:
    """java UnexpectedFrames.missingMethod."""
    with pytest.raises(UnexpectedFrameError) as info:
        ContentAssembler().feed(header(3))
    assert info.value.text == "expected method frame, got non method frame instead"
    with pytest.raises(UnexpectedFrameError):
        ContentAssembler().feed(BodyFrame(1, b"x"))


def test_assembler_missing_body_is_unexpected_frame() -> None:
    """java UnexpectedFrames.missingBody."""
    a = ContentAssembler()
    a.feed(PUBLISH)
    a.feed(header(3))
    with pytest.raises(UnexpectedFrameError) as info:
        a.feed(PUBLISH)
    assert info.value.text == "expected content body, got non content body frame instead"


def test_assembler_wrong_class_in_header_is_unexpected_frame() -> None:
    """java UnexpectedFrames.wrongClassInHeader."""
    a = ContentAssembler()
    a.feed(PUBLISH)
    with pytest.raises(UnexpectedFrameError) as info:
        a.feed(header(3, class_id=50))
    assert info.value.text == "expected content header for class 60, got one for class 50 instead"


def test_assembler_nonzero_weight_is_unexpected_frame() -> None:
    a = ContentAssembler()
    a.feed(PUBLISH)
    with pytest.raises(UnexpectedFrameError):
        a.feed(HeaderFrame(1, 60, 1, 3, PROPS))


def test_assembler_heartbeat_on_a_channel_is_unexpected_frame() -> None:
    """java UnexpectedFrames.heartbeatOnChannel."""
    a = ContentAssembler()
    assert a.feed(HeartbeatFrame(0)) == HeartbeatFrame(0)
    with pytest.raises(UnexpectedFrameError):
        a.feed(HeartbeatFrame(3))


def test_assembler_body_past_declared_size_is_frame_error() -> None:
    a = ContentAssembler()
    a.feed(PUBLISH)
    a.feed(header(2))
    with pytest.raises(FrameError) as info:
        a.feed(BodyFrame(1, b"abc"))
    assert info.value.code == 501


def test_assembler_forget_drops_partial_command() -> None:
    a = ContentAssembler()
    a.feed(PUBLISH)
    a.forget(1)
    assert a.feed(MethodFrame(1, ChannelOpen())) == Command(1, ChannelOpen())
