"""The raw driver's own probes: the round trip that tells a silent method from a closed channel.

Responsibility: the part of RawClient (conformance.drivers.raw) that decides when a probe of the
driver's own may go out on a channel, sends it, and waits for its reply; kept apart so the
driver's module holds the connection, the sending and the reading.
Rules (the decisions are the pure `probes` and `hidden_close` modules'; this is their use):
- A probe goes out only where `probes.refusal` finds nothing against it, on a connection whose
  broker is known to answer it (`probes.PROBE_SUPPORT`), with silences learned (`silences`), and
  never after a probe went unanswered on that connection (`_probing`).
- Once per wait, after `hidden_close.EARLY_SHARE` of it, a probe goes out (`_probe_hidden_close`): a
  channel the broker closed without telling is then named when the connection.close comes.
- After a silence, the same channel's probe must be answered within `PROBE` s for the silence
  to be learned (`_answers_the_same_channel`).
"""

from __future__ import annotations

import time
from typing import Any

from codec import Command, Method, encode_method
from conformance.drivers import probes
from conformance.drivers.address import BrokerAddress
from conformance.drivers.interface import ChannelClosed, ConnectionClosed
from conformance.drivers.silence import SILENCES

PROBE = 0.2  # s: the round trip that tells a silent method from a broker that stopped answering


class Probing:
    """RawClient's probes (module rules); RawClient holds the state declared here."""

    address: BrokerAddress
    timeout: float
    silences: bool
    sock: Any
    lost: bool
    connection_closed: ConnectionClosed | None
    closed_channels: dict[int, ChannelClosed]
    _asked: dict[int, list[probes.Request]]
    _untracked: set[int]
    _probed: tuple[int, str] | None
    _states: probes.ChannelStates
    _probing: bool

    def _record(self, direction: str, channel: int, frame: Any) -> None:
        raise NotImplementedError

    def _send_request(self, channel: int, method: Method, data: bytes, probe: bool = False) -> probes.Request | None:
        raise NotImplementedError

    def _read(self, timeout: float, waiting_for: str = "any method") -> None:
        raise NotImplementedError

    def _may_probe(self, channel: int) -> bool:
        """A probe of the driver's own may go out on `channel` now (probes.refusal, hidden_close rules)."""
        return (self.silences and self._probing and SILENCES.test is not None and probes.PROBE_SUPPORT.allows(self.address.key)
                and self.sock is not None and not self.lost and self.connection_closed is None
                and channel not in self.closed_channels
                and probes.refusal(self._states, channel, self._asked.get(channel, []), bool(self._untracked & {-1, channel}))
                is None)

    def _send_probe(self, channel: int) -> probes.Request | None:
        self._record("out", channel, Command(channel, probes.PROBE_METHOD, None, b""))
        return self._send_request(channel, probes.PROBE_METHOD, encode_method(channel, probes.PROBE_METHOD), probe=True)

    def _probe_hidden_close(self, channel: int, waiting_for: str) -> None:
        """Once per wait, where a probe may go out (hidden_close rules)."""
        if self._may_probe(channel):
            self._probed = (channel, waiting_for)
            self._send_probe(channel)

    def _open_request(self, channel: int, types: tuple[type, ...]) -> probes.Request | None:
        """The oldest open request on `channel` (not sent with nowait) one of `types` answers."""
        wanted = {getattr(t, "NAME", None) for t in types}
        return next((r for r in self._asked.get(channel, ()) if not r.nowait and not r.probe and r.replies & wanted),
                    None)

    def _await_probe(self, channel: int, probe: probes.Request, timeout: float) -> bool:
        """Read until `probe` is answered (True) or `timeout` passes or the channel or connection ends."""
        deadline = time.monotonic() + timeout
        while any(r is probe for r in self._asked.get(channel, ())):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.lost or self.connection_closed is not None or channel in self.closed_channels:
                return False
            self._read(remaining, f"{probes.PROBE_REPLY} on channel {channel} (the driver's probe)")
        return not self.lost and self.connection_closed is None and channel not in self.closed_channels

    def _settle_probe(self, channel: int) -> None:
        """Before a request awaiting the probe's reply goes out: the probe out on `channel` is answered
        first (probes rules). One unanswered within the client's timeout is given up: no further
        probe on this connection (a broker that drops it cannot be probed safely)."""
        probe = next((r for r in self._asked.get(channel, ()) if r.probe), None)
        if probe is not None and not self._await_probe(channel, probe, self.timeout):
            asked = self._asked.get(channel, [])
            asked[:] = [r for r in asked if r is not probe]
            self._probing = False

    def _answers_the_same_channel(self, channel: int) -> bool:
        """After a silence: does the broker still answer on this channel? The probe (probes.py),
        where one may go out, must be answered within `PROBE` s: the broker handles a channel's
        methods in order, so the silent method was read and left unanswered. A channel the broker
        closed without telling (the close hidden from the client) or a broker slow or wedged as a
        whole answers nothing: not learned. A reply that arrives while the ping is awaited (before
        its channel.flow-ok, so in the broker's order before it) was late, not missing: `expect`
        returns it, as a longer wait would have (a loaded 2-core runner delayed a basic.get-ok of
        RabbitMQ 4.0.5 by 2.5 s past a machine's 2 s wait; the ping's reply came after it)."""
        probe = next((r for r in self._asked.get(channel, ()) if r.probe), None)  # the early one, sent after it
        if probe is None:
            if not self._may_probe(channel):
                return False
            probe = self._send_probe(channel)
        return probe is not None and self._await_probe(channel, probe, min(self.timeout, PROBE))
