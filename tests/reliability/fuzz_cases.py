"""The fuzzer's cases and their oracle: Hypothesis strategies of malformed, truncated, oversized
and out-of-sequence input, each with the outcomes the rules allow (tests/reliability/fuzz.py
sends them). The `Case` record, the method tables and the frame generators, malformed frames
among them, are in tests/reliability/fuzz_frames.py.

Rules:
- A `Case` is data: the handshake stage it starts from, its frames, how they are split across
  writes, and the allowed outcomes. Expectations come from RULES.md (ERR-02/ERR-03/ERR-04,
  FRM-01..03, ACK-03/06, QOS-01, QOS-11, ACK-09, PC-06, PC-12), 0-9-1 §4.2.2 (a wrong protocol
  header is answered with the broker's own header, then the socket closes) and the handshake
  table (reference_broker/protocol/states.py: 503), never from the broker; the codec's slow
  construct path is asked one thing only: whether argument bytes decode.
- Before tune-ok the broker closes without a word on a codec error (RabbitMQ's reader does not
  trust the client yet); from tune-ok on it answers with connection.close (ERR-02).
- An outcome is a string: the events after the handshake joined by " > " ("close 501",
  "ch-close 406 > close 501", "refused", "channel.open-ok > close 530"), "silent" for none.
- Valid frames stay within the frame limit in force (FRM-03 has cases of its own); a payload of
  exactly frame_max is valid (FRM-03's 8-octet allowance).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from codec import (
    PROTOCOL_HEADER,
    BasicAck,
    BasicNack,
    BasicPublish,
    BasicQos,
    BasicRecover,
    BasicRecoverAsync,
    BasicReject,
    ChannelClose,
    ChannelCloseOk,
    ChannelFlow,
    ChannelOpen,
    ConfirmSelect,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionStartOk,
    ConnectionTuneOk,
    ConnectionUpdateSecret,
    Method,
    encode_frame,
    encode_header,
    encode_heartbeat,
    encode_method,
)
from codec.frames import encode_header_payload
from tests.codec.strategies import method_of
from tests.codec.strategies import properties as any_properties
from tests.reliability.fuzz_frames import (
    ALL,
    CONNECTION,
    CONTENT,
    EARLY,
    FRAMING_KINDS,
    SERVER_ONLY,
    STAGES,
    Case,
    Limits,
    body_frames,
    channels,
    delivered,
    malformed_frame,
    methods,
    no_reply_to,
    not_opened,
    tunes,
    wire,
)

SEQUENCE_KINDS = ("unopened_channel", "second_open", "server_only", "connection_on_channel", "channel_zero",
                  "hard_method", "channel_max", "content_order", "after_channel_close", "after_close")
HANDSHAKE_KINDS = ("wrong_method", "tune_bounds", "truncated")
DEFAULT_LIMITS = Limits()  # what the reference broker offers


def strategies(limits: Limits = DEFAULT_LIMITS) -> dict[str, st.SearchStrategy[Case]]:
    """One strategy per kind of case."""
    out = {"bad_protocol_header": header_cases(True), "short_protocol_header": header_cases(False)}
    out |= {kind: framing_cases(limits, kind) for kind in FRAMING_KINDS}
    out |= {kind: sequence_cases(limits, kind) for kind in SEQUENCE_KINDS}
    out |= {kind: handshake_cases(limits, kind) for kind in HANDSHAKE_KINDS}
    out["valid_publish"] = valid_cases(limits)
    return out


def shares(count: int, kinds: Sequence[str]) -> dict[str, int]:
    """How many of `count` cases each kind gets: equal shares, the valid round trip two."""
    weights = {kind: 2 if kind == "valid_publish" else 1 for kind in kinds}
    total = sum(weights.values())
    out = {kind: count * w // total for kind, w in weights.items()}
    for kind in list(kinds)[:count - sum(out.values())]:
        out[kind] += 1
    return out


# -- malformed frames (ERR-04, FRM-03; the frames are fuzz_frames.malformed_frame's) --------
@st.composite
def framing_cases(draw: Any, limits: Limits, kind: str) -> Case:
    stage = draw(st.sampled_from(["start_ok", "tune_ok", "open", "opened"]))
    tune = draw(tunes(limits))
    frame, code = draw(malformed_frame(kind, limits.frame_min if stage in EARLY else tune[1]))
    expect = "silent" if stage in EARLY else f"close {code}"
    return draw(delivered(Case(kind, stage, (frame,), (expect,), tune)))


# -- well-formed frames in the wrong place (ERR-03, ERR-04) -------------------------------
@st.composite
def sequence_cases(draw: Any, limits: Limits, kind: str) -> Case:
    tune = draw(tunes(limits))
    limit = tune[1]
    expect: tuple[str, ...]
    if kind == "unopened_channel":  # any method before channel.open, connection.* too
        m = draw(methods([c for c in ALL if c is not ChannelOpen]))
        frames, expect = wire(draw, draw(not_opened), m, limit), ("close 504",)
    elif kind == "second_open":
        frames, expect = (encode_method(1, ChannelOpen()),), ("close 504",)
    elif kind == "server_only":  # a method the broker does not handle from a client
        frames, expect = wire(draw, 1, draw(methods(SERVER_ONLY)), limit), ("close 503",)
    elif kind == "connection_on_channel":
        frames, expect = wire(draw, 1, draw(methods(CONNECTION)), limit), ("close 503",)
    elif kind == "channel_zero":  # rabbit_reader:handle_method0 says 504; the suite accepts 503 too
        m = draw(methods([c for c in ALL if c not in (ConnectionClose, ConnectionUpdateSecret)]))
        frames = wire(draw, 0, m, limit)
        expect = ("close 503", "close 504") if m.CLASS_ID == 10 else ("close 504",)
    elif kind == "hard_method":
        frames, expect = wire(draw, 1, draw(hard_methods()), limit), ("close 540",)
    elif kind == "channel_max":  # opening past the negotiated channel_max
        tune = (draw(st.integers(1, 4)), tune[1])
        numbers = draw(st.lists(not_opened, min_size=tune[0], max_size=tune[0], unique=True))
        frames = tuple(encode_method(n, ChannelOpen()) for n in numbers)
        expect = (" > ".join(["channel.open-ok"] * (tune[0] - 1) + ["close 530"]),)
    elif kind == "content_order":
        frames, code = draw(content_out_of_order(limit))
        expect = (f"close {code}",)
    elif kind == "after_channel_close":  # ERR-03: the broker closed the channel, the rest is dropped
        frames = (encode_method(1, draw(unknown_tag_settlement())),)
        ignored = methods([c for c in ALL if c not in (ChannelClose, ChannelCloseOk)])
        for m in draw(st.lists(ignored, max_size=4)):
            frames += wire(draw, 1, m, limit)
        frames += (encode_frame(draw(st.sampled_from([0, 4, 9, 255])), draw(channels), b""),)
        expect = ("ch-close 406 > close 501",)
    else:
        frames, expect = draw(after_close(limit))
    return draw(delivered(Case(kind, "opened", frames, expect, tune)))


def hard_methods() -> st.SearchStrategy[Method]:
    """Connection errors raised by a method's values: QOS-01, QOS-11, ACK-09, PC-12 (all 540)."""
    return st.one_of(
        method_of(BasicQos.INDEX).map(lambda m: m._replace(prefetch_size=m.prefetch_size or 1)),
        method_of(ChannelFlow.INDEX).map(lambda m: m._replace(active=False)),
        method_of(BasicRecover.INDEX).map(lambda m: m._replace(requeue=False)),
        method_of(BasicRecoverAsync.INDEX).map(lambda m: m._replace(requeue=False)),
        method_of(BasicPublish.INDEX).map(lambda m: m._replace(immediate=True)),
    )


