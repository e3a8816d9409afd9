"""Profile traits: the few places where the model's behaviour depends on the profile.

Responsibility: turn a profile name (conformance.catalogue.rules.PROFILES) into plain flags, so the
rest of the model branches on behaviour, never on version strings.
Rules (RULES.md §9 and the catalogue's per-profile expectations):
- QOS-03: `global=true` is a channel-wide limiter on rabbitmq-3.10/3.12/4.0; rabbitmq-4.3
  treats it as `global=false` (per consumer); a plain 0-9-1 broker applies it per connection.
- QOS-02 (amqp-0-9-1 variant): `global=false` is one limit shared by the channel's consumers.
- RQ-02: quorum queues exist on every rabbitmq-* profile, not on amqp-0-9-1.
- RQ-04: quorum `redelivered` is "returned at least once" up to 3.13 and "acquired before"
  from 4.0; both coincide for messages that are back in a queue.
- PC-*, CCN-*, basic.nack: RabbitMQ extensions, absent from amqp-0-9-1.
- RQ-01: amqp-0-9-1 does not specify where a requeued message goes (only redelivered=true).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

_RABBITMQ = re.compile(r"rabbitmq-(\d+)\.(\d+)")


class GlobalQos(Enum):
    CHANNEL = "channel"  # QOS-03/04/05: RabbitMQ ≤4.2, the channel's limiter
    PER_CONSUMER = "per-consumer"  # QOS-03: 4.3 rewrites global=true to global=false
    CONNECTION = "connection"  # 0-9-1 §1.8.3.1: shared by the connection's consumers


@dataclass(frozen=True, slots=True)
class Traits:
    profile: str
    global_qos: GlobalQos
    per_consumer_qos: bool  # QOS-02: global=false is per consumer (else per channel)
    quorum_queues: bool  # RQ-02
    quorum_redelivered_on_return: bool  # RQ-04: ≤3.13 flag = returned at least once
    rabbitmq_extensions: bool  # basic.nack, confirms, cancel notification
    requeue_position: bool = True  # RQ-01/02: where a requeued message goes (0-9-1 does not say)


def traits(profile: str) -> Traits:
    """The behaviour flags of `profile` (a profile name of the catalogue: amqp-0-9-1 or rabbitmq-X.Y)."""
    if profile == "amqp-0-9-1":
        return Traits(profile, GlobalQos.CONNECTION, False, False, False, False, requeue_position=False)
    match = _RABBITMQ.fullmatch(profile)
    if match is None:
        raise ValueError(f"unknown profile {profile!r} (amqp-0-9-1 or rabbitmq-MAJOR.MINOR)")
    version = (int(match[1]), int(match[2]))
    global_qos = GlobalQos.PER_CONSUMER if version >= (4, 3) else GlobalQos.CHANNEL
    return Traits(profile, global_qos, True, True, version < (4, 0), True)
