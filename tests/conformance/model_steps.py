"""Steps shared by the model's tests: a model with two open channels and a queue, publishes,
a deterministic basic.get, and every due delivery taken (the lowest allowed first)."""

from __future__ import annotations

from conformance.model import BrokerModel, Deliver, GetEmpty, GetOk

RABBIT_PROFILES = ("rabbitmq-4.3", "rabbitmq-4.0", "rabbitmq-3.12", "rabbitmq-3.10")


def model(profile: str = "rabbitmq-4.3", *queues: tuple[str, str]) -> BrokerModel:
    m = BrokerModel(profile)
    m.open_channel(1)
    m.open_channel(2)
    for name, kind in queues or (("q", "classic"),):
        m.declare_queue(name, kind)
    return m


def publish(m: BrokerModel, queue: str, *bodies: str, ch: int = 1) -> None:
    for body in bodies:
        m.publish(ch, "", queue, body.encode())


def get(m: BrokerModel, queue: str = "q", ch: int = 1, no_ack: bool = False) -> GetOk | GetEmpty:
    """basic.get taking the first allowed answer (deterministic for these tests)."""
    allowed = sorted(m.get_outcomes(ch, queue), key=repr)
    assert len(allowed) == 1, allowed
    answer = allowed[0]
    assert isinstance(answer, (GetOk, GetEmpty))
    m.get(ch, queue, answer, no_ack=no_ack)
    return answer


def deliver_all(m: BrokerModel) -> list[tuple[int, Deliver]]:
    """Take deliveries while any is due, the lowest allowed first."""
    out = []
    while m.due():
        for ch in (1, 2):
            allowed = sorted(m.deliveries(ch), key=repr)
            if allowed:
                m.deliver(ch, allowed[0])
                out.append((ch, allowed[0]))
                break
    return out
