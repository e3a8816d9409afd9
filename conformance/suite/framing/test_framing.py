"""Framing, tuning, connection end and heartbeats over the wire (RULES.md §7: FRM-01..03,
NET-01, HB-01).

Tune/start-ok tests drive the handshake by hand (`steps.wire.handshake`), several at once,
because RabbitMQ 3.10.8 refuses a bad handshake silently: it resets the socket after a 3 s
delay without connection.close (live). That is made explicit per profile below.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from codec import (
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicPublish,
    BodyFrame,
    ChannelOpen,
    ChannelOpenOk,
    ConnectionClose,
    ConnectionCloseOk,
    HeartbeatFrame,
    QueueDeclare,
    QueueDeclareOk,
    encode_content,
    encode_frame,
    encode_header,
    encode_heartbeat,
    encode_method,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import BrokerAddress, ConnectionClosed, ConnectionLost, RawClient, Recorder
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import judged_elsewhere
from conformance.run.admin import AdminAdapter
from conformance.suite.steps.beside import CLOSED_BY_CLIENT, NEVER_PUBLISHES
from conformance.suite.steps.wire import (
    Handshake,
    connection_info,
    frame_min_size,
    handshakes,
    inbound,
    outcome,
    publish_burst,
    pump,
    socket_end,
    start_ok_for,
    sync,
)

Connect = Callable[..., RawClient]
RABBITMQ_TUNE = (2047, 131072, 60)  # channel_max, frame_max, heartbeat (FRM-01 defaults)


def silent_refusal(target: Target) -> bool:
    """RabbitMQ 3.10.8 (live): a refused tune-ok gets no connection.close; the socket is reset
    ~3 s later. The 530 text only reaches the broker log ("failed to negotiate connection
    parameters: negotiated frame_max = 4095 is lower than the minimum allowed value (4096)").
    The catalogue still says `required` for rabbitmq-3.10 (reported)."""
    return target.profile.name == "rabbitmq-3.10"


def assert_refused(target: Target, result: Handshake, text: str | None) -> None:
    """A refused tune-ok: never open-ok; connection.close 530 (10/31) with `text`, or on the
    profiles that allow it, the socket's end without connection.close."""
    assert not result.open_ok, f"the broker accepted a tune-ok it must refuse: {result}"
    if result.close is None:
        assert result.ended is not None, f"neither a close nor the socket's end: {result}"
        if not (silent_refusal(target) or target.profile.expect("FRM-01").startswith("variant:")):
            # raised, not asserted: pytest's introspection of this condition would quote the profile
            raise AssertionError(f"the refused tune-ok must be answered with connection.close 530 NOT_ALLOWED "
                                 f"(10/31); the broker ended the socket ({result.ended}) without it")
        return
    close = result.close
    assert (close.reply_code, close.class_id, close.method_id) == (ReplyCode.NOT_ALLOWED, *METHOD_IDS["connection.tune-ok"]), close
    if text is not None and target.profile.expect("FRM-01") == "required":
        assert close.reply_text == text, close.reply_text


# -- FRM-01 ----------------------------------------------------------------------------------
@pytest.mark.rules("FRM-01")
@pytest.mark.clauses("FRM-01.a")
def test_tune_offers_the_default_limits(connect: Connect, target: Target) -> None:
    tune = connect().tune
    assert tune is not None
    if target.profile.expect("FRM-01") == "required":
        assert (tune.channel_max, tune.frame_max, tune.heartbeat) == RABBITMQ_TUNE
    else:
        assert tune.frame_max == 0 or tune.frame_max >= 4096, tune


@pytest.mark.rules("FRM-01")
@pytest.mark.clauses("FRM-01.b")
def test_tune_ok_within_the_bounds_opens(connect: Connect, target: Target, recorder: Recorder) -> None:
    offered = connect().tune
    assert offered is not None
    low = frame_min_size(target.profile)
    cases = [{"frame_max": low}, {"frame_max": offered.frame_max}, {"channel_max": 1},
             {"channel_max": offered.channel_max}, {"heartbeat": 0}]
    results = handshakes(target.url, recorder, target.timeout(5), [{"tune_ok": c} for c in cases])
    for case, result in zip(cases, results, strict=True):
        assert result.open_ok, f"tune-ok {case} refused: {result}"


@pytest.mark.beside_broker_wide(NEVER_PUBLISHES)
@pytest.mark.long_wait(3)  # RabbitMQ closes a refused handshake's socket after 3 s (rabbit_reader SILENT_CLOSE_DELAY)
@pytest.mark.rules("FRM-01")
@pytest.mark.clauses("FRM-01.c", "FRM-01.d", "FRM-01.e", "FRM-01.f", "FRM-01.g")
def test_tune_ok_out_of_bounds_is_530(target: Target, recorder: Recorder) -> None:
    low = frame_min_size(target.profile)
    high_frame, high_channel = 131072, 2047  # the defaults offered (test_tune_offers_...)
    cases: list[tuple[dict[str, int], str | None]] = [
        ({"frame_max": low - 1}, f"negotiated frame_max = {low - 1} is lower than the minimum allowed value ({low})"),
        ({"frame_max": high_frame + 1},
         f"negotiated frame_max = {high_frame + 1} is higher than the maximum allowed value ({high_frame})"),
        ({"frame_max": 0}, f"negotiated frame_max = 0 is higher than the maximum allowed value ({high_frame})"),
        ({"channel_max": high_channel + 1}, f"negotiated channel_max = {high_channel + 1} is higher than the "
                                            f"maximum allowed value ({high_channel})"),
        ({"channel_max": 0}, None),  # HEAD adds " (no limit)" after the 0; the catalogue does not say
    ]
    results = handshakes(target.url, recorder, target.timeout(6), [{"tune_ok": c} for c, _ in cases])
    for (case, text), result in zip(cases, results, strict=True):
        assert result.tune is not None, f"{case}: no connection.tune"
        assert_refused(target, result, None if text is None else f"NOT_ALLOWED - {text}")
        if result.close is not None and text is None:
            want = f"NOT_ALLOWED - negotiated channel_max = 0 (no limit) is higher than the maximum allowed value " \
                   f"({high_channel})"
            assert not target.profile.rabbitmq or result.close.reply_text == want, (
                f"FRM-01: a tune-ok channel_max of 0 is refused with {want!r}; the broker sent "
                f"{result.close.reply_text!r}")


@pytest.mark.beside_broker_wide(NEVER_PUBLISHES)
@pytest.mark.long_wait(3)  # as above
# -- FRM-02 ----------------------------------------------------------------------------------
@pytest.mark.rules("FRM-02")
@pytest.mark.clauses("FRM-02.a")
def test_frame_min_size_is_the_lowest_frame_max(target: Target, recorder: Recorder) -> None:
    low = frame_min_size(target.profile)
    exact, below = handshakes(target.url, recorder, target.timeout(6),
                              [{"tune_ok": {"frame_max": low}}, {"tune_ok": {"frame_max": low - 1}}])
    assert exact.open_ok, f"frame_max = FRAME_MIN_SIZE ({low}) refused: {exact}"
    assert_refused(target, below, f"NOT_ALLOWED - negotiated frame_max = {low - 1} is lower than the "
                                  f"minimum allowed value ({low})")


@pytest.mark.beside_broker_wide(NEVER_PUBLISHES)
@pytest.mark.long_wait(3)  # as above
@pytest.mark.rules("FRM-02")
@pytest.mark.clauses("FRM-02.b")
def test_frames_before_tune_ok_are_limited_to_frame_min_size(target: Target, recorder: Recorder) -> None:
    """A start-ok whose payload is exactly FRAME_MIN_SIZE is read; one octet more is refused
    (no connection.tune; the connection ends, with or without connection.close)."""
    low = frame_min_size(target.profile)
    address = BrokerAddress.parse(target.url)
    exact, over = handshakes(target.url, recorder, target.timeout(6), [
        {"start_ok": start_ok_for(address, payload_size=low)},
        {"start_ok": start_ok_for(address, payload_size=low + 1)}])
    assert exact.tune is not None and exact.open_ok, exact
    assert over.tune is None and not over.open_ok, f"an oversized start-ok was accepted: {over}"
    if over.close is not None:
        assert over.close.reply_code == ReplyCode.FRAME_ERROR, over.close
    else:
        assert over.ended is not None, f"the broker neither refused nor ended the handshake: {over}"


# -- FRM-03 ----------------------------------------------------------------------------------
def _payload_limit(target: Target, frame_max: int) -> int:
    """FRM-03: RabbitMQ accepts payloads up to frame_max; the plain spec up to frame_max - 8."""
    return frame_max - 8 if target.profile.expect("FRM-03").startswith("variant:") else frame_max


@pytest.mark.rules("FRM-03")
@pytest.mark.clauses("FRM-03.c")
def test_a_payload_of_frame_max_is_accepted(connect: Connect, names: Names, target: Target) -> None:
    frame_max = frame_min_size(target.profile)
    limit = _payload_limit(target, frame_max)
    client = connect(frame_max=frame_max)
    ch = client.channel()
    queue = names.queue()
    client.rpc(ch, QueueDeclare(queue=queue), QueueDeclareOk)
    client.send_raw(encode_method(ch, BasicPublish(routing_key=queue)) + encode_header(ch, limit)
                    + encode_frame(3, ch, bytes(limit)), channel=ch)
    got = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk, BasicGetEmpty)
    assert isinstance(got.method, BasicGetOk) and len(got.body) == limit


