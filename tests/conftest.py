"""Shared test helpers.

`require(condition, reason)`: a test that needs an external resource (the amqp-specs XML, a
RabbitMQ broker, ...) skips when it is absent, except under `AMQPC_STRICT=1` (set by
`.ci/run`), where a missing resource is a failure: CI must never pass by skipping.
"""

from __future__ import annotations

import os
import socket

import pytest

STRICT_ENV = "AMQPC_STRICT"


def strict() -> bool:
    """True when missing resources must fail the run instead of skipping (CI)."""
    return os.environ.get(STRICT_ENV) == "1"


def require(condition: object, reason: str) -> None:
    """Skip the calling test (fail it under AMQPC_STRICT=1) unless `condition` is truthy."""
    if condition:
        return
    if strict():
        pytest.fail(f"{reason} ({STRICT_ENV}=1: a missing resource is a failure)", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
