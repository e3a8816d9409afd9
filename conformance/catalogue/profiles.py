"""Profiles: which rule set a broker is judged by, detected from its server-properties.

Rules (DESIGN.md decision 4): `auto` picks the profile from product and version
(RabbitMQ ≥4.3 → rabbitmq-4.3, ≥4.0 → rabbitmq-4.0, ≥3.12 → rabbitmq-3.12, else
rabbitmq-3.10); the reference broker says which RabbitMQ it emulates; any other product is
judged as a plain `amqp-0-9-1` broker. Expectations per rule come from the catalogue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from conformance.catalogue.rules import PROFILES, expectation

AUTO = "auto"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def detect(server_properties: dict[str, Any]) -> str:
    """The profile name for a broker's `connection.start` server-properties."""
    product = str(server_properties.get("product", ""))
    emulates = str(server_properties.get("emulates", ""))
    if emulates.startswith("RabbitMQ "):
        version = _version(emulates)
    elif product.lower() == "rabbitmq":
        version = _version(str(server_properties.get("version", "")))
    else:
        return "amqp-0-9-1"
    if version >= (4, 3):
        return "rabbitmq-4.3"
    if version >= (4, 0):
        return "rabbitmq-4.0"
    if version >= (3, 12):
        return "rabbitmq-3.12"
    return "rabbitmq-3.10"


@dataclass(frozen=True)
class Profile:
    name: str
    server_properties: dict[str, Any]

    def __post_init__(self) -> None:
        if self.name not in PROFILES:
            raise ValueError(f"unknown profile {self.name!r} (one of: auto, {', '.join(PROFILES)})")

    def expect(self, rule_id: str) -> str:
        """"required", "not-applicable" or "variant:<what differs>" for this profile."""
        return expectation(rule_id, self.name)

    @property
    def rabbitmq(self) -> bool:
        return self.name.startswith("rabbitmq-")

    def at_least(self, version: str) -> bool:
        """True for rabbitmq-X profiles at or above `version` ("4.3", "3.12", ...)."""
        if not self.rabbitmq:
            return False
        return _version(self.name.removeprefix("rabbitmq-")) >= _version(version)

    @property
    def capabilities(self) -> dict[str, Any]:
        caps = self.server_properties.get("capabilities")
        return dict(caps) if isinstance(caps, dict) else {}

    def has_capability(self, name: str) -> bool:
        return self.capabilities.get(name) is True