@pytest.mark.bound(5)  # the socket's end after the close
@pytest.mark.rules("FRM-03")
@pytest.mark.clauses("FRM-03.a", "FRM-03.b")
def test_a_payload_over_frame_max_is_a_fatal_501(connect: Connect, names: Names, target: Target) -> None:
    frame_max = frame_min_size(target.profile)
    over = _payload_limit(target, frame_max) + 1
    client = connect(frame_max=frame_max)
    ch = client.channel()
    client.send_raw(encode_method(ch, BasicPublish(routing_key=names.prefix)) + encode_header(ch, over)
                    + encode_frame(3, ch, bytes(over)), channel=ch)
    with pytest.raises(ConnectionClosed) as closed:
        sync(client, ch)
    assert outcome(closed.value) == ("connection", ReplyCode.FRAME_ERROR, 0, 0)
    end = socket_end(client, target.timeout(5))  # the driver has answered close-ok
    assert end in ("eof", "reset"), f"FRM-03: after the 501 the broker closes the socket; it was {end}"


@pytest.mark.rules("FRM-03")
def test_the_broker_splits_bodies_by_frame_max(connect: Connect, names: Names, target: Target) -> None:
    frame_max = frame_min_size(target.profile)
    client = connect(frame_max=frame_max)
    ch = client.channel()
    queue = names.queue()
    client.rpc(ch, QueueDeclare(queue=queue), QueueDeclareOk)
    publish_burst(client, ch, [queue], body=bytes(3 * frame_max))
    got = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk, BasicGetEmpty)
    assert len(got.body) == 3 * frame_max
    sizes = [len(f.payload) for f in inbound(client, ch) if isinstance(f, BodyFrame)]
    assert sizes and max(sizes) <= frame_max - 8, sizes