def unknown_tag_settlement() -> st.SearchStrategy[Method]:
    """ACK-03/ACK-06: nothing was delivered on the channel, so every tag is unknown (406)."""
    tag = st.integers(1, 2**64 - 1)
    return st.one_of(st.builds(BasicAck, tag, st.booleans()), st.builds(BasicAck, st.just(0), st.just(False)),
                     st.builds(BasicReject, st.integers(0, 2**64 - 1), st.booleans()),
                     st.builds(BasicNack, tag, st.booleans(), st.booleans()))


@st.composite
def content_out_of_order(draw: Any, limit: int) -> tuple[tuple[bytes, ...], int]:
    """A content method followed by a frame the assembler must refuse (0-9-1 §4.2.6, ERR-04)."""
    ch = draw(st.integers(1, 65535))
    frames: tuple[bytes, ...] = (encode_method(ch, draw(methods(CONTENT))),)
    how = draw(st.sampled_from(["method", "body", "other_class", "weight", "header_twice", "short_body",
                                "long_body"]))
    if how == "method":
        return (*frames, encode_method(ch, draw(methods(ALL)))), 505
    if how == "body":
        return (*frames, encode_frame(3, ch, draw(st.binary(max_size=64)))), 505
    if how == "other_class":
        other = draw(st.integers(0, 65535).filter(lambda c: c != 60))
        return (*frames, encode_frame(2, ch, struct.pack(">HHQH", other, 0, 0, 0))), 505
    if how == "weight":
        payload = encode_header_payload(draw(st.integers(0, 2**64 - 1)), draw(any_properties))
        payload = payload[:2] + struct.pack(">H", draw(st.integers(1, 65535))) + payload[4:]
        return (*frames, encode_frame(2, ch, payload)), 505
    size = draw(st.integers(1, 4 * limit))
    frames += (encode_header(ch, size),)
    if how == "header_twice":
        return (*frames, encode_header(ch, size)), 505
    if how == "short_body":
        frames += tuple(body_frames(draw, ch, bytes(draw(st.integers(0, size - 1))), limit))
        return (*frames, encode_method(ch, draw(methods(ALL)))), 505
    # a body larger than declared (501); no prefix of the frames may end the body exactly
    sent = draw(st.integers(max(0, size - (limit - 9)), size - 1))
    last = draw(st.integers(size - sent + 1, limit - 8))
    return (*frames, *body_frames(draw, ch, bytes(sent), limit), encode_frame(3, ch, bytes(last))), 501


