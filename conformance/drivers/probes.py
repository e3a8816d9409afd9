"""The driver's own probes: which method, where one may go out, and whose reply a reply is.

The raw driver sends two probes of its own, never part of a test's traffic: the hidden-close
probe (`hidden_close`: a wait on a channel has gone unanswered for a while) and the silence ping
(`silence`: a wait timed out; does the channel still answer?). A probe must change neither the
broker's state nor what the test observes; where that cannot be shown, none is sent and the
driver simply waits. The rules, each with its evidence (RabbitMQ `rabbit_channel.erl`, `rabbit_reader.erl`
at v3.10.8, v4.0.5 and v4.3.5, the versions the profiles cover):

- The probe method is channel.flow(active=true), answered by channel.flow-ok (0-9-1: both peers
  MUST implement channel.flow). RabbitMQ replies `#'channel.flow_ok'{active = true}` and leaves
  the channel's state as it was (`handle_method(#'channel.flow'{active = true}, _, State)`:
  v3.10.8 l. 1754, v4.0.5 l. 1684, v4.3.5 l. 1647). It names no resource, so it needs no
  permission (a passive exchange.declare, the earlier probe, needs *some* permission on the
  exchange from v4.3 on: `check_any_resource_access_permitted`, v4.3.5 l. 2675, and would close
  the channel with 403 for a user without one).
- It goes out only against a broker that answered channel.flow(active=true) with flow-ok earlier
  in this run, outside any test (the plugin's health connection asks once: `ProbeSupport`). A
  broker that does not implement it would answer 540 and close the test's connection.
- Never on channel 0, on a channel whose channel.open-ok has not arrived (the broker may not have
  opened it: the probe would itself be "a method before channel.open"), on a channel the client is
  closing (0-9-1 §2.3.5: after channel.close only close/close-ok may be sent), or on a channel
  where raw bytes went out (the driver does not know what is in flight there).
- Never on a channel in a transaction (tx.select sent): while a tx.commit is in flight RabbitMQ
  answers *any* method with connection.close 504 "unexpected command while processing
  'tx.commit'" (`handle_method(_Method, _, #ch{tx = Tx}) when Tx =:= committing orelse Tx =:=
  failed`: v3.10.8 l. 1268, v4.0.5 l. 1163, v4.3.5 l. 1150), which would end the test's
  connection. A transaction lasts as long as its channel (0-9-1 tx class), so the whole channel
  is excluded.
- Never while another probe on that channel is unanswered, nor while a test's own request on
  that channel awaits the probe's reply (channel.flow-ok): a reply is matched to the oldest open
  request it answers, and RabbitMQ answers a channel's methods in order, so a probe sent after the
  test's request could hand its reply to the test, or take the test's. When a test sends a request
  awaiting channel.flow-ok while a probe is out, the driver first waits for the probe's reply
  (`RawClient` settles it), so the probe's reply is matched to the probe alone.
- A probe's reply never reaches the test's inbox; the recorder keeps its frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from codec import ChannelClose, ChannelCloseOk, ChannelFlow, ChannelFlowOk, ChannelOpenOk, Method, TxSelect

PROBE_METHOD = ChannelFlow(active=True)
PROBE_REPLY = ChannelFlowOk.NAME

Broker = tuple[str, int, str]  # host, port, virtual host


class Request(NamedTuple):
    """A request sent on a channel and not yet answered."""

    name: str
    key: str  # the method with its arguments: what a silence is learned for (silence.py)
    replies: frozenset[str]  # the methods that answer it
    nowait: bool  # sent with nowait: its reply may not come
    probe: bool = False  # the driver's own: its reply is swallowed


def request_key(method: Method) -> str:
    """The method with every argument, e.g. "basic.qos(prefetch_size=10, prefetch_count=0, global_=False)"."""
    return method.NAME + repr(method)[len(type(method).__name__):]


def request_for(method: Method, probe: bool = False) -> Request:
    return Request(method.NAME, request_key(method), frozenset(method.RESPONSES),
                   bool(getattr(method, "nowait", False)), probe)


@dataclass
class ChannelStates:
    """What the client knows of its channels' states, from the methods it sent and received."""

    opened: set[int] = field(default_factory=set)  # channel.open-ok received
    in_tx: set[int] = field(default_factory=set)  # tx.select sent
    closing: set[int] = field(default_factory=set)  # channel.close sent by the client

    def sent(self, channel: int, method: Method) -> None:
        if isinstance(method, TxSelect):
            self.in_tx.add(channel)
        elif isinstance(method, ChannelClose) and channel > 0:
            self.closing.add(channel)

    def received(self, channel: int, method: Method) -> None:
        if isinstance(method, ChannelOpenOk):
            self.opened.add(channel)
        elif isinstance(method, (ChannelClose, ChannelCloseOk)) and channel > 0:
            self.forget(channel)

    def forget(self, channel: int) -> None:
        for states in (self.opened, self.in_tx, self.closing):
            states.discard(channel)


def refusal(states: ChannelStates, channel: int, asked: list[Request], raw: bool) -> str | None:
    """Why no probe may go out on `channel` now (module rules), or None when one may."""
    if channel <= 0:
        return "channel 0 carries no probe"
    if raw:
        return "raw bytes went out on this channel"
    if channel not in states.opened:
        return "the channel is not known to be open (no channel.open-ok)"
    if channel in states.in_tx:
        return "the channel is in a transaction (any method during tx.commit is a 504)"
    if channel in states.closing:
        return "the client is closing the channel"
    if any(r.probe for r in asked):
        return "a probe on this channel is unanswered"
    if any(PROBE_REPLY in r.replies for r in asked):
        return "a request of the test's own awaits the probe's reply"
    return None


@dataclass
class ProbeSupport:
    """The brokers of this run known to answer the probe method (asked on the health connection)."""

    answered: dict[Broker, bool] = field(default_factory=dict)

    def known(self, broker: Broker) -> bool:
        return broker in self.answered

    def allows(self, broker: Broker) -> bool:
        return self.answered.get(broker, False)

    def note(self, broker: Broker, answered: bool) -> None:
        self.answered[broker] = answered

    def forget(self) -> None:
        self.answered.clear()


PROBE_SUPPORT = ProbeSupport()
