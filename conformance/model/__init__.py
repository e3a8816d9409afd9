"""The executable specification (the oracle): a pure model of a RabbitMQ-semantics broker.

Responsibility: predict, per profile, what a broker must answer and what it may or must send,
for the rules the Hypothesis machines and the trace audit check: ACK-01..10, RQ-01..04,
QOS-02..09, PC-01..10 and PC-13, CCN-02..04 and CCN-07. No I/O, no clock, no import of the
reference broker; per-channel rules are plain functions over plain data (channel.py).

    model = BrokerModel("rabbitmq-3.10")
    model.open_channel(1)
    model.declare_queue("q", "quorum")
    model.publish(1, "", "q", b"m1")
    model.get(1, "q", GetOk(1, False, b"m1"))        # Violation if not allowed
    assert model.ack(1, 5) == ChannelClosed(406, 60, 80)
"""

from conformance.model.broker import BrokerModel
from conformance.model.channel import confirm_tags, settle_tags
from conformance.model.outcomes import (
    OK,
    ChannelClosed,
    Closed,
    Confirm,
    ConnectionClosed,
    Deliver,
    GetEmpty,
    GetOk,
    GetOutcome,
    Ok,
    Outcome,
    Return,
    ServerCancel,
)
from conformance.model.publishing import Published
from conformance.model.state import Violation
from conformance.model.traits import GlobalQos, Traits, traits

__all__ = [
    "OK", "BrokerModel", "ChannelClosed", "Closed", "Confirm", "ConnectionClosed", "Deliver",
    "GetEmpty", "GetOk", "GetOutcome", "GlobalQos", "Ok", "Outcome", "Published", "Return",
    "ServerCancel", "Traits", "Violation", "confirm_tags", "settle_tags", "traits",
]  # fmt: skip
