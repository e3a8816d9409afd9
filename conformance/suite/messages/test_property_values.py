"""MSG-01 over the whole range of every property and field value (drawn by Hypothesis).

Each example is one property set (conformance.suite.steps.field_values: every basic property,
headers with every field-value type of the dialect nested in tables and arrays, each over its
whole range, boundaries first-class) published three times: into a queue read by basic.get, into
a queue with a consumer, and mandatory to no queue (basic.return). Each must come back with the
property octets it was published with. EXAMPLES drawn sets, derandomized (the same broker gets the
same examples on every run), then the two extreme sets (every value at its minimum, then at its
maximum) on every run. A drawn failure is shrunk by Hypothesis; a failing extreme set is reduced
to the smallest part of it that still fails (one property or headers entry left out at a time).
Either way the failure names the property or headers entry that changed, sent and delivered.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import assume, given

from codec import (
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    BasicReturn,
    QueueDeclare,
    QueueDeclareOk,
)
from conformance.drivers.address import BrokerAddress
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.results.observations import ChannelClosed
from conformance.suite.steps.field_values import (
    VALUE_SETTINGS,
    assert_same_octets,
    extremes,
    fits,
    message_containers,
    property_sets,
    reduced,
    shown,
)

Connect = Callable[..., RawClient]
BODY = b"body"


class Carrier:
    """One connection with a queue to get from and a queue to consume from; an example that
    failed leaves it to be replaced, so the next example (a shrink) starts on a sound one."""

    def __init__(self, connect: Connect, names: Names) -> None:
        self._connect, self._names = connect, names
        self._client: RawClient | None = None
        self.get_queue = self.consume_queue = ""

    def client(self) -> RawClient:
        if self._client is None:
            client = self._connect()
            ch = client.channel()
            for label in ("get", "consume"):
                queue = self._names.queue(f"values-{label}")
                client.rpc(ch, QueueDeclare(queue=queue, exclusive=True), QueueDeclareOk)
                setattr(self, f"{label}_queue", queue)
            client.close_channel(ch)
            self._client = client
        return self._client

    def round_trip(self, props: BasicProperties, target: Target) -> None:
        client = self.client()
        try:
            ch = client.channel()
            client.send(ch, BasicPublish(routing_key=self.get_queue), props, BODY)
            got = client.rpc(ch, BasicGet(queue=self.get_queue, no_ack=True), BasicGetOk)
            assert_same_octets(props, got, target, " in basic.get-ok")
            client.rpc(ch, BasicConsume(queue=self.consume_queue, no_ack=True), BasicConsumeOk)
            client.send(ch, BasicPublish(routing_key=self.consume_queue), props, BODY)
            assert_same_octets(props, client.expect(ch, BasicDeliver), target, " in basic.deliver")
            client.send(ch, BasicPublish(routing_key=self._names.queue("nowhere"), mandatory=True), props, BODY)
            assert_same_octets(props, client.expect(ch, BasicReturn), target, " in basic.return")
            client.close_channel(ch)
        except BaseException:
            self._client = None  # the fixture closes it at teardown
            raise

    def failure(self, props: BasicProperties, target: Target) -> AssertionError | None:
        """The MSG-01 failure these properties meet, or None when they come back unchanged."""
        try:
            self.round_trip(props, target)
        except AssertionError as failed:
            return failed
        return None


@pytest.mark.rules("MSG-01")
@pytest.mark.clauses("MSG-01.a", "MSG-01.b", "MSG-01.c", "MSG-01.h")
def test_drawn_property_sets_come_back_unchanged(connect: Connect, names: Names, target: Target) -> None:
    rabbitmq = target.profile.rabbitmq
    user = BrokerAddress.parse(target.url).user
    any_mode = message_containers(target)  # MSG-03: up to 3.12, delivery-mode 1 or 2 only
    carrier = Carrier(connect, names)

    @VALUE_SETTINGS
    @given(props=property_sets(rabbitmq, user, any_mode))
    def round_trip(props: BasicProperties) -> None:
        assume(fits(props, carrier.client().frame_max))
        carrier.round_trip(props, target)

    round_trip()  # a failure is shrunk by Hypothesis to the smallest property set that shows it
    for extreme in extremes(rabbitmq, user, any_mode):
        if (failure := carrier.failure(extreme, target)) is not None:
            smallest = reduced(extreme, lambda props: carrier.failure(props, target) is not None)
            raise AssertionError(f"{carrier.failure(smallest, target) or failure}\nthe smallest part of the "
                                 f"extreme property set that shows it: {shown(smallest)}") from failure


def _publish_mode(client: RawClient, ch: int, queue: str, mode: int | None) -> str:
    """Publish one message with this delivery-mode and fetch it back: what happened, in words."""
    client.send(ch, BasicPublish(routing_key=queue), BasicProperties(delivery_mode=mode), str(mode).encode())
    try:
        got = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk, BasicGetEmpty)
    except ChannelClosed as closed:
        client.channel(ch)
        return f"refused {closed.code} ({closed.class_id}/{closed.method_id}) {closed.text!r}"
    if not isinstance(got.method, BasicGetOk):
        return "not routed, the channel still open"
    if got.body != str(mode).encode():
        return f"get-ok gave another message: {got.body!r}"
    return f"delivered with delivery-mode {got.properties.delivery_mode if got.properties else None}"


@pytest.mark.rules("MSG-03")
@pytest.mark.clauses("MSG-03.a", "MSG-03.b", "MSG-03.c", "MSG-03.d")
def test_every_delivery_mode_as_the_version_takes_it(connect: Connect, names: Names, target: Target) -> None:
    """Every octet 0..255, and none: refused up to 3.12 unless 1 or 2, carried as published from 3.13."""
    refusing = not message_containers(target)
    client = connect()
    ch = client.channel()
    queue = names.queue("modes")
    client.rpc(ch, QueueDeclare(queue=queue, exclusive=True), QueueDeclareOk)
    wrong: dict[int | None, str] = {}
    for mode in (None, *range(256)):
        if refusing and mode not in (None, 1, 2):
            want = f"refused 406 (60/40) 'PRECONDITION_FAILED - invalid message: {{delivery_mode_unknown,{mode}}}'"
        else:
            want = f"delivered with delivery-mode {mode}"
        if (did := _publish_mode(client, ch, queue, mode)) != want:
            wrong[mode] = did
    rule = ("up to 3.12, a delivery-mode other than 1 or 2 closes the channel 406 'PRECONDITION_FAILED - invalid "
            "message: {delivery_mode_unknown,<N>}' and routes nothing; 1, 2 and none are delivered as published"
            if refusing else "from 3.13 every delivery-mode 0..255 is routed and delivered as published")
    shown = "; ".join(f"{'none' if mode is None else mode}: {did}" for mode, did in list(wrong.items())[:8])
    assert not wrong, (f"MSG-03: {rule}. {len(wrong)} of 257 values were not: {shown}"
                       + (f"; and {len(wrong) - 8} more" if len(wrong) > 8 else ""))
