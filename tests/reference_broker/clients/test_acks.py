"""Acknowledgements through each client (ACK-01..07, ACK-09, RQ-01, RQ-03)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import amqp
import pika
import pytest
from amqp import exceptions as amqp_exc

from reference_broker.server import EmbeddedBroker
from tests.reference_broker.clients.support import (
    CLIENTS,
    NACK_CLIENTS,
    Closed,
    QueueState,
    fill,
    queue_state,
)

pytestmark = pytest.mark.timeout(30)


# ===============================================================================================
# Acknowledgements (ACK-01..07, RQ-01, RQ-03), the same scenarios through each client
# ===============================================================================================
def test_ack_tags_count_from_one_per_channel(client: Any, unique_name: Callable[..., str]) -> None:
    queue = unique_name()
    fill(client, queue, 3)
    assert [client.get(queue).tag for _ in range(3)] == [1, 2, 3]  # ACK-01
    client.new_channel()  # the old channel stays open with its three deliveries
    client.publish(queue, b"again")
    assert client.get(queue).tag == 1  # channels never share the counter


def test_ack_single_settles_only_that_delivery(broker: EmbeddedBroker, client: Any,
                                               unique_name: Callable[..., str]) -> None:
    queue = unique_name()
    fill(client, queue, 2)
    first, second = client.get(queue), client.get(queue)
    client.ack(first.tag)
    assert client.ready(queue) == 0  # the round trip orders the ack before the state read
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=1, consumers=0)
    client.close_channel()  # RQ-03: the unacked delivery goes back, the acked one does not
    client.new_channel()
    again = client.get(queue)
    assert (again.body, again.redelivered) == (second.body, True)
    assert client.get(queue) is None


def test_ack_multiple_settles_up_to_tag(broker: EmbeddedBroker, client: Any,
                                        unique_name: Callable[..., str]) -> None:
    queue = unique_name()
    fill(client, queue, 5)
    got = [client.get(queue) for _ in range(5)]
    client.ack(got[2].tag, multiple=True)  # ACK-05: settles tags 1, 2, 3
    assert client.ready(queue) == 0
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=2, consumers=0)
    client.close_channel()
    client.new_channel()
    back = [client.get(queue) for _ in range(2)]
    assert [(g.body, g.redelivered) for g in back] == [(b"m3", True), (b"m4", True)]
    assert client.get(queue) is None


def test_ack_tag_zero_multiple_settles_everything(broker: EmbeddedBroker, client: Any,
                                                  unique_name: Callable[..., str]) -> None:
    queue = unique_name()
    fill(client, queue, 3)
    for _ in range(3):
        client.get(queue)
    client.ack(0, multiple=True)  # ACK-06
    assert client.ready(queue) == 0
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=0, consumers=0)
    client.close_channel()
    client.new_channel()
    assert client.get(queue) is None


SETTLE_CASES = [(c, m) for c in CLIENTS for m in ("nack", "reject") if m == "reject" or c in NACK_CLIENTS]


@pytest.mark.parametrize(("client", "method"), SETTLE_CASES, indirect=["client"])
def test_settle_requeue_redelivers_with_redelivered_flag(client: Any, unique_name: Callable[..., str],
                                                         method: str) -> None:
    queue = unique_name()
    fill(client, queue, 2)
    first = client.get(queue)
    assert (first.body, first.redelivered) == (b"m0", False)
    getattr(client, method)(first.tag, requeue=True)  # ACK-07, RQ-01: back at its position
    again = client.get(queue)
    assert (again.body, again.redelivered, again.tag) == (b"m0", True, 2)
    nxt = client.get(queue)
    assert (nxt.body, nxt.redelivered) == (b"m1", False)


@pytest.mark.parametrize(("client", "method"), SETTLE_CASES, indirect=["client"])
def test_settle_without_requeue_discards(broker: EmbeddedBroker, client: Any,
                                         unique_name: Callable[..., str], method: str) -> None:
    queue = unique_name()
    fill(client, queue, 1)
    got = client.get(queue)
    getattr(client, method)(got.tag, requeue=False)  # ACK-07: discarded (no DLX)
    assert client.ready(queue) == 0
    assert queue_state(broker, queue) == QueueState(ready=0, unacked=0, consumers=0)
    client.close_channel()  # nothing left to requeue
    client.new_channel()
    assert client.get(queue) is None


@pytest.mark.parametrize("client", NACK_CLIENTS, indirect=True)
def test_nack_multiple_requeues_all_up_to_tag(client: Any, unique_name: Callable[..., str]) -> None:
    queue = unique_name()
    fill(client, queue, 3)
    got = [client.get(queue) for _ in range(3)]
    client.nack(got[1].tag, multiple=True, requeue=True)  # m0, m1 back; m2 stays unacked
    back = [client.get(queue) for _ in range(2)]
    assert [(g.body, g.redelivered) for g in back] == [(b"m0", True), (b"m1", True)]
    assert client.get(queue) is None


UNKNOWN_TAG_CASES = [(c, s) for c in CLIENTS for s in ("never-issued", "double-ack", "nack-unknown",
                                                       "reject-unknown")
                     if s != "nack-unknown" or c in NACK_CLIENTS]


@pytest.mark.parametrize(("client", "scenario"), UNKNOWN_TAG_CASES, indirect=["client"])
def test_ack_unknown_tag_closes_channel_406(broker: EmbeddedBroker, client: Any,
                                            unique_name: Callable[..., str], scenario: str) -> None:
    queue = unique_name()
    fill(client, queue, 2)
    held = client.get(queue)  # tag 1, left unacked: requeued when the channel closes (RQ-03)
    tag = 99
    if scenario == "double-ack":  # ACK-04
        settled = client.get(queue)
        client.ack(settled.tag)
        tag = settled.tag
        client.ack(tag)
    elif scenario == "nack-unknown":
        client.nack(tag, requeue=True)
    elif scenario == "reject-unknown":
        client.reject(tag, requeue=True)
    else:
        client.ack(tag)
    with pytest.raises(Closed) as info:
        client.ready(queue)
    assert (info.value.scope, info.value.code) == ("channel", 406)  # ACK-03: a channel error
    assert info.value.text == f"PRECONDITION_FAILED - unknown delivery tag {tag}"
    assert client.connection_open()
    client.new_channel()  # the connection survives and works
    again = client.get(queue)
    assert (again.body, again.redelivered) == (held.body, True)
    rest = client.get(queue)
    if scenario == "double-ack":
        assert rest is None
    else:
        assert (rest.body, rest.redelivered) == (b"m1", False)


@pytest.mark.parametrize(("method", "method_id"), [("ack", 80), ("reject", 90)])
def test_amqp_unknown_tag_close_names_the_method(amqp_connect: Callable[..., amqp.Connection],
                                                 unique_name: Callable[..., str], method: str,
                                                 method_id: int) -> None:
    """ACK-03: class-id 60 and the method id of the settle method that failed."""
    conn = amqp_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue, auto_delete=False)
    if method == "ack":
        ch.basic_ack(7)
    else:
        ch.basic_reject(7, requeue=True)
    with pytest.raises(amqp_exc.PreconditionFailed) as info:
        ch.queue_declare(queue, passive=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - unknown delivery tag 7"
    assert info.value.method_sig == (60, method_id)
    assert conn.connected
    assert conn.channel().queue_declare(queue, passive=True).message_count == 0


def test_pika_recover_requeue_redelivers_unacked(pika_connect: Callable[[], pika.BlockingConnection],
                                                 unique_name: Callable[..., str]) -> None:
    conn = pika_connect()
    ch = conn.channel()
    queue = unique_name()
    ch.queue_declare(queue)
    ch.basic_publish("", queue, b"one")
    method, _props, _body = ch.basic_get(queue)
    assert method.redelivered is False
    ch.basic_recover(requeue=True)  # ACK-09
    method, _props, body = ch.basic_get(queue)
    assert (body, method.redelivered, method.delivery_tag) == (b"one", True, 2)
