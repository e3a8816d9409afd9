"""A channel the broker closed without telling is proven closed while the client waits
(conformance/drivers/hidden_close.py), and the probe changes nothing on a
conforming broker whose reply is merely late."""

from __future__ import annotations

import pytest

from codec import (
    BasicAck,
    ChannelClose,
    ChannelCloseOk,
    ChannelFlow,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueDeclare,
    QueueDeclareOk,
    encode_method,
)
from conformance.catalogue.mentions import named_rules
from conformance.drivers.hidden_close import HiddenClose
from conformance.drivers.raw import ConnectionClosed, DriverError, NoReply, RawClient
from conformance.interpose.frames import Frame
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation, Io
from tests.conformance.deviations import BY_NAME
from tests.conformance.test_silences import learning  # noqa: F401  (the fixture: probing is on inside a rule test)
from tests.conftest import require


def unknown_tag_then_declare(client: RawClient) -> None:
    """ACK-03's pattern: an unknown delivery tag (the broker closes the channel, 406), then a
    round trip behind it that surfaces the close."""
    ch = client.channel()
    client.send(ch, BasicAck(delivery_tag=77))
    client.rpc(ch, QueueDeclare(queue="amq.rabbitmq.trace-missing", passive=True), QueueDeclareOk)


@pytest.mark.usefixtures("learning")
def test_a_hidden_channel_close_ends_the_wait_as_soon_as_the_probe_is_answered() -> None:
    """The proxy answers the broker's channel.close itself. When the test's queue.declare reaches
    the broker while the channel is closing, the broker ignores it and only the probe ends the wait;
    when the proxy's close-ok got there first (a loaded machine), the broker answers the
    queue.declare itself with the same 504. Both end the wait at once; the first is the probe's."""
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), BY_NAME["channel_close_hidden"]) as proxy, \
            RawClient(proxy.url, timeout=5.0) as client, pytest.raises(ConnectionClosed) as caught:
        unknown_tag_then_declare(client)
    closed = caught.value
    assert closed.code == 504 and "expected 'channel.open'" in closed.text, closed
    if (closed.class_id, closed.method_id) == (50, 10):  # the queue.declare reached the closed channel
        assert not isinstance(closed, HiddenClose)
    else:
        assert isinstance(closed, HiddenClose) and closed.channel == 1, closed
        text = str(closed)
        assert "closed channel 1 without a channel.close reaching the client" in text, text
        assert "queue.declare-ok on channel 1" in text and not named_rules(text), text  # the test's own rules apply
    assert proxy.actions == ["channel_close_hidden"]


class CloseHiddenBehindNext(Deviation):
    """channel_close_hidden without its race: the proxy's close-ok reaches the broker only after
    the client's next frame on that channel once the close was seen, so that frame always meets a
    closing channel (ignored) and only the probe meets the closed one."""

    name = "close_hidden_behind_next"

    def __init__(self) -> None:
        super().__init__()
        self.close_ok: dict[int, bytes] = {}

    def broker(self, frame: Frame, io: Io) -> None:
        if frame.type == 1 and isinstance(frame.method, ChannelClose):
            io.record("channel_close_hidden")
            self.close_ok[frame.channel] = encode_method(frame.channel, ChannelCloseOk())
            return
        io.to_client(frame.raw)

    def client(self, frame: Frame, io: Io) -> None:
        io.to_broker(frame.raw)
        late = self.close_ok.pop(frame.channel, None)
        if late is not None:
            io.to_broker(late)


@pytest.mark.parametrize("port", [pytest.param(5672, marks=pytest.mark.rabbitmq, id="rabbitmq-3.10.8"),
                                  pytest.param(5743, marks=pytest.mark.rabbitmq43, id="rabbitmq-4.3.6")])
