"""The pure broker core: state, rules and effects; no I/O (docs/design.md (conventions), rabbit_fifo's shape).

Parts: broker_state.py (the state, declared once) and state.py (its entities); the concern
modules, which import the state and never the router; router.py (the entry points and the
handler table); rules.py (the policy functions a fault substitutes).
"""

from reference_broker.core.broker_state import Meta
from reference_broker.core.effects import CancelTimer, CloseConnection, Effect, Log, Send, StartTimer
from reference_broker.core.router import HANDLERS, BrokerCore

__all__ = ["HANDLERS", "BrokerCore", "CancelTimer", "CloseConnection", "Effect", "Log", "Meta", "Send",
           "StartTimer"]
