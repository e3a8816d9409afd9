"""Fixtures of the benchmark tests: `rabbitmq` (RabbitMQ 3.10.8 at 127.0.0.1:5672) as the recorded-traffic tests have it."""

from tests.record.conftest import rabbitmq

__all__ = ["rabbitmq"]