@st.composite
def after_close(draw: Any, limit: int) -> tuple[tuple[bytes, ...], tuple[str, ...]]:
    """After its connection.close the broker answers only close (close-ok) and close-ok
    (rabbit_reader in `closing`); anything else, malformed or not, gets nothing."""
    frames: tuple[bytes, ...] = (encode_method(1, ChannelOpen()),)  # 504, a second channel.open
    garbled, closes = False, 0  # closes: the client's connection.close frames before any garbling
    others = methods([c for c in ALL if c not in (ConnectionClose, ConnectionCloseOk)])
    for what in draw(st.lists(st.sampled_from(["method", "malformed", "close"]), max_size=4)):
        if what == "method":
            frames += wire(draw, draw(st.sampled_from([0, 1]) | channels), draw(others), limit)
        elif what == "malformed":
            frames += (draw(malformed_frame(draw(st.sampled_from(FRAMING_KINDS)), limit))[0],)
            garbled = True  # the stream cannot be trusted any more
        else:
            frames += (encode_method(0, ConnectionClose(200, "bye", 0, 0)),)
            closes += 0 if garbled else 1
    if not closes:
        return frames, ("close 504",)
    # the first crossed close is answered; a later one may be answered again (rabbit_reader answers
    # every connection.close while closing) or not, depending on when the broker ends the socket
    return frames, tuple("close 504" + " > connection.close-ok" * n for n in range(1, closes + 1))


