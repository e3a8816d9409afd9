"""Channels a broker closed without telling the client, proven while the client waits (a
deviating broker is judged about as fast as a clean one).

A broker whose channel.close never reaches the client (lost, or never sent) leaves the client
waiting for a reply on a channel that is gone: every such test would wait out its whole timeout.
The rules:
- When a wait for a reply on channel N (a request's, in `RawClient.expect`, never a `poll`'s
  bounded look) has gone `EARLY_SHARE` of the client's timeout unanswered, the driver sends, once,
  the probe of `conformance.drivers.probes` (channel.flow(active=true)) on N, where and only where
  that module's rules allow one (never on a channel in a transaction, never before channel.open-ok,
  never against a broker not shown to answer the probe). Its reply is matched to the probe alone
  and taken out of the inbox, so the test never sees it (the recorder keeps the frames).
- A broker answers a method on a channel that is not open with connection.close 504 CHANNEL_ERROR
  (RabbitMQ: a frame on a channel number with no channel process starts one, `rabbit_reader`
  `process_frame/3` → `create_channel`, and its first method other than channel.open is
  "expected 'channel.open'", a hard error: `rabbit_channel` v3.10.8 l. 1235, v4.0.5 l. 1130,
  v4.3.5 l. 1117). While the client waits on N, N is not open at the broker only if the broker
  closed it and its channel.close never reached the client (the client answers a close it reads
  and stops waiting; it never probes a channel it knows closed, is closing, or has not seen
  opened). So that 504, naming the probe's method, proves the hidden close at once: the wait ends
  with `HiddenClose`, a `ConnectionClosed` whose text says what happened. The other 504 RabbitMQ
  gives any method ("unexpected command while processing 'tx.commit'") cannot be the probe's: no
  probe goes out on a channel in a transaction.
- On an open channel whose reply is merely late the probe is answered after the reply and
  swallowed; on a channel the broker is closing (its channel.close in flight) the probe is
  dropped (RabbitMQ ignores every method but close/close-ok in its closing state,
  `handle_method(_Method, _, State = #ch{cfg = #conf{state = closing}})`). Neither changes what
  the test sees.
- Probing is on only where silences are learned (inside a rule test of a suite run, and not in
  the health probe: `conformance.drivers.silence`).
"""

from __future__ import annotations

from codec.constants import ReplyCode
from conformance.drivers.interface import ConnectionClosed
from conformance.drivers.probes import PROBE_METHOD

EARLY_SHARE = 0.1  # of the client's reply timeout (5 s, scaled): the probe goes out after 0.5 s


class HiddenClose(ConnectionClosed):
    """The broker had closed `channel` without a channel.close reaching the client (module rules)."""

    channel: int
    waiting_for: str

    def __init__(self, code: int, text: str, class_id: int, method_id: int, channel: int, waiting_for: str) -> None:
        super().__init__("connection", code, text, class_id, method_id)
        self.channel, self.waiting_for = channel, waiting_for  # not fields of the frozen Closed: settable

    def __str__(self) -> str:
        return (f"the broker had closed channel {self.channel} without a channel.close reaching the client: "
                f"while waiting for {self.waiting_for}, a channel.flow(active=true) sent on that channel as a probe "
                f"was answered with connection.close {self.code} ({self.class_id}/{self.method_id}): {self.text} "
                "(a broker answers so only for a channel that is not open)")


def proves_hidden_close(closed: ConnectionClosed) -> bool:
    """Whether a connection.close is the broker's answer to the probe on a channel it had closed."""
    return (closed.code == ReplyCode.CHANNEL_ERROR
            and (closed.class_id, closed.method_id) == (PROBE_METHOD.CLASS_ID, PROBE_METHOD.METHOD_ID))
