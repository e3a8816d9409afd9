"""The pure broker core: state, rules and effects; no I/O (STYLE.md, rabbit_fifo's shape)."""

from reference_broker.core import basic, publish, resources, timeouts, transactions  # noqa: F401 (handlers)
from reference_broker.core.broker import HANDLERS, BrokerCore, Meta
from reference_broker.core.effects import CancelTimer, CloseConnection, Effect, Log, Send, StartTimer

__all__ = ["HANDLERS", "BrokerCore", "CancelTimer", "CloseConnection", "Effect", "Log", "Meta", "Send",
           "StartTimer"]