# -- the handshake (states.py, FRM-01) and the protocol header (0-9-1 §4.2.2) -------------
@st.composite
def handshake_cases(draw: Any, limits: Limits, kind: str) -> Case:
    tune = draw(tunes(limits))
    if kind == "tune_bounds":  # FRM-01: 530
        frame_max = draw(st.sampled_from([0]) | st.integers(1, limits.frame_min - 1)
                         | st.integers(limits.frame_max + 1, 2**32 - 1))
        channel_max = draw(st.sampled_from([0]) | st.integers(limits.channel_max + 1, 65535))
        values = draw(st.sampled_from([(channel_max, tune[1]), (tune[0], frame_max), (channel_max, frame_max)]))
        m = ConnectionTuneOk(*values, draw(st.integers(0, 65535)))
        return draw(delivered(Case(kind, "tune_ok", (encode_method(0, m),), ("close 530",), tune)))
    stage = draw(st.sampled_from(["start_ok", "tune_ok", "open"] if kind == "wrong_method" else STAGES[1:]))
    limit = limits.frame_min if stage in EARLY else tune[1]
    if kind == "wrong_method":  # not in the handshake table: 503
        expected = {"start_ok": ConnectionStartOk, "tune_ok": ConnectionTuneOk, "open": ConnectionOpen}[stage]
        m = draw(methods([c for c in ALL if c not in (expected, ConnectionClose)]))
        return draw(delivered(Case(kind, stage, wire(draw, 0, m, limit), ("close 503",), tune)))
    whole = b"".join(wire(draw, draw(channels), draw(methods(ALL)), limit))  # truncated: the broker waits
    cut = whole[:draw(st.integers(0, len(whole) - 1))]
    return draw(delivered(Case(kind, stage, (cut,), ("silent",), tune), halfclose=True))


@st.composite
def header_cases(draw: Any, bad: bool) -> Case:
    """Any other 8 octets are refused with the broker's header; fewer make it wait (EOF ends it)."""
    if bad:
        known = st.sampled_from([b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00", b"AMQP\x01\x01\x00\x09",
                                 b"AMQP\x00\x00\x09\x00", b"AMQP\x01\x01\x08\x00", b"GET / HTTP/1.1\r\n",
                                 b"\x16\x03\x01\x02\x00\x01\x00\x01"])
        head = draw(known | st.binary(min_size=4, max_size=4).map(lambda b: b"AMQP" + b) | st.binary(min_size=8))
        assume(head[:8] != PROTOCOL_HEADER)
        data = head + draw(st.binary(max_size=64))
        return draw(delivered(Case("bad_protocol_header", "raw", (data,), ("refused",))))
    prefix = draw(st.sampled_from([PROTOCOL_HEADER]) | st.binary(max_size=8))[:draw(st.integers(0, 7))]
    return draw(delivered(Case("short_protocol_header", "raw", (prefix,), ("silent",)), halfclose=True))


# -- the valid round trip ------------------------------------------------------------------
@st.composite
def valid_cases(draw: Any, limits: Limits) -> Case:
    """A mandatory publish nobody can route, in confirm mode, cut anywhere and interleaved with
    heartbeats: the broker returns it intact, then confirms it (PC-06)."""
    tune = draw(tunes(limits))
    props = draw(any_properties.filter(no_reply_to))
    body = draw(st.binary(max_size=3 * tune[1]))
    header = encode_header(1, len(body), props)
    assume(len(header) - 8 <= tune[1])
    publish = BasicPublish(0, "", "fuzz.noroute." + draw(st.text(max_size=20)), True, False)
    frames = [encode_method(1, ConfirmSelect()), encode_method(1, publish), header,
              *body_frames(draw, 1, body, tune[1])]
    for at in draw(st.lists(st.integers(0, len(frames)), max_size=3)):
        frames.insert(at, encode_heartbeat())
    case = Case("valid_publish", "opened", tuple(frames),
                ("confirm.select-ok > return 312 > basic.ack > connection.close-ok",), tune, settle=3,
                content=(props, body))
    return draw(delivered(case, halfclose=False))
