"""Import packet captures (pcap and pcapng) of AMQP traffic into the results lake.

Responsibility: read a capture with dpkt (`dpkt.pcap.UniversalReader`: pcap or pcapng; Ethernet,
Linux cooked or raw IP link types), rebuild each TCP connection to the broker's port in both
directions, and feed the bytes to the same `StreamTap` and `RecordingLake` as the relay, with
each packet's capture time.

Rules:
- A connection is the pair of TCP flows between a client address and the broker port; the
  client side is the one whose destination port is the broker's.
- Segments are put in sequence order; retransmitted bytes are dropped; a hole (a segment the
  capture missed) is lost framing: the tap writes a `gap` and decodes no more of that direction.
- A connection whose SYN is not in the capture was recorded mid-stream: it gets one `gap` row on
  channel -1 and none of its bytes are decoded (frame boundaries are unknown), so the audit
  reports it as not judged instead of guessing.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import dpkt

from conformance.interpose.tap import StreamTap
from conformance.results.lake import RecordingLake

Endpoint = tuple[bytes, int]


@dataclass
class _Flow:
    tap: StreamTap
    next_seq: int | None = None  # None until the SYN (or mid-stream: never)
    pending: dict[int, bytes] = field(default_factory=dict)


@dataclass
class _Connection:
    number: int
    out: _Flow
    inn: _Flow
    mid_stream: bool = False


@dataclass
class ImportStats:
    packets: int = 0
    connections: int = 0
    mid_stream: int = 0
    frames: int = 0


def import_capture(path: Path, lake: RecordingLake, broker_port: int = 5672) -> ImportStats:
    """Add every AMQP connection to `broker_port` found in the capture at `path` to `lake`."""
    stats = ImportStats()
    connections: dict[tuple[Endpoint, Endpoint], _Connection] = {}
    with open(path, "rb") as handle:
        for ts, tcp, source, target in _segments(dpkt.pcap.UniversalReader(handle)):
            stats.packets += 1
            if broker_port not in (tcp.sport, tcp.dport):
                continue
            outgoing = tcp.dport == broker_port
            client = (source, tcp.sport) if outgoing else (target, tcp.dport)
            broker = (target, tcp.dport) if outgoing else (source, tcp.sport)
            connection = connections.get((client, broker))
            if connection is None:
                connection = _open(lake, stats, ts, tcp, outgoing)
                connections[client, broker] = connection
            if not connection.mid_stream:
                flow = connection.out if outgoing else connection.inn
                _segment(lake, connection.number, flow, tcp, ts)
    stats.frames = lake.seq
    return stats


def _open(lake: RecordingLake, stats: ImportStats, ts: float, tcp: dpkt.tcp.TCP, outgoing: bool) -> _Connection:
    stats.connections += 1
    syn = bool(tcp.flags & dpkt.tcp.TH_SYN) and not (tcp.flags & dpkt.tcp.TH_ACK) and outgoing
    connection = _Connection(stats.connections, _Flow(StreamTap("out", client_side=True)),
                             _Flow(StreamTap("in", client_side=False)), mid_stream=not syn)
    if connection.mid_stream:
        stats.mid_stream += 1
        lake.add(connection.number, "out", {"channel": -1, "frame_type": "gap",
                                            "reply_text": "connection captured mid-stream (no SYN): not decoded"}, ts)
    return connection


def _segment(lake: RecordingLake, number: int, flow: _Flow, tcp: dpkt.tcp.TCP, ts: float) -> None:
    if tcp.flags & dpkt.tcp.TH_SYN:
        flow.next_seq = (tcp.seq + 1) & 0xFFFFFFFF
        return
    if flow.next_seq is None:
        if not tcp.data:
            return
        flow.next_seq = tcp.seq  # the broker's side: its SYN-ACK started the numbering
    data = bytes(tcp.data)
    if not data:
        return
    offset = (tcp.seq - flow.next_seq) & 0xFFFFFFFF
    if offset >= 0x80000000:  # old data: a retransmission, maybe partly new
        overlap = (flow.next_seq - tcp.seq) & 0xFFFFFFFF
        if overlap >= len(data):
            return
        data, offset = data[overlap:], 0
    flow.pending[offset + flow.next_seq] = data
    _drain(lake, number, flow, ts)


def _drain(lake: RecordingLake, number: int, flow: _Flow, ts: float) -> None:
    assert flow.next_seq is not None
    while (chunk := flow.pending.pop(flow.next_seq, None)) is not None:
        flow.next_seq = (flow.next_seq + len(chunk)) & 0xFFFFFFFF
        for row in flow.tap.feed(chunk):
            lake.add(number, flow.tap.direction, row, ts)
    if len(flow.pending) > 1000 and not flow.tap.lost:  # a hole the capture never filled
        flow.pending.clear()
        lake.add(number, flow.tap.direction, flow.tap.lose("segments missing from the capture: framing lost"), ts)


def _segments(reader: dpkt.pcap.UniversalReader) -> Iterator[tuple[float, dpkt.tcp.TCP, bytes, bytes]]:
    link = reader.datalink()
    for ts, buf in reader:
        ip = _ip(link, buf)
        if ip is not None and isinstance(ip.data, dpkt.tcp.TCP):
            yield float(ts), ip.data, bytes(ip.src), bytes(ip.dst)


def _ip(link: int, buf: bytes) -> dpkt.ip.IP | dpkt.ip6.IP6 | None:
    try:
        if link == dpkt.pcap.DLT_EN10MB:
            packet = dpkt.ethernet.Ethernet(buf).data
        elif link == dpkt.pcap.DLT_LINUX_SLL:
            packet = dpkt.sll.SLL(buf).data
        elif link in (dpkt.pcap.DLT_RAW, 101):  # raw IP (LINKTYPE_RAW is 101 in files)
            packet = dpkt.ip.IP(buf) if buf[:1] and buf[0] >> 4 == 4 else dpkt.ip6.IP6(buf)
        elif link == dpkt.pcap.DLT_NULL:
            packet = dpkt.loopback.Loopback(buf).data
        else:
            return None
    except (dpkt.UnpackError, IndexError):
        return None
    return packet if isinstance(packet, dpkt.ip.IP | dpkt.ip6.IP6) else None


def address(raw: bytes) -> str:
    """An IPv4 or IPv6 address as text (for messages)."""
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)
