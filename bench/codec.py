"""Codec benchmark: our codec against pamqp and pika, same inputs, one process.

What it measures (each case runs the full batch once per repeat):
- decode: one buffer of N deliveries (basic.deliver + content header with content_type,
  delivery_mode and a small headers table + a 100-byte body), built once with our encoder,
  decoded into frame objects by every implementation. Ours: `FrameReader.receive_data` on
  the whole buffer, then `next_frame()` until NEED_DATA (an extra row adds the
  `ContentAssembler`). pamqp and pika get each frame as an exact `bytes` slice (the length
  read with one `unpack_from`), as aiormq hands pamqp one frame at a time; this is the
  cheapest feeding their APIs allow (`buf[offset:]` on a large buffer is quadratic, and
  neither library accepts a memoryview).
- encode: N publishes (basic.publish + header + body frames, joined), the method and
  properties objects constructed inside the loop for every implementation.
- table: a nested field table of about 500 octets, encoded and decoded M times (pamqp is
  the headline peer, pika an extra row; pika gets `bytes` where the others get a
  `bytearray`, since each library only sends its own type as 'x').

How (robust to a busy machine): every implementation is warmed up and sanity-checked on the
same data first; then R short rounds (`--rounds`, 60, of 10-20 ms) each time every implementation of a
case once, back to back in one process, the order rotated per round, with the garbage
collector disabled. Timings are the thread's CPU time (`time.thread_time`), so the time
the process waits for a CPU on a loaded machine is not counted; what remains of the load
(caches, frequency) hits one round of every peer, not all rounds of one. Per implementation: min, median and the spread (median / min - 1).
Ratios: peer min / our min (the headline, >1: we are faster) and, as a cross-check, the
median over rounds of the ratio of the two timings taken back to back in that round, with its
inter-quartile range. The last stdout line is JSON with the min ratios.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import gc
import json
import os
import statistics
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pamqp.body
import pamqp.commands
import pamqp.decode
import pamqp.encode
import pamqp.frame
import pamqp.header
import pika.data
import pika.frame
import pika.spec

_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":  # `python bench/codec.py`: this file would shadow the codec package
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]
    sys.path.insert(0, str(_ROOT))

import codec  # noqa: E402
from codec.fast_tables import RABBITMQ_TABLES  # noqa: E402

HEADERS: dict[str, Any] = {"ok": True, "retry": 1, "x-trace": "abc123"}  # sorted: pamqp sorts keys
CONTENT_TYPE = "application/json"
_FRAME_SIZE = struct.Struct(">I")
Impl = tuple[str, Callable[[], object]]


def delivery_stream(n: int) -> bytes:
    parts = []
    for i in range(n):
        method = codec.BasicDeliver(consumer_tag="amq.ctag-bench", delivery_tag=i + 1, exchange="",
                                    routing_key="bench.q")
        props = codec.BasicProperties(content_type=CONTENT_TYPE, delivery_mode=2, headers=HEADERS)
        parts.append(codec.encode_content(1, method, props, b"%08d" % i + b"." * 92))
    return b"".join(parts)


# -- decode -------------------------------------------------------------------------------
def decode_ours(buf: bytes) -> list[Any]:
    reader = codec.FrameReader(frame_max=0)
    reader.receive_data(buf)
    next_frame, frames = reader.next_frame, []
    while (frame := next_frame()) is not codec.NEED_DATA:
        frames.append(frame)
    return frames


def assemble_ours(buf: bytes) -> list[Any]:
    reader, assembler = codec.FrameReader(frame_max=0), codec.ContentAssembler()
    reader.receive_data(buf)
    next_frame, feed, commands = reader.next_frame, assembler.feed, []
    while (frame := next_frame()) is not codec.NEED_DATA:
        if (command := feed(frame)) is not None:  # type: ignore[arg-type]
            commands.append(command)
    return commands


def decode_pamqp(buf: bytes) -> list[Any]:
    unmarshal, size_at, offset, frames = pamqp.frame.unmarshal, _FRAME_SIZE.unpack_from, 0, []
    while offset < len(buf):
        consumed, channel, frame = unmarshal(buf[offset : offset + 8 + size_at(buf, offset + 3)[0]])
        frames.append((channel, frame))
        offset += consumed
    return frames


def decode_pika(buf: bytes) -> list[Any]:
    decode_frame, size_at, offset, frames = pika.frame.decode_frame, _FRAME_SIZE.unpack_from, 0, []
    while offset < len(buf):
        consumed, frame = decode_frame(buf[offset : offset + 8 + size_at(buf, offset + 3)[0]])
        frames.append(frame)
        offset += consumed
    return frames


def check_decoders(buf: bytes, n: int) -> None:
    ours, pq, pk = decode_ours(buf), decode_pamqp(buf), decode_pika(buf)
    assert len(ours) == len(pq) == len(pk) == 3 * n, (len(ours), len(pq), len(pk))
    assert len(assemble_ours(buf)) == n
    k = n // 2
    tags = (ours[3 * k].method.delivery_tag, pq[3 * k][1].delivery_tag, pk[3 * k].method.delivery_tag)
    bodies = (ours[3 * k + 2].payload, pq[3 * k + 2][1].value, pk[3 * k + 2].fragment)
    heads = (ours[3 * k + 1].properties.headers, pq[3 * k + 1][1].properties.headers,
             pk[3 * k + 1].properties.headers)
    assert tags == (k + 1,) * 3, tags
    assert bodies[0] == bodies[1] == bodies[2] == b"%08d" % k + b"." * 92, bodies
    assert heads[0] == heads[1] == heads[2] == HEADERS, heads


# -- encode -------------------------------------------------------------------------------
def encode_ours(n: int, body: bytes) -> list[bytes]:
    encode, publish, properties = codec.encode_content, codec.BasicPublish, codec.BasicProperties
    return [
        encode(1, publish(exchange="", routing_key="bench.q"),
               properties(content_type=CONTENT_TYPE, delivery_mode=2, headers=HEADERS), body)
        for _ in range(n)
    ]


def encode_pamqp(n: int, body: bytes) -> list[bytes]:
    marshal, publish, properties = pamqp.frame.marshal, pamqp.commands.Basic.Publish, pamqp.commands.Basic.Properties
    header, content = pamqp.header.ContentHeader, pamqp.body.ContentBody
    return [
        b"".join((
            marshal(publish(exchange="", routing_key="bench.q"), 1),
            marshal(header(0, len(body), properties(content_type=CONTENT_TYPE, delivery_mode=2,
                                                    headers=HEADERS)), 1),
            marshal(content(body), 1),
        ))
        for _ in range(n)
    ]


def encode_pika(n: int, body: bytes) -> list[bytes]:
    method, header, content = pika.frame.Method, pika.frame.Header, pika.frame.Body
    publish, properties = pika.spec.Basic.Publish, pika.spec.BasicProperties
    return [
        b"".join((
            method(1, publish(exchange="", routing_key="bench.q")).marshal(),
            header(1, len(body), properties(content_type=CONTENT_TYPE, delivery_mode=2,
                                            headers=HEADERS)).marshal(),
            content(1, body).marshal(),
        ))
        for _ in range(n)
    ]


def check_encoders(body: bytes) -> None:
    ours, pq, pk = encode_ours(1, body)[0], encode_pamqp(1, body)[0], encode_pika(1, body)[0]
    frames = decode_pamqp(ours)
    assert [type(f).__name__ for _, f in frames] == ["Publish", "ContentHeader", "ContentBody"]
    assert frames[0][1].routing_key == "bench.q" and frames[2][1].value == body
    assert frames[1][1].properties.headers == HEADERS and frames[1][1].properties.delivery_mode == 2
    for name, peer in (("pamqp", pq), ("pika", pk)):
        if peer != ours:
            print(f"note: {name}'s publish bytes differ from ours ({len(peer)} vs {len(ours)} octets)")


# -- field tables ---------------------------------------------------------------------------
def sample_table() -> dict[str, Any]:
    """About 500 octets: nested tables and arrays, strings, 5 integer sizes, bools, D, T, x, V."""
    when = datetime.datetime(2024, 5, 1, 12, 30, 15, tzinfo=datetime.UTC)
    return {
        "trace-id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span": {"id": "00f067aa0ba902b7", "sampled": True, "depth": 3,
                 "parent": {"service": "checkout", "version": "2.14.1", "attempt": 2}},
        "retries": [1, 300, 70000, 5000000000, -5],
        "tags": ["red", "green", "blue", True, False],
        "small": -7, "short": -1200, "ushort": 50000, "int": -100000, "uint": 3000000000,
        "long": 2**40, "price": decimal.Decimal("12.34"), "sent-at": when, "expires": None,
        "blob": bytearray(b"\x00\x01\x02\x03" * 4),
        "x-death": [{"count": 1, "exchange": "", "queue": "orders", "reason": "rejected",
                     "routing-keys": ["orders"]}],
        "nested": {"a": {"b": {"c": "deep", "n": 42}}, "list": [{"k": "v"}], "empty": {}},
    }


def for_pika(value: Any) -> Any:
    """pika sends `bytes` as 'x' and rejects `bytearray`; pamqp the other way round."""
    if isinstance(value, dict):
        return {k: for_pika(v) for k, v in value.items()}
    if isinstance(value, list):
        return [for_pika(v) for v in value]
    return bytes(value) if isinstance(value, bytearray) else value


def pika_encode_table(table: dict[str, Any]) -> bytes:
    pieces: list[bytes] = []
    pika.data.encode_table(pieces, table)
    return b"".join(pieces)


def repeat(n: int, fn: Callable[[Any], Any], arg: Any) -> Callable[[], object]:
    def run() -> object:
        result = None
        for _ in range(n):
            result = fn(arg)
        return result

    return run


# -- harness ------------------------------------------------------------------------------
def measure(cases: dict[str, list[Impl]], rounds: int) -> dict[tuple[str, str], list[float]]:
    """Per (case, implementation): one timing per round; peers of a case run back to back."""
    times: dict[tuple[str, str], list[float]] = {}
    for impls in cases.values():
        for _name, fn in impls:
            fn()  # warm-up
    for r in range(rounds):
        for case, impls in cases.items():
            for i in range(len(impls)):
                name, fn = impls[(i + r) % len(impls)]
                gc.collect()
                gc.disable()
                try:
                    start = time.thread_time()  # CPU time of this thread: time spent
                    fn()  # descheduled on a loaded machine is not counted (wall clock would be)
                    elapsed = time.thread_time() - start
                finally:
                    gc.enable()
                times.setdefault((case, name), []).append(elapsed)
    return times


def paired(ours: list[float], peer: list[float]) -> tuple[float, float, float]:
    """Median and quartiles over rounds of peer / ours, each pair timed back to back."""
    ratios = sorted(p / o for o, p in zip(ours, peer, strict=True))
    q1, median, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    return median, q1, q3


def report(times: dict[tuple[str, str], list[float]], ops: dict[str, int]) -> dict[str, float]:
    best = {key: min(values) for key, values in times.items()}
    print(f"{'case':<13} {'implementation':<15} {'min ms':>8} {'median ms':>9} {'spread':>7} {'ops/s':>10} "
          f"{'x ours':>7} {'paired x ours [IQR]':>22}")
    for (case, name), values in times.items():
        ratio = best[case, name] / best[case, "ours"]
        median, q1, q3 = paired(times[case, "ours"], values)
        spread = statistics.median(values) / best[case, name] - 1
        print(f"{case:<13} {name:<15} {best[case, name] * 1e3:8.2f} {statistics.median(values) * 1e3:9.2f} "
              f"{spread:7.1%} {ops[case] / best[case, name]:10,.0f} {ratio:7.2f} "
              f"{f'{median:.2f} [{q1:.2f}-{q3:.2f}]':>22}")
    return {
        f"{case}_x_{peer}": round(best[case, peer] / best[case, "ours"], 3)
        for case, peer in (("decode", "pamqp"), ("encode", "pamqp"), ("table_decode", "pamqp"),
                           ("table_encode", "pamqp"), ("decode", "pika"), ("encode", "pika"))
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke test: fewer messages and rounds")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per implementation (60)")
    parser.add_argument("--messages", type=int, default=None, help="deliveries/publishes per round (500)")
    parser.add_argument("--tables", type=int, default=None, help="table encodes/decodes per round (300)")
    args = parser.parse_args(argv)
    # short rounds (10-20 ms each): on a loaded machine some of them run without being preempted
    n = args.messages or (200 if args.quick else 500)
    iterations = args.tables or (200 if args.quick else 300)
    rounds = args.rounds or (5 if args.quick else 60)

    stream, body = delivery_stream(n), b"." * 100
    table = sample_table()
    pika_table = for_pika(table)
    wire = RABBITMQ_TABLES.encode_table(table)
    check_decoders(stream, n)
    check_encoders(body)
    assert RABBITMQ_TABLES.decode_table(wire, 0) == (table, len(wire))
    assert pamqp.decode.field_table(wire) == (len(wire), table)
    assert pika.data.decode_table(wire, 0) == (pika_table, len(wire))
    assert pamqp.decode.field_table(pamqp.encode.field_table(table))[1] == table
    assert pika.data.decode_table(pika_encode_table(pika_table), 0)[0] == pika_table

    cases: dict[str, list[Impl]] = {
        "decode": [("ours", lambda: decode_ours(stream)), ("ours+assembler", lambda: assemble_ours(stream)),
                   ("pamqp", lambda: decode_pamqp(stream)), ("pika", lambda: decode_pika(stream))],
        "encode": [("ours", lambda: encode_ours(n, body)), ("pamqp", lambda: encode_pamqp(n, body)),
                   ("pika", lambda: encode_pika(n, body))],
        "table_decode": [("ours", repeat(iterations, lambda b: RABBITMQ_TABLES.decode_table(b, 0), wire)),
                         ("pamqp", repeat(iterations, pamqp.decode.field_table, wire)),
                         ("pika", repeat(iterations, lambda b: pika.data.decode_table(b, 0), wire))],
        "table_encode": [("ours", repeat(iterations, RABBITMQ_TABLES.encode_table, table)),
                         ("pamqp", repeat(iterations, pamqp.encode.field_table, table)),
                         ("pika", repeat(iterations, pika_encode_table, pika_table))],
    }
    ops = {"decode": n, "encode": n, "table_decode": iterations, "table_encode": iterations}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"python {sys.version.split()[0]}, pamqp {pamqp.__version__}, pika {pika.__version__}; "
          f"{n} messages, table {len(wire)} octets x {iterations}, {rounds} rounds, {os.cpu_count()} CPUs, "
          f"load average {load:.1f} at the start")
    summary = report(measure(cases, rounds), ops)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
