"""A client program (pika) that publishes every field type it can write and reads it back sees
the same thing from the reference broker as from RabbitMQ 3.10.8 (MSG-01).

The program uses pika's public API only; what it received on the wire is taken from pika's own
content-header decoding (`BasicProperties.decode` sees the property octets), so a broker that
re-typed a value pika decodes to the same Python value (an `l` 5 sent back as `b` 5) still shows.
The RabbitMQ half is marked `rabbitmq`: skipped when RabbitMQ does not answer (a failure under
AMQPC_STRICT=1); so is the RabbitMQ 4.3.6 half (`rabbitmq43`, scripts/rabbitmq4.sh up 4.3).
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import uuid
from typing import Any

import pika
import pytest

from codec.wire_properties import headers_in_key_order
from conformance.drivers.raw import DriverError, RawClient
from reference_broker.server import EmbeddedBroker
from tests.conformance.test_cli_rabbitmq import rabbitmq  # noqa: F401  (fixture)
from tests.conftest import require

RMQ43_URL = os.environ.get("AMQPC_RMQ43_URL", "amqp://guest:guest@127.0.0.1:5743/")
# Every field type pika writes: S, x, t, I, l (beyond 32 bits), D, T, V, F, A.
PIKA_HEADERS: dict[str, Any] = {
    "text": "héllo", "bytes": b"\x00\xff", "true": True, "false": False, "small": 5, "negative": -200,
    "big": 2**40, "decimal": decimal.Decimal("3.14"), "when": dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC),
    "void": None, "table": {"n": 1, "s": "v", "deep": {"list": [1, "two", None]}},
    "list": [1, "two", b"\x01", decimal.Decimal("0.5"), [True]],
}


def pika_round_trip(url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], bytes]:
    """Publish `PIKA_HEADERS` to a fresh queue, get it back: (decoded headers, property octets)."""
    seen: list[bytes] = []
    decode = pika.spec.BasicProperties.decode

    def recording(self: pika.spec.BasicProperties, encoded: bytes, offset: int = 0) -> Any:
        seen.append(bytes(encoded[offset:]))
        return decode(self, encoded, offset)

    with monkeypatch.context() as patch:
        patch.setattr(pika.spec.BasicProperties, "decode", recording)
        conn = pika.BlockingConnection(pika.URLParameters(url))
        try:
            ch = conn.channel()
            queue = f"fidelity.headers.{uuid.uuid4().hex[:8]}"
            ch.queue_declare(queue, exclusive=True)
            ch.basic_publish("", queue, b"body", pika.BasicProperties(headers=PIKA_HEADERS, content_type="x/y"))
            method, properties, body = ch.basic_get(queue, auto_ack=True)
        finally:
            conn.close()
    assert method is not None and body == b"body"
    return properties.headers, seen[-1]


def sent_octets() -> bytes:
    """What pika writes for these properties (flags + property list)."""
    return b"".join(pika.spec.BasicProperties(headers=PIKA_HEADERS, content_type="x/y").encode())


def test_pika_headers_come_back_as_sent_from_the_reference_broker(broker: EmbeddedBroker,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    headers, octets = pika_round_trip(broker.url, monkeypatch)
    assert octets == sent_octets()
    assert headers == PIKA_HEADERS


@pytest.mark.rabbitmq
def test_pika_sees_no_difference_between_reference_broker_and_rabbitmq(
        broker: EmbeddedBroker, rabbitmq: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    reference = pika_round_trip(broker.url, monkeypatch)
    real = pika_round_trip(rabbitmq, monkeypatch)
    assert reference == real  # decoded headers, and the octets (3.10.8 resends them unchanged)


@pytest.fixture
def rabbitmq43() -> str:
    try:
        with RawClient(RMQ43_URL, timeout=5.0) as client:
            version = str(client.server_properties.get("version"))
    except (OSError, DriverError) as exc:
        require(False, f"RabbitMQ 4.3.6 at {RMQ43_URL} (scripts/rabbitmq4.sh up 4.3): {exc}")
    require(version == "4.3.6", f"RabbitMQ 4.3.6 at {RMQ43_URL} (found {version})")
    return RMQ43_URL


@pytest.mark.rabbitmq43
def test_pika_sees_no_difference_between_reference_broker_and_rabbitmq_4_3(
        broker: EmbeddedBroker, rabbitmq43: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """4.3.6 delivers the same entries in key order (MSG-01's 4.x variant): the decoded headers
    are the same table, and the octets are the same once the entries are put in key order."""
    headers, octets = pika_round_trip(broker.url, monkeypatch)
    real_headers, real_octets = pika_round_trip(rabbitmq43, monkeypatch)
    assert headers == real_headers
    assert real_octets == headers_in_key_order(octets)
