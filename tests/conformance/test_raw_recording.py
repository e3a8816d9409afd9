"""The raw driver records bytes written in one go as the frames they decode to, and answers a
broker's channel.close once."""

from __future__ import annotations

import pytest

from codec import (
    BasicCancel,
    BasicConsume,
    BasicConsumeOk,
    ChannelClose,
    Command,
    MethodFrame,
    QueueDeclare,
    QueueDeclareOk,
    encode_method,
)
from codec.frames import ProtocolHeader
from conformance.drivers.raw import ChannelClosed, RawClient, Recorder, written_frames
from conformance.interpose.frames import Frame
from conformance.plugin.classify import frame_log
from conformance.results.records import frame_fields
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation, Io

PIPELINED = encode_method(1, BasicConsume(queue="q", consumer_tag="t")) + encode_method(1, BasicCancel(consumer_tag="t"))


def test_written_frames_decodes_every_frame_and_keeps_the_rest() -> None:
    frames, rest = written_frames(PIPELINED)
    assert [f.method for f in frames] == [BasicConsume(queue="q", consumer_tag="t"), BasicCancel(consumer_tag="t")]
    assert rest == b""
    bad_end = encode_method(2, BasicCancel(consumer_tag="x"))[:-1] + b"\x00"  # a malformed frame stays raw
    frames, rest = written_frames(PIPELINED + bad_end)
    assert len(frames) == 2 and rest == bad_end
    unknown = b"\x01\x00\x01\x00\x00\x00\x04\x00\x63\x00\x01\xce"  # class 99: does not decode, kept whole
    assert written_frames(unknown) == ([], unknown)
    assert written_frames(PIPELINED[:10]) == ([], PIPELINED[:10])  # a fragment
    frames, rest = written_frames(b"AMQP\x00\x00\x09\x01")
    assert isinstance(frames[0], ProtocolHeader) and rest == b""


def test_send_raw_is_logged_frame_by_frame() -> None:
    recorder = Recorder()
    with EmbeddedBroker() as broker, RawClient(broker.url, recorder=recorder, timeout=10.0) as client:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue="", exclusive=True), QueueDeclareOk)
        queue = recorder.frames[-1].frame.method.queue
        client.send_raw(encode_method(ch, BasicConsume(queue=queue, consumer_tag="p"))
                        + encode_method(ch, BasicCancel(consumer_tag="p")), channel=ch)
        client.expect(ch, BasicConsumeOk)
    out = [r for r in recorder.frames if r.direction == "out" and isinstance(r.frame, MethodFrame)]
    assert [r.frame.method.NAME for r in out[-2:]] == ["basic.consume", "basic.cancel"]
    assert all(r.channel == ch for r in out[-2:])
    assert [frame_fields(r.frame)["method"] for r in out[-2:]] == ["basic.consume", "basic.cancel"]
    log = frame_log(recorder.frames)
    assert "basic.consume" in log and "basic.cancel" in log and "raw " not in log


class CloseTwice(Deviation):
    """Each channel.close from the broker reaches the client twice, as RabbitMQ 4.3 sends it when two
    consumers of one channel time out (docs/findings-rabbitmq-4.3.6.md)."""

    def broker(self, frame: Frame, io: Io) -> None:
        io.to_client(frame.raw)
        if isinstance(frame.method, ChannelClose):
            io.record("close twice")
            io.to_client(frame.raw)


def test_a_second_close_of_a_closed_channel_is_not_answered() -> None:
    """The driver answers the first channel.close only: a second close-ok would reach a channel the
    broker has ended, and the broker would close the connection (504) under the next step."""
    recorder = Recorder()
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), CloseTwice) as proxy, \
            RawClient(proxy.url, recorder=recorder, timeout=10.0) as client:
        ch = client.channel()
        with pytest.raises(ChannelClosed) as closed:
            client.rpc(ch, QueueDeclare(queue="amqpc.absent", passive=True), QueueDeclareOk)
        assert closed.value.code == 404
        assert proxy.wait_for("close twice")
        client.channel(ch)  # the number opened again: its open-ok comes after both closes
        client.rpc(ch, QueueDeclare(queue="", exclusive=True), QueueDeclareOk)
        assert client.connection_closed is None, f"the broker closed the connection: {client.connection_closed}"
    methods = [(r.direction, r.frame.method.NAME) for r in recorder.frames
               if isinstance(r.frame, MethodFrame | Command)]
    assert methods.count(("in", "channel.close")) == 2, methods
    assert methods.count(("out", "channel.close-ok")) == 1, methods