# -- NET-01 ----------------------------------------------------------------------------------
@pytest.mark.rules("NET-01")
@pytest.mark.clauses("NET-01.a")
def test_after_a_broker_close_the_socket_ends_with_eof_or_reset(connect: Connect, target: Target) -> None:
    client = connect()
    ch = client.channel()
    client.send(ch, ChannelOpen())  # 504: the broker closes the connection
    with pytest.raises(ConnectionClosed) as closed:
        client.expect(ch, ChannelOpenOk, timeout=target.timeout(5))
    assert closed.value.code == ReplyCode.CHANNEL_ERROR  # the driver has answered close-ok
    end = socket_end(client, target.timeout(5))
    assert end in ("eof", "reset"), f"after close-ok the socket did not end cleanly: {end}"
    client.close()  # and the driver treats it as the normal end: no exception


# -- NET-02 ----------------------------------------------------------------------------------
@pytest.mark.rules("NET-02")
@pytest.mark.clauses("NET-02.a", "NET-02.d")
def test_after_a_client_close_the_socket_is_left_to_the_client(connect: Connect, names: Names,
                                                               target: Target) -> None:
    """Publishes still in flight behind the close: close-ok arrives, the socket stays open (no
    EOF, no reset) for the second we watch it, since the heartbeat is off (30 s on RabbitMQ)."""
    if not target.profile.rabbitmq:
        judged_elsewhere(target.profile, "NET-02")
    client = connect(heartbeat=0)
    ch = client.channel()
    publish = encode_content(ch, BasicPublish(routing_key=names.queue("nowhere")), body=bytes(4000))
    client.send_raw(encode_method(0, ConnectionClose(ReplyCode.REPLY_SUCCESS, "bye", 0, 0)) + publish * 50)
    client.send_raw(publish * 50)  # still writing after its close
    client.expect(0, ConnectionCloseOk, timeout=target.timeout(5))
    end = socket_end(client, target.timeout(1))
    assert client.sock is not None
    client.sock.close()
    client.sock = None  # closed here: the driver has nothing left to close
    assert end == "open", f"the broker ended the socket after close-ok instead of leaving it to the client: {end}"


