"""Channels a broker closed without telling the client, proven while the client waits (issue 31: a
deviating broker is judged as fast as a clean one).

A broker whose channel.close never reaches the client (lost, or never sent) leaves the client
waiting for a reply on a channel that is gone: every such test would wait out its whole timeout.
The rules:
- When a wait for a reply on channel N (a request's, in `RawClient.expect`, never a `poll`'s
  bounded look) has gone `EARLY_SHARE` of the client's timeout unanswered, the driver sends, once,
  a harmless passive exchange.declare of amq.direct on N, marked as a probe: its reply, when it
  comes, is taken out of the inbox, so the test never sees it (the recorder keeps the frames).
- A broker answers a method on a channel that is not open with connection.close 504 CHANNEL_ERROR
  (RabbitMQ: rabbit_channel's "expected 'channel.open'", a hard error: v3.10.8 l. 1235, v4.3.5
  l. 1117). While the client waits on N, N is not open at the broker only if the broker closed it
  and its channel.close never reached the client (the client answers a close it reads and stops
  waiting; it never probes a channel it knows closed). So that 504, naming the probe's method,
  proves the hidden close at once: the wait ends with `HiddenClose`, a `ConnectionClosed` whose
  text says what happened.
- On an open channel whose reply is merely late the probe is answered after the reply and
  swallowed; on a channel the broker is closing (its channel.close in flight) the probe is
  dropped (0-9-1: after channel.close, a peer discards everything but close/close-ok; RabbitMQ
  ignores methods in its closing state). Neither changes what the test sees.
- Probing is on only where silences are learned (inside a rule test of a suite run, and not in
  the health probe: `conformance.drivers.silence`), on channels the client opened and sent no raw
  bytes on.
"""

from __future__ import annotations

from codec import ExchangeDeclare
from codec.constants import ReplyCode
from conformance.drivers.interface import ConnectionClosed

EARLY_SHARE = 0.1  # of the client's reply timeout (5 s, scaled): the probe goes out after 0.5 s
PROBE_METHOD = ExchangeDeclare(exchange="amq.direct", exchange_type="direct", passive=True)


class HiddenClose(ConnectionClosed):
    """The broker had closed `channel` without a channel.close reaching the client (module rules)."""

    channel: int
    waiting_for: str

    def __init__(self, code: int, text: str, class_id: int, method_id: int, channel: int, waiting_for: str) -> None:
        super().__init__("connection", code, text, class_id, method_id)
        self.channel, self.waiting_for = channel, waiting_for  # not fields of the frozen Closed: settable

    def __str__(self) -> str:
        return (f"the broker had closed channel {self.channel} without a channel.close reaching the client: "
                f"while waiting for {self.waiting_for}, a passive exchange.declare sent on that channel as a probe "
                f"was answered with connection.close {self.code} ({self.class_id}/{self.method_id}): {self.text} "
                "(a broker answers so only for a channel that is not open)")


def proves_hidden_close(closed: ConnectionClosed) -> bool:
    """Whether a connection.close is the broker's answer to the probe on a channel it had closed."""
    return (closed.code == ReplyCode.CHANNEL_ERROR
            and (closed.class_id, closed.method_id) == (PROBE_METHOD.CLASS_ID, PROBE_METHOD.METHOD_ID))
