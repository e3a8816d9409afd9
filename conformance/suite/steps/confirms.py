"""Shared steps of the publisher-confirm tests (confirms/test_confirms*.py): a confirm channel, a
queue declared on it, a queue's message count.
"""

from __future__ import annotations

from typing import Any

from codec import BasicProperties, ConfirmSelect, ConfirmSelectOk, QueueDeclare, QueueDeclareOk
from conformance.drivers.raw import RawClient

PERSISTENT = BasicProperties(delivery_mode=2)
QUIET = 0.3  # seconds of silence that show nothing more is coming, after a round trip


def confirm_channel(client: RawClient) -> int:
    ch = client.channel()
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    return ch


def declare(client: RawClient, ch: int, queue: str, **kwargs: Any) -> None:
    client.rpc(ch, QueueDeclare(queue=queue, **kwargs), QueueDeclareOk)


def message_count(client: RawClient, ch: int, queue: str) -> int:
    reply = client.rpc(ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk).method
    assert isinstance(reply, QueueDeclareOk)
    return reply.message_count
