"""Small shared steps of the tx suite files (conformance/suite/tx): a transactional channel and
its publishes."""

from __future__ import annotations

from collections.abc import Iterable

from codec import BasicProperties, BasicPublish, TxSelect, TxSelectOk
from conformance.drivers.raw import RawClient


def tx_channel(client: RawClient) -> int:
    """A new channel after tx.select-ok."""
    ch = client.channel()
    client.rpc(ch, TxSelect(), TxSelectOk)
    return ch


def publish(client: RawClient, ch: int, key: str, payloads: Iterable[bytes], *, mandatory: bool = False) -> None:
    """basic.publish of each payload to the default exchange with routing key `key` (no reply)."""
    for body in payloads:
        client.send(ch, BasicPublish(exchange="", routing_key=key, mandatory=mandatory), BasicProperties(), body)