def _closed_by_the_client(connect: Connect, target: Target, heartbeat: int) -> tuple[RawClient, float]:
    """A connection the client closed (close, close-ok) and when close-ok arrived."""
    if not target.profile.rabbitmq:
        judged_elsewhere(target.profile, "NET-02")
    client = connect(heartbeat=heartbeat)
    client.send_raw(encode_method(0, ConnectionClose(ReplyCode.REPLY_SUCCESS, "bye", 0, 0)))
    client.expect(0, ConnectionCloseOk, timeout=target.timeout(5))
    return client, time.monotonic()


def _socket_end_after(client: RawClient, since: float, within: float) -> tuple[str, float]:
    """How the socket ends within `within` seconds, and when (from `since`); the heartbeat frames
    the broker keeps sending while it waits (RabbitMQ does, live) are read past."""
    deadline = time.monotonic() + within
    end = socket_end(client, within)
    while end.startswith("data:08") and time.monotonic() < deadline:  # a heartbeat frame
        end = socket_end(client, max(deadline - time.monotonic(), 0.01))
    elapsed = time.monotonic() - since
    if client.sock is not None:
        client.sock.close()
        client.sock = None  # closed here: the driver has nothing left to close
    return end, elapsed


@pytest.mark.beside_broker_wide(CLOSED_BY_CLIENT)
@pytest.mark.long_wait(2)  # one 1 s heartbeat interval after close-ok
@pytest.mark.rules("NET-02")
@pytest.mark.clauses("NET-02.b")
def test_after_a_client_close_a_short_heartbeat_ends_the_socket(connect: Connect, target: Target) -> None:
    """heartbeat=1 (below 30 s): the broker waits one heartbeat interval for the client to end
    the socket, then ends it itself (RabbitMQ 3.10.8, live: a reset 1.0 s after close-ok)."""
    client, since = _closed_by_the_client(connect, target, 1)
    end, elapsed = _socket_end_after(client, since, target.timeout(4))
    assert end in ("eof", "reset") and 0.5 <= elapsed <= 1.0 + target.timeout(1.0), (
        f"NET-02: after its close-ok the broker leaves the socket to the client for the heartbeat interval (1 s), "
        f"then ends it; the socket was {end} after {elapsed:.2f} s")


# After close-ok the reader is `closed` (rabbit_reader close_connection: v3.10.8 l.692, v4.0.5 l.713,
# v4.3.5 l.769) and its end is a timer fixed by the negotiated heartbeat; an alarm reaches a reader
# only in `running` or `blocked` (control_throttle `_ -> State1`: l.1760, 1796, 1859), and the consumer
# timeout and channel tick reach channels, of which it has none left (terminate_channels first).
@pytest.mark.beside_broker_wide(CLOSED_BY_CLIENT)
@pytest.mark.slow
@pytest.mark.long_wait(32)  # rabbit_reader ?CLOSING_TIMEOUT
@pytest.mark.rules("NET-02")
@pytest.mark.clauses("NET-02.c")
def test_after_a_client_close_without_heartbeats_the_socket_ends_after_30_s(connect: Connect,
                                                                           target: Target) -> None:
    client, since = _closed_by_the_client(connect, target, 0)
    early = socket_end(client, target.timeout(25))  # heartbeats off: the broker sends nothing meanwhile
    assert early == "open", f"NET-02: with heartbeats off the broker waits 30 s for the client; the socket was {early}"
    end, elapsed = _socket_end_after(client, since, 5 + target.timeout(3))
    assert end in ("eof", "reset") and elapsed >= 29.0, (
        f"NET-02: with heartbeats off the broker ends the socket itself 30 s after its close-ok; it was {end} "
        f"after {elapsed:.1f} s")


# -- HB-01 ----------------------------------------------------------------------------------
HB_SLACK = 0.3  # seconds on top of heartbeat/2 for scheduling
HB_WINDOW = 1.9  # long enough to see two consecutive broker heartbeats even at 1 s spacing


