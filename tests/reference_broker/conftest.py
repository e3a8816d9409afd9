"""Fixtures for the reference broker's tests.

`broker`: one `EmbeddedBroker` (free port, own event loop thread) shared by the session;
tests isolate themselves by using unique queue and exchange names from `unique_name`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from reference_broker.server import EmbeddedBroker


def make_unique_name(prefix: str = "q") -> str:
    """A queue or exchange name no other test uses: `<prefix>-<12 hex digits>`."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture
def unique_name() -> Callable[..., str]:
    """Factory of unique names: `unique_name()`, `unique_name("ex")`."""
    return make_unique_name
