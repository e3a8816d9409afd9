"""The interposer without a broker: frame cutting (sans-IO) and a relay transform that rewrites
frames, keeps the rest byte for byte, and forwards what follows lost framing unchanged."""

from __future__ import annotations

import asyncio

from codec import PROTOCOL_HEADER, BasicQos, ChannelOpen, ChannelOpenOk, encode_heartbeat, encode_method
from conformance.interpose.frames import Frame, FrameCutter
from conformance.interpose.relay import Framed, Interposer, Link, Plumbing, Relay

OPEN, QOS = encode_method(1, ChannelOpen()), encode_method(1, BasicQos(0, 7, False))


def test_cutter_cuts_frames_split_anywhere() -> None:
    stream = PROTOCOL_HEADER + OPEN + encode_heartbeat() + QOS
    cutter = FrameCutter(header_first=True)
    frames = [f for k in range(0, len(stream), 3) for f in cutter.feed(stream[k : k + 3])]
    assert frames == [PROTOCOL_HEADER, OPEN, encode_heartbeat(), QOS] and not cutter.lost


def test_cutter_finds_a_protocol_header_at_a_boundary_only_when_asked() -> None:
    cutter = FrameCutter(headers_anywhere=True)
    assert cutter.feed(OPEN + PROTOCOL_HEADER[:5]) == [OPEN]  # a header's beginning waits for its end
    assert cutter.feed(PROTOCOL_HEADER[5:]) == [PROTOCOL_HEADER]
    assert FrameCutter().feed(PROTOCOL_HEADER + OPEN) == []  # not asked: "AMQP" reads as a frame header


def test_cutter_loses_framing_on_a_bad_end_octet_and_keeps_every_byte_after() -> None:
    bad = OPEN[:-1] + b"\x00"
    cutter = FrameCutter()
    assert cutter.feed(QOS + bad + b"tail") == [QOS]
    assert "frame-end octet 0x00" in cutter.lost
    assert cutter.feed(b"more") == [] and cutter.unframed() == bad + b"tail" + b"more"
    over = FrameCutter(max_frame=3)
    assert over.feed(QOS) == [] and "over 3" in over.lost


class _OpenOkAsQos(Interposer):
    """The broker's channel.open-ok becomes a basic.qos; everything else goes as it came."""

    def plumb(self, link: Link) -> Plumbing:
        def on_frame(frame: Frame) -> None:
            link.to_client(QOS if isinstance(frame.method, ChannelOpenOk) else frame.raw)

        return Plumbing(inn=Framed(on_frame))


def test_a_framed_transform_rewrites_and_forwards_the_rest_unchanged() -> None:
    reply = encode_method(1, ChannelOpenOk()) + encode_heartbeat() + b"\x01garbage-without-framing"

    async def scenario() -> bytes:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for k in range(0, len(reply), 4):
                writer.write(reply[k : k + 4])
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        relay = Relay(("127.0.0.1", server.sockets[0].getsockname()[1]), _OpenOkAsQos())
        _, port = await relay.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        got = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        await relay.close()
        server.close()
        return got

    assert asyncio.run(scenario()) == QOS + encode_heartbeat() + b"\x01garbage-without-framing"
