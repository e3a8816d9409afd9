"""The fuzzer's vocabulary (tests/reliability/fuzz_cases.py builds its cases from it): the `Case`
record and the broker's `Limits`, the method tables, and frame generators: well-formed commands
(`wire`, `body_frames`), how a case travels (`tunes`, `delivered`), and malformed frames each
with the reply code it must get (ERR-04, FRM-03).

Rules:
- A `Case` is data: the handshake stage it starts from, its frames, how they are split across
  writes, and the allowed outcomes (their form is in fuzz_cases.py).
- Valid frames stay within the frame limit in force (FRM-03 has cases of its own); a payload of
  exactly frame_max is valid (FRM-03's 8-octet allowance).
- The codec's slow construct path is asked one thing only: whether argument bytes decode.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from codec import (
    METHOD_CLASSES,
    BasicProperties,
    CodecError,
    Method,
    encode_frame,
    encode_header,
    encode_method,
)
from codec.constants import RABBITMQ_FRAME_MIN_SIZE_4_1
from codec.construct_path import decode_method_payload
from codec.frames import encode_header_payload, encode_method_payload
from codec.spec import ILLEGAL_PROPERTY_FLAGS
from tests.codec.strategies import method_of
from tests.codec.strategies import properties as any_properties

STAGES = ("raw", "start_ok", "tune_ok", "open", "opened")  # open: tune-ok sent; opened: channel 1 open
EARLY = ("start_ok", "tune_ok")  # before tune-ok: codec errors close silently
# What a broker implements from a client: the 0-9-1 server chassis, RabbitMQ's extensions, CCN-05.
CLIENT_SENT = frozenset([
    "connection.start-ok", "connection.secure-ok", "connection.tune-ok", "connection.open", "connection.close",
    "connection.close-ok", "connection.update-secret", "channel.open", "channel.flow", "channel.flow-ok",
    "channel.close", "channel.close-ok", "exchange.declare", "exchange.delete", "exchange.bind",
    "exchange.unbind", "queue.declare", "queue.bind", "queue.purge", "queue.delete", "queue.unbind", "basic.qos",
    "basic.consume", "basic.cancel", "basic.cancel-ok", "basic.publish", "basic.get", "basic.ack", "basic.reject",
    "basic.recover-async", "basic.recover", "basic.nack", "confirm.select", "tx.select", "tx.commit",
    "tx.rollback"])
ALL = tuple(sorted(METHOD_CLASSES.values(), key=lambda c: c.INDEX))
CONTENT = tuple(c for c in ALL if c.HAS_CONTENT)
SERVER_ONLY = tuple(c for c in ALL if c.NAME not in CLIENT_SENT and c.CLASS_ID != 10)
CONNECTION = tuple(c for c in ALL if c.CLASS_ID == 10)
FRAMING_KINDS = ("unknown_type", "bad_end", "oversized", "heartbeat_payload", "heartbeat_channel", "orphan_body",
                 "orphan_header", "bad_header", "short_method", "unknown_method", "bad_args")
channels = st.integers(0, 65535)
not_opened = st.integers(2, 65535)


@dataclass(frozen=True)
class Limits:
    """What the broker offers in connection.tune, and FRAME_MIN_SIZE (FRM-02, 4.1+)."""

    channel_max: int = 2047
    frame_max: int = 131072
    frame_min: int = RABBITMQ_FRAME_MIN_SIZE_4_1


@dataclass(frozen=True)
class Case:
    kind: str
    stage: str  # one of STAGES
    frames: tuple[bytes, ...]  # the input; one entry may be a malformed or cut frame
    expect: tuple[str, ...]  # the outcomes the rules allow
    tune: tuple[int, int] = (2047, 131072)  # channel_max, frame_max in tune-ok
    cuts: tuple[int, ...] = ()  # offsets where the input is split across writes
    pipelined: bool = False  # sent in the handshake's write, without waiting for its replies
    halfclose: bool = True  # shut the write side right after the input
    settle: int = 0  # events after which the client closes politely (0: the broker ends it)
    content: tuple[BasicProperties, bytes] | None = None  # what a basic.return must carry back

    @property
    def data(self) -> bytes:
        return b"".join(self.frames)

    def __repr__(self) -> str:
        data = self.data
        shown = data[:64].hex(" ") + (f" … ({len(data)} B)" if len(data) > 64 else "")
        how = ("pipelined, " if self.pipelined else "") + ("half-closed, " if self.halfclose else "")
        return (f"<{self.kind} at {self.stage}, expect {' | '.join(self.expect)}; {how}tune={self.tune}, "
                f"cuts={list(self.cuts)}: {shown}>")


# -- building blocks ---------------------------------------------------------------------
def methods(classes: Sequence[type]) -> st.SearchStrategy[Method]:
    return st.sampled_from(list(classes)).flatmap(lambda c: method_of(c.INDEX))


def no_reply_to(p: BasicProperties) -> bool:
    """Properties a publish may carry without a rule of its own refusing or diverting it: not direct
    reply-to (ROUTE-14), no user-id but the connection's (MSG-02), no CC or BCC that is not an array
    (ROUTE-13), no expiration but a number of ms up to ten years (TTL-01)."""
    headers = p.headers or {}
    return (p.reply_to != "amq.rabbitmq.reply-to" and p.user_id in (None, "guest")
            and all(isinstance(headers[k], list) for k in ("CC", "BCC") if k in headers)
            and (p.expiration is None or valid_expiration(p.expiration)))


def valid_expiration(text: str) -> bool:
    """TTL-01: Erlang's string:to_integer over the whole string, from 0 to ten years in ms."""
    return re.fullmatch(r"[+-]?[0-9]+", text) is not None and 0 <= int(text) <= 315_360_000_000


