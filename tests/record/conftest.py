"""Fixtures of the recorded-traffic tests: `rabbitmq` skips unless RabbitMQ 3.10.8 answers at 127.0.0.1:5672."""

from __future__ import annotations

import pytest

from conformance.drivers.raw import DriverError, RawClient
from tests.conftest import require


@pytest.fixture
def rabbitmq() -> None:
    try:
        with RawClient("amqp://guest:guest@127.0.0.1:5672/", timeout=5.0) as client:
            version = str(client.server_properties.get("version"))
    except (OSError, DriverError) as exc:
        require(False, f"RabbitMQ at 127.0.0.1:5672 ({exc})")
    require(version == "3.10.8", f"RabbitMQ 3.10.8 at 127.0.0.1:5672 (found {version})")
