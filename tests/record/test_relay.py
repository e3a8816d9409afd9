"""The recording relay and the capture import without a broker: bytes untouched both ways, a
reset on either side, frames and gaps in the lake, a pcap and a pcapng read back by dpkt."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from pathlib import Path

import dpkt
import pyarrow.compute as pc

from codec import encode_frame
from codec._generated import BasicDeliver, BasicQos, ChannelOpen
from codec.frames import encode_method_payload
from conformance.interpose.relay import Relay
from conformance.record.lake_sink import LakeSink
from conformance.record.pcap import import_capture
from conformance.results.lake import RecordingLake
from conformance.results.parts import read_table
from reports.audit.lake import audit_lake

HEADER = b"AMQP\x00\x00\x09\x01"


def method(channel: int, m: object) -> bytes:
    return encode_frame(1, channel, encode_method_payload(m))  # type: ignore[arg-type]


async def _echo_upstream(received: list[bytes], reply: bytes) -> tuple[asyncio.Server, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(reply)
        while data := await reader.read(65536):
            received.append(data)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_relay_forwards_every_byte_and_records_frames(tmp_path: Path) -> None:
    client_bytes = HEADER + method(1, ChannelOpen()) + method(1, BasicQos(0, 7, False)) + os.urandom(3)
    server_bytes = method(1, BasicDeliver("c", 1, False, "", "q")) + encode_frame(1, 1, b"\x00\x3c\x00\x63")

    async def scenario() -> tuple[bytes, bytes]:
        received: list[bytes] = []
        server, port = await _echo_upstream(received, server_bytes)
        lake = RecordingLake(tmp_path, f"amqp://127.0.0.1:{port}")
        relay = Relay(("127.0.0.1", port), LakeSink(lake, flush_interval=0.05))
        _, listen = await relay.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", listen)
        for n in range(0, len(client_bytes), 5):  # any chunking
            writer.write(client_bytes[n:n + 5])
            await writer.drain()
        got = await reader.readexactly(len(server_bytes))
        writer.write_eof()
        await asyncio.wait_for(reader.read(), 10)  # the upstream's EOF comes back through
        writer.close()
        await relay.close()
        lake.close()
        server.close()
        return b"".join(received), got

    upstream_got, client_got = asyncio.run(scenario())
    assert upstream_got == client_bytes and client_got == server_bytes  # never alters a byte
    frames = read_table(tmp_path, "frames")
    rows = frames.sort_by("seq").select(["direction", "channel", "frame_type", "method", "prefetch_count",
                                         "reply_code"]).to_pylist()
    methods = [(r["direction"], r["frame_type"], r["method"]) for r in rows]
    assert ("out", "protocol-header", None) in methods and ("out", "method", "basic.qos") in methods
    assert ("in", "method", "basic.deliver") in methods
    assert {r["reply_code"] for r in rows if r["frame_type"] == "gap"} == {540}  # the unknown method 60/99
    assert [r["prefetch_count"] for r in rows if r["method"] == "basic.qos"] == [7]
    kinds = audit_lake(tmp_path)["kind"].to_pylist()
    assert "unjudged-gap" in kinds  # counted, not dropped


def test_relay_survives_a_reset_on_either_side(tmp_path: Path) -> None:
    async def scenario() -> int:
        received: list[bytes] = []
        server, port = await _echo_upstream(received, b"")
        lake = RecordingLake(tmp_path, f"amqp://127.0.0.1:{port}")
        relay = Relay(("127.0.0.1", port), LakeSink(lake, flush_interval=0.05))
        _, listen = await relay.start("127.0.0.1", 0)
        for _ in range(3):
            _, writer = await asyncio.open_connection("127.0.0.1", listen)
            writer.write(HEADER)
            await writer.drain()
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # RST
        _, writer = await asyncio.open_connection("127.0.0.1", listen)  # still serving
        writer.write(HEADER)
        await writer.drain()
        writer.close()
        for _ in range(100):
            if relay.stats.open == 0:
                break
            await asyncio.sleep(0.05)
        await relay.close()
        lake.close()
        server.close()
        return relay.stats.connections

    assert asyncio.run(scenario()) == 4
    frames = read_table(tmp_path, "frames")
    assert pc.sum(pc.equal(frames["frame_type"], "protocol-header")).as_py() >= 1


def tcp_packets(client: bytes, server: bytes, sport: int, syn: bool) -> list[bytes]:
    src, dst = socket.inet_aton("10.0.0.2"), socket.inet_aton("10.0.0.1")

    def tcp(a: bytes, b: bytes, sp: int, dp: int, seq: int, flags: int, data: bytes = b"") -> bytes:
        segment = dpkt.tcp.TCP(sport=sp, dport=dp, seq=seq, flags=flags, data=data)
        ip = dpkt.ip.IP(src=a, dst=b, p=dpkt.ip.IP_PROTO_TCP, data=segment)
        ip.len = len(bytes(ip))
        return bytes(dpkt.ethernet.Ethernet(src=b"\x00" * 6, dst=b"\x00" * 6, data=ip))

    packets = []
    c_seq, s_seq = 1000, 5000
    if syn:
        packets.append(tcp(src, dst, sport, 5672, c_seq, dpkt.tcp.TH_SYN))
        packets.append(tcp(dst, src, 5672, sport, s_seq, dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK))
    c_seq, s_seq = c_seq + 1, s_seq + 1
    half = len(client) // 2
    second = tcp(src, dst, sport, 5672, c_seq + half, dpkt.tcp.TH_ACK, client[half:])
    packets += [second, tcp(src, dst, sport, 5672, c_seq, dpkt.tcp.TH_ACK, client[:half]), second]  # reordered, retransmitted
    packets.append(tcp(dst, src, 5672, sport, s_seq, dpkt.tcp.TH_ACK, server))
    return packets


def test_pcap_and_pcapng_imports_rebuild_the_streams(tmp_path: Path) -> None:
    client = HEADER + method(1, ChannelOpen()) + method(1, BasicQos(0, 3, False))
    server = method(1, BasicDeliver("c", 2, False, "", "q"))
    for writer_class, name in ((dpkt.pcap.Writer, "a.pcap"), (dpkt.pcapng.Writer, "a.pcapng")):
        capture = tmp_path / name
        with open(capture, "wb") as handle:
            writer = writer_class(handle)
            for n, packet in enumerate(tcp_packets(client, server, 40000, True) + tcp_packets(client, server, 40001, False)):
                writer.writepkt(packet, ts=1_700_000_000 + n / 1000)
        lake_dir = tmp_path / f"lake-{name}"
        lake = RecordingLake(lake_dir, f"pcap:{name}")
        stats = import_capture(capture, lake)
        lake.close()
        assert (stats.connections, stats.mid_stream) == (2, 1)
        rows = read_table(lake_dir, "frames").sort_by("seq").to_pylist()
        first = [(r["direction"], r["method"] or r["frame_type"]) for r in rows if r["connection"] == 1]
        assert first == [("out", "protocol-header"), ("out", "channel.open"), ("out", "basic.qos"),
                         ("in", "basic.deliver")]
        found = audit_lake(lake_dir).to_pylist()
        assert sorted((f["connection"], f["kind"]) for f in found) == [
            (1, "tag-sequence"), (2, "unjudged-mid-stream")]  # tag 2 first: a real finding; no SYN: counted
