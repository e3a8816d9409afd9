"""Scenarios: frame_max and channel_max negotiation, body fragmentation and reassembly (CL-FRM).

The broker proposes frame_max 8192 (FRAME_MIN_SIZE on RabbitMQ 4.1+) and, for the channel
scenario, channel_max 2; every size check uses the frame_max the client itself negotiated.
"""

from __future__ import annotations

from codec import BodyFrame, ChannelOpen, ConnectionTuneOk
from conformance.client_judge.scenario import Play, scenario
from conformance.drivers import interface as di

FRAME_MAX = 8192
FRAME_OVERHEAD = 8  # type, channel, size (7) + frame-end (1)


def _negotiated_frame_max(p: Play) -> int:
    tune_ok = p.sent(ConnectionTuneOk)
    p.expect(0 < tune_ok.frame_max <= FRAME_MAX,
             f"tune-ok frame_max {tune_ok.frame_max}; the broker proposed {FRAME_MAX} (0 or more is 530)")
    return int(tune_ok.frame_max)


@scenario("frame-max-negotiation", ("CL-FRM-01",), "tune-ok frame_max and channel_max within the proposals",
          broker={"frame_max": FRAME_MAX, "channel_max": 64})
def frame_max_negotiation(p: Play) -> None:
    p.connect()
    _negotiated_frame_max(p)
    tune_ok = p.sent(ConnectionTuneOk)
    p.expect(0 < tune_ok.channel_max <= 64, f"tune-ok channel_max {tune_ok.channel_max}; the broker proposed 64")


@scenario("channel-max", ("CL-FRM-01",), "no channel above the negotiated channel_max", broker={"channel_max": 2})
def channel_max(p: Play) -> None:
    p.connect()
    limit = p.sent(ConnectionTuneOk).channel_max
    p.expect(0 < limit <= 2, f"tune-ok channel_max {limit}; the broker proposed 2")
    opened = [p.client.open_channel() for _ in range(limit)]
    try:
        extra = p.client.open_channel()
        opened.append(extra)
    except di.NoReply:
        raise
    except di.DriverError:
        pass  # refused by the client: right
    numbers = [number for number, method in p.broker.methods("in") if isinstance(method, ChannelOpen)]
    p.expect(all(0 < n <= limit for n in numbers), f"the client opened channels {numbers} with channel_max {limit}")
    p.alive(f"opening more than channel_max={limit} channels")


@scenario("publish-fragmentation", ("CL-FRM-02",), "bodies split at frame_max, exactly", broker={"frame_max": FRAME_MAX},
          smoke=True)
def publish_fragmentation(p: Play) -> None:
    p.connect()
    frame_max = _negotiated_frame_max(p)
    payload_max = frame_max - FRAME_OVERHEAD
    ch = p.client.open_channel()
    p.client.declare_queue(ch, "big")
    for size in (payload_max, payload_max + 1, 3 * payload_max):
        mark = p.mark()
        p.client.publish(ch, "", "big", b"x" * size)
        expected = [payload_max] * (size // payload_max) + ([size % payload_max] if size % payload_max else [])
        got: list[int] = []
        while sum(got) < size:
            record = p.broker.wait_frame(lambda r: r.direction == "in" and isinstance(r.frame, BodyFrame),
                                         p.t(3.0), f"body frames of a {size}-octet publish", mark)
            got.append(len(record.frame.payload))
            mark = p.broker.frames.index(record) + 1
        p.expect(got == expected, f"a {size}-octet body went out as body frames of {got} octets; with frame_max "
                                  f"{frame_max}: {expected}")


@scenario("deliver-fragmented", ("CL-FRM-03",), "bodies of exactly full frames and of size 0 are reassembled",
          broker={"frame_max": FRAME_MAX})
def deliver_fragmented(p: Play) -> None:
    p.connect()
    payload_max = _negotiated_frame_max(p) - FRAME_OVERHEAD
    ch = p.client.open_channel()
    p.client.declare_queue(ch, "frag")
    p.client.consume(ch, "frag", no_ack=True)
    bodies = [bytes(range(256)) * (2 * payload_max // 256) + b"y" * (2 * payload_max % 256), b""]
    for body in bodies:
        p.client.publish(ch, "", "frag", body)
    for body in bodies:
        got = p.event(di.Delivered, what=f"the {len(body)}-octet delivery").delivery.body
        p.expect(got == body, f"a {len(body)}-octet body arrived as {len(got)} octets"
                              + (" (different content)" if len(got) == len(body) else ""))
