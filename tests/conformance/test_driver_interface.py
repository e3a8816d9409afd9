"""The shared driver interface: outcomes map onto the model's, events are waited for in order."""

from __future__ import annotations

from collections import deque

from codec import BasicProperties
from conformance.drivers import interface as di
from conformance.drivers import raw
from conformance.model import outcomes


def test_attempt_maps_closes_to_model_outcomes() -> None:
    def closes(exc: Exception) -> None:
        raise exc

    assert di.attempt(lambda: None) == outcomes.OK
    assert di.attempt(lambda: closes(di.ChannelClosed("channel", 406, "x", 60, 80))) == \
        outcomes.ChannelClosed(406, 60, 80)
    assert di.attempt(lambda: closes(di.ConnectionClosed("connection", 541, "x", 0, 0))) == \
        outcomes.ConnectionClosed(541, 0, 0)


def test_raw_driver_raises_the_interface_outcomes() -> None:
    assert raw.ChannelClosed is di.ChannelClosed and raw.NoReply is di.NoReply
    assert issubclass(raw.UnexpectedMethod, di.DriverError)


class _Scripted:
    """A driver stand-in that reports a fixed list of events."""

    def __init__(self, events: list[di.Event]) -> None:
        self.events = deque(events)

    def next_event(self, timeout: float) -> di.Event | None:
        return self.events.popleft() if self.events else None


def test_wait_event_keeps_every_event_it_passes() -> None:
    events: list[di.Event] = [di.Blocked("low on memory"), di.BrokerCancelled(1, "ctag"), di.Unblocked()]
    seen: list[di.Event] = []
    found = di.wait_event(_Scripted(events), (di.BrokerCancelled,), 1.0, seen)  # type: ignore[arg-type]
    assert found == di.BrokerCancelled(1, "ctag")
    assert seen == events[:2]
    assert di.wait_event(_Scripted([]), (di.Unblocked,), 0.05) is None


def test_event_kinds_are_unique_and_named() -> None:
    assert di.EVENT_TYPES["cancelled"] is di.BrokerCancelled
    assert len(di.EVENT_TYPES) == 9
    assert di.present(BasicProperties(priority=3, headers={"a": 1})) == {"headers": {"a": 1}, "priority": 3}
