"""The harness's one door to the reference broker: start it embedded, run its command line,
name its faults.

Rules:
- This is the only module of `conformance` that imports `reference_broker` (the layering
  test checks it); the plugin, the gate, the mutation score and the client-side scripted
  broker (built on the broker's connection engine and server) go through it.
- An embedded broker gets the faults named in AMQPC_BROKER_FAULTS (the mutation score sets
  it for the suite run it starts); the broker core itself never reads the environment.
"""

from __future__ import annotations

from typing import Any

from reference_broker.__main__ import build_parser as broker_parser
from reference_broker.__main__ import main as broker_main
from reference_broker.config import BrokerConfig
from reference_broker.core import CancelTimer, Effect, Meta, Send, StartTimer
from reference_broker.faults import BY_NAME, ENV, FAULTS, Fault, from_environment
from reference_broker.protocol.connection import Output, ServerConnection, Write
from reference_broker.server import BrokerServer, EmbeddedBroker, now_ms

__all__ = ["BY_NAME", "ENV", "FAULTS", "BrokerConfig", "BrokerServer", "CancelTimer", "Effect", "EmbeddedBroker", "Fault",
           "Meta", "Output", "Send", "ServerConnection", "StartTimer", "Write", "broker_main", "broker_parser",
           "now_ms", "start"]


def start(**overrides: Any) -> EmbeddedBroker:
    """A started embedded reference broker on a free port, with the environment's faults."""
    return EmbeddedBroker(faults=from_environment(), **overrides).start()
