"""A channel the broker closed without telling is proven closed while the client waits
(conformance/drivers/hidden_close.py, issue 31 item 3), and the probe changes nothing on a
conforming broker whose reply is merely late."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codec import BasicAck, ExchangeDeclare, ExchangeDeclareOk, QueueDeclare, QueueDeclareOk
from conformance.catalogue.mentions import named_rules
from conformance.drivers.hidden_close import HiddenClose
from conformance.drivers.raw import ConnectionClosed, NoReply, RawClient
from conformance.drivers.silence import SILENCES
from conformance.interpose.frames import Frame
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation, Io
from tests.conformance.deviations import BY_NAME


@pytest.fixture
def in_a_test() -> Iterator[None]:
    """Probing is on inside a rule test of a suite run (the plugin names it in SILENCES.test)."""
    SILENCES.forget()
    SILENCES.test = "test_hidden_close"
    try:
        yield
    finally:
        SILENCES.test = None
        SILENCES.forget()


def unknown_tag_then_declare(client: RawClient) -> None:
    """ACK-03's pattern: an unknown delivery tag (the broker closes the channel, 406), then a
    round trip behind it that surfaces the close."""
    ch = client.channel()
    client.send(ch, BasicAck(delivery_tag=77))
    client.rpc(ch, QueueDeclare(queue="amq.rabbitmq.trace-missing", passive=True), QueueDeclareOk)


def test_a_hidden_channel_close_ends_the_wait_as_soon_as_the_probe_is_answered(in_a_test: None) -> None:
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), BY_NAME["channel_close_hidden"]) as proxy, \
            RawClient(proxy.url, timeout=5.0) as client, pytest.raises(HiddenClose) as caught:
        unknown_tag_then_declare(client)
    closed = caught.value
    assert isinstance(closed, ConnectionClosed) and (closed.code, closed.channel) == (504, 1)
    text = str(closed)
    assert "closed channel 1 without a channel.close reaching the client" in text, text
    assert "queue.declare-ok on channel 1" in text and not named_rules(text), text  # the test's own rules apply
    assert proxy.actions == ["channel_close_hidden"]


def test_without_a_running_test_the_driver_waits_and_never_probes() -> None:
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), BY_NAME["channel_close_hidden"]) as proxy, \
            RawClient(proxy.url, timeout=1.0) as client:
        with pytest.raises(NoReply):
            unknown_tag_then_declare(client)
        sent = [r.frame.method for r in client.recorder.frames if r.direction == "out" and hasattr(r.frame, "method")]
    assert not any(isinstance(m, ExchangeDeclare) for m in sent), sent


def test_the_conforming_close_is_what_the_test_sees(in_a_test: None) -> None:
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


def test_a_late_reply_is_still_the_reply_and_the_probe_answer_is_swallowed(in_a_test: None) -> None:
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
    assert received == ["ChannelOpenOk", "QueueDeclareOk", "ExchangeDeclareOk", "ExchangeDeclareOk"], received