@pytest.mark.beside_broker_wide(NEVER_PUBLISHES)
@pytest.mark.long_wait(2)  # broker heartbeats watched for HB_WINDOW
@pytest.mark.rules("HB-01")
@pytest.mark.clauses("HB-01.a", "HB-01.b")
def test_the_broker_sends_heartbeats_every_half_interval(connect: Connect, target: Target) -> None:
    """heartbeat=1 (far below the 60 s offered: the client's value rules, no bounds); while
    idle the broker must send a heartbeat whenever it sent nothing for 0.5 s."""
    client = connect(heartbeat=1)
    start = time.monotonic()
    while time.monotonic() - start < HB_WINDOW:  # our own heartbeats keep the connection alive
        client.send_raw(encode_heartbeat(), channel=0)
        pump(client, 0.4)
    end = time.monotonic()
    beats = [r.ts for r in client.recorder.frames
             if r.connection == client.id and r.direction == "in" and isinstance(r.frame, HeartbeatFrame)]
    silences = [round(b - a, 2) for a, b in zip([start, *beats], [*beats, end], strict=True)]
    want = 0.5 if target.profile.rabbitmq else 1.0  # the spec: a heartbeat per interval
    assert max(silences) <= want + target.timeout(HB_SLACK), (
        f"longest broker silence {max(silences)} s with heartbeat=1 (want ≤ {want} s + slack); "
        f"silences between heartbeats: {silences}")


@pytest.mark.beside_broker_wide(NEVER_PUBLISHES)
@pytest.mark.long_wait(5)  # the management API lists a new connection after its stats interval
@pytest.mark.rules("HB-01")
@pytest.mark.clauses("HB-01.a")
@pytest.mark.parametrize("heartbeat", [0, 120], ids=["disabled", "above-offered"])
def test_the_heartbeat_is_the_clients_value(connect: Connect, target: Target, admin: AdminAdapter,
                                            heartbeat: int) -> None:
    """The negotiated value is what the broker keeps for the connection (`--broker-admin`: the
    management API's and rabbitmqctl's connection `timeout`), the client's tune-ok value unbounded."""
    client = connect(heartbeat=heartbeat)  # no bounds: the connection opens
    sync(client, client.channel())
    assert client.tune is not None and client.tune.heartbeat != heartbeat  # the broker offered another value
    kept = connection_info(admin, client, target.timeout(10)).heartbeat
    assert kept == heartbeat, (f"the broker offered heartbeat {client.tune.heartbeat}, the client's tune-ok said "
                               f"{heartbeat}; the broker keeps {kept} for the connection (HB-01: the client's value)")


@pytest.mark.rules("HB-01")
@pytest.mark.clauses("HB-01.e")
def test_a_heartbeat_on_a_channel_is_505(connect: Connect, target: Target) -> None:
    client = connect()
    ch = client.channel()
    client.send_raw(encode_frame(8, ch, b""), channel=ch)
    with pytest.raises(ConnectionClosed) as closed:
        sync(client, ch)
    expected = ReplyCode.FRAME_ERROR if target.profile.expect("HB-01").startswith("variant:") else ReplyCode.UNEXPECTED_FRAME
    assert outcome(closed.value) == ("connection", expected, 0, 0)


@pytest.mark.beside_broker_wide(NEVER_PUBLISHES)
@pytest.mark.long_wait(3)  # two to three 1 s heartbeat intervals
@pytest.mark.slow
@pytest.mark.rules("HB-01")
@pytest.mark.clauses("HB-01.c")
def test_a_silent_client_is_dropped_after_two_to_three_intervals(connect: Connect, target: Target) -> None:
    """The client never sends a byte after open-ok. RabbitMQ 3.10.8 (live) resets the socket
    3.0 s later with heartbeat=1, without connection.close (confirms HB-01's [INF])."""
    client = connect(heartbeat=1)
    start = time.monotonic()
    with pytest.raises((ConnectionLost, ConnectionClosed)) as ended:
        client.expect(0, ChannelOpenOk, timeout=target.timeout(6))
    elapsed = time.monotonic() - start
    assert 1.5 <= elapsed <= 3.0 + target.timeout(1.0), f"dropped after {elapsed:.2f} s"
    if target.profile.rabbitmq:
        assert isinstance(ended.value, ConnectionLost), f"expected no connection.close: {ended.value}"