def wire(draw: Any, ch: int, m: Method, limit: int) -> tuple[bytes, ...]:
    """A complete command as frames; content bodies split at random, each frame within `limit`."""
    frames: tuple[bytes, ...] = (encode_method(ch, m),)
    if m.HAS_CONTENT:
        body = draw(st.binary(max_size=3 * limit // 2))
        frames += (encode_header(ch, len(body), draw(any_properties.filter(no_reply_to))),
                   *body_frames(draw, ch, body, limit))
    assume(all(len(f) - 8 <= limit for f in frames))
    return frames


def body_frames(draw: Any, ch: int, body: bytes, limit: int) -> list[bytes]:
    """Body frames cut at random points (empty frames allowed while octets remain), at most
    `limit` octets each, sometimes exactly `limit` (FRM-03)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=5)))
    parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    while parts and not parts[-1]:
        parts.pop()  # an empty body frame after the last octet would be an orphan (505)
    step = draw(st.sampled_from([limit - 8, limit]))
    return [encode_frame(3, ch, p[i:i + step]) for p in parts for i in range(0, max(len(p), 1), step)]


@st.composite
def tunes(draw: Any, limits: Limits) -> tuple[int, int]:
    channel_max = draw(st.sampled_from([limits.channel_max, 1]) | st.integers(1, limits.channel_max))
    frame_max = draw(st.sampled_from([limits.frame_max, limits.frame_min])
                     | st.integers(limits.frame_min, limits.frame_max))
    return channel_max, frame_max


@st.composite
def delivered(draw: Any, case: Case, halfclose: bool | None = None) -> Case:
    """How the input travels: split points, with or without the handshake, half-closed or not."""
    size = len(case.data)
    cuts = draw(st.lists(st.integers(1, size - 1), max_size=6)) if size > 1 else []
    shut = draw(st.booleans().map(lambda keep_open: not keep_open))  # shrinks to True: no hang
    return replace(case, cuts=tuple(sorted(set(cuts))), pipelined=draw(st.booleans()),
                   halfclose=shut if halfclose is None else halfclose)


# -- malformed frames (ERR-04, FRM-03) ---------------------------------------------------
@st.composite
def malformed_frame(draw: Any, kind: str, limit: int) -> tuple[bytes, int]:
    """One malformed frame and the code it must get."""
    ch = draw(channels)
    if kind == "unknown_type":
        ftype = draw(st.integers(0, 255).filter(lambda t: t not in (1, 2, 3, 8)))
        return encode_frame(ftype, ch, draw(st.binary(max_size=64))), 501
    if kind == "bad_end":
        ftype = draw(st.sampled_from([1, 2, 3, 8]) | st.integers(0, 255))
        end = draw(st.integers(0, 255).filter(lambda b: b != 0xCE))
        return encode_frame(ftype, ch, draw(st.binary(max_size=64)), bytes([end])), 501
    if kind == "oversized":  # known from the 7-octet header, before any payload (FRM-03)
        size = draw(st.integers(limit + 1, limit + 8) | st.integers(limit + 1, 2**32 - 1))
        return struct.pack(">BHI", draw(st.integers(0, 255)), ch, size) + draw(st.binary(max_size=300)), 501
    if kind == "heartbeat_payload":
        return encode_frame(8, ch, draw(st.binary(min_size=1, max_size=64))), 501
    if kind == "heartbeat_channel":
        return encode_frame(8, draw(st.integers(1, 65535)), b""), 505
    if kind == "orphan_body":
        return encode_frame(3, ch, draw(st.binary(max_size=200))), 505
    if kind == "orphan_header":
        return encode_frame(2, ch, draw(header_payloads())), 505
    if kind == "bad_header":
        return encode_frame(2, ch, draw(bad_header_payloads())), 502
    if kind == "short_method":
        return encode_frame(1, ch, draw(st.binary(max_size=3))), 502
    if kind == "unknown_method":
        ids = draw(st.tuples(st.integers(0, 65535), st.integers(0, 65535))
                   .filter(lambda i: (i[0] << 16 | i[1]) not in METHOD_CLASSES))
        return encode_frame(1, ch, struct.pack(">HH", *ids) + draw(st.binary(max_size=64))), 540
    return encode_frame(1, ch, draw(bad_method_payloads())), 501  # "cannot decode", as 3.10.8


@st.composite
def header_payloads(draw: Any) -> bytes:
    """Well-formed content-header payloads: basic's (class 60) or another class's (14+ octets)."""
    if draw(st.booleans()):
        return encode_header_payload(draw(st.integers(0, 2**64 - 1)), draw(any_properties))
    class_id = draw(st.integers(0, 65535).filter(lambda c: c != 60))
    return struct.pack(">H", class_id) + draw(st.binary(min_size=12, max_size=40))


@st.composite
def bad_header_payloads(draw: Any) -> bytes:
    """Content-header payloads that cannot be decoded (502 SYNTAX_ERROR)."""
    good = encode_header_payload(draw(st.integers(0, 2**64 - 1)), draw(any_properties))
    how = draw(st.sampled_from(["cut", "trailing", "flags", "short_other"]))
    if how == "cut":
        return good[:draw(st.integers(0, len(good) - 1))]
    if how == "trailing":
        return good + draw(st.binary(min_size=1, max_size=16))
    if how == "flags":
        flags = struct.unpack_from(">H", good, 12)[0] | draw(st.integers(1, ILLEGAL_PROPERTY_FLAGS))
        return good[:12] + struct.pack(">H", flags) + good[14:]
    return struct.pack(">H", draw(st.integers(0, 65535))) + draw(st.binary(max_size=11))


@st.composite
def bad_method_payloads(draw: Any) -> bytes:
    """A known method id with argument bytes the slow construct path rejects."""
    good = encode_method_payload(draw(methods(ALL)))
    how = draw(st.sampled_from(["cut", "trailing", "flip", "random"]))
    if how in ("cut", "flip"):
        assume(len(good) > 4)
    if how == "cut":
        payload = good[:draw(st.integers(4, len(good) - 1))]
    elif how == "trailing":
        payload = good + draw(st.binary(min_size=1, max_size=16))
    elif how == "flip":
        at = draw(st.integers(4, len(good) - 1))
        payload = good[:at] + bytes([good[at] ^ draw(st.integers(1, 255))]) + good[at + 1:]
    else:
        payload = good[:4] + draw(st.binary(max_size=64))
    try:
        decode_method_payload(payload)
    except CodecError:
        return payload
    assume(False)  # it still decodes: a valid method, not this kind's business
    raise AssertionError("unreachable")