@pytest.mark.usefixtures("learning")
def test_rabbitmq_answers_the_probe_on_a_channel_it_closed_with_504(port: int) -> None:
    """The premise, on the real broker behind the proxy: rabbit_channel's "expected 'channel.open'"
    (v3.10.8 l. 1235, v4.3.5 l. 1117) is a connection.close 504 naming the probe's method,
    channel.flow (20/20)."""
    try:
        RawClient(f"amqp://guest:guest@127.0.0.1:{port}/", timeout=5.0).connect().close()
    except (OSError, DriverError) as exc:
        require(False, f"RabbitMQ at 127.0.0.1:{port} ({exc})")
    with DeviantProxy(("127.0.0.1", port), CloseHiddenBehindNext) as proxy, \
            RawClient(proxy.url, timeout=5.0) as client, pytest.raises(HiddenClose) as caught:
        ch = client.channel()
        client.send(ch, BasicAck(delivery_tag=77))
        assert proxy.wait_for("channel_close_hidden"), proxy.actions  # the broker is closing ch
        client.rpc(ch, QueueDeclare(queue="amq.rabbitmq.trace-missing", passive=True), QueueDeclareOk)
    closed = caught.value
    assert (closed.code, closed.class_id, closed.method_id, closed.channel) == (504, 20, 20, 1), str(closed)
    assert "expected 'channel.open'" in closed.text, closed.text


def test_without_a_running_test_the_driver_waits_and_never_probes() -> None:
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), CloseHiddenBehindNext) as proxy, \
            RawClient(proxy.url, timeout=1.0) as client:
        ch = client.channel()
        client.send(ch, BasicAck(delivery_tag=77))
        assert proxy.wait_for("channel_close_hidden"), proxy.actions  # the broker is closing ch
        with pytest.raises(NoReply):  # the declare meets the closing channel: ignored, and no probe follows
            client.rpc(ch, QueueDeclare(queue="amq.rabbitmq.trace-missing", passive=True), QueueDeclareOk)
        sent = [r.frame.method for r in client.recorder.frames if r.direction == "out" and hasattr(r.frame, "method")]
    assert not any(isinstance(m, ChannelFlow) for m in sent), sent


@pytest.mark.usefixtures("learning")
def test_the_conforming_close_is_what_the_test_sees() -> None:
    from conformance.drivers.raw import ChannelClosed

    with EmbeddedBroker() as broker, RawClient(broker.url, timeout=5.0) as client, \
            pytest.raises(ChannelClosed) as caught:
        unknown_tag_then_declare(client)
    assert (caught.value.code, caught.value.class_id, caught.value.method_id) == (406, 60, 80)


class DeclareOkLate(Deviation):
    """A conforming broker whose queue.declare-ok is late: held until the client's next frame on
    that channel (the driver's probe) and forwarded before it, so the probe is answered after it."""

    name = "declare_ok_late"

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[int, bytes] = {}

    def broker(self, frame: Frame, io: Io) -> None:
        if frame.type == 1 and isinstance(frame.method, QueueDeclareOk) and not self.held.get(-frame.channel):
            self.held[frame.channel] = frame.raw
            self.held[-frame.channel] = b"once"
            io.record("held")
            return
        io.to_client(frame.raw)

    def client(self, frame: Frame, io: Io) -> None:
        late = self.held.pop(frame.channel, None)
        if late is not None:
            io.to_client(late)
        io.to_broker(frame.raw)


@pytest.mark.usefixtures("learning")
def test_a_late_reply_is_still_the_reply_and_the_probe_answer_is_swallowed() -> None:
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), DeclareOkLate) as proxy, \
            RawClient(proxy.url, timeout=5.0) as client:
        ch = client.channel()
        ok = client.rpc(ch, QueueDeclare(queue="", exclusive=True), QueueDeclareOk).method
        assert isinstance(ok, QueueDeclareOk) and ok.queue.startswith("amq.gen-")
        assert proxy.actions == ["held"]  # the reply came only after the probe went out
        reply = client.rpc(ch, ExchangeDeclare(exchange="amq.fanout", exchange_type="fanout", passive=True),
                           ExchangeDeclareOk)  # the test's own: not taken for the probe's
        assert isinstance(reply.method, ExchangeDeclareOk)
        assert client.poll(ch, duration=0.2) is None  # the probe's answer never reaches the test
        assert client.pending(ch) == []
        received = [type(r.frame.method).__name__ for r in client.recorder.frames
                    if r.direction == "in" and r.channel == ch and hasattr(r.frame, "method")]
    assert received == ["ChannelOpenOk", "QueueDeclareOk", "ChannelFlowOk", "ExchangeDeclareOk"], received
