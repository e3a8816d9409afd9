"""The publisher-confirms machine through a client library: `--client NAME`.

Responsibility: `ClientConfirmMachine`: channel 1 in confirm mode from the start, channel 2 not
(until a step selects it); publishes (mandatory or not) to a classic queue, to a full queue
that refuses them (x-max-length 1, x-overflow reject-publish: PC-08 nack) and to a routing key
no queue has (PC-06: returned when mandatory, confirmed either way); tx.select on a confirm
channel (PC-03). The library's view of each confirm (`Confirmed`: the publish's seq, ack or
nack) and of each return (`Returned`) is checked against the model (conformance.model,
publishing.py) as it arrives; after every step every seqno must be settled exactly once and
every return in (machine_client_events waits for it, bounded).

What each client shows, and so what it can be judged on:
- pika (BlockingConnection) waits in basic_publish for the confirm of that publish and takes
  whatever ack or nack comes next as it: its view has no delivery tags, so a broker that
  numbers from 0 (PC-02) is invisible through it; a confirm that never comes is seen (the
  driver bounds the wait: NoReply, reported as PC-05, or PC-06 for an unroutable publish); a
  duplicated ack kills pika's connection (docs/findings-clients.md), reported as PC-05. A
  return that follows its ack in the same read still reaches pika first (it handles every
  frame of a read before it looks at the confirm), so PC-06 order shows only across reads.
- py-amqp reports every basic.ack / basic.nack with its tag and multiple flag: a tag that
  matches no outstanding publish is reported (PC-02/PC-05), and a wrong settlement by a
  multiple=true confirm names PC-04.
- aio-pika resolves one future per publish from the broker's tags (it expands multiple, and
  shows no reply code on a return: the code the broker sent is read from the recorded frames,
  recorded_replies). It reports a basic.return only for a publish on a confirm channel
  (aiormq drops the others, feature "returns-need-confirms"), so mandatory publishes on
  channel 2 before it selects confirms are left out for it (noted in the run).
Coalescing (PC-04) shows only through py-amqp, and only when the broker confirms several
publishes in one flush, which depends on how its reads fall; a broker numbering from 0 (PC-02)
shows through py-amqp and aio-pika only by its consequences (a confirm that matches no publish,
one that fits the next publish, the newest left unconfirmed), which of them depends on the same
timing: both are checked and named where the view allows, not claimed. Order across
seqnos is free (PC-10). Left out:
confirm.select a second time (aio-pika chooses confirms when it opens a channel, so the
driver reopens the channel: a second select would be a new channel, PC-01 cannot be asked),
tx.select for a library without transactions (amqplib: PC-03 is then not judged through it),
persistent messages and quorum queues (PC-07 timing is the broker's, not the client's).

Rules: `Confirmed` events are fed to the model one per seqno as lone confirms (the libraries
expand a multiple confirm), each carrying its ack or nack; the model then says whether that
seqno was pending, needed its return first (PC-06), or should have been nacked (PC-08).
"""

from __future__ import annotations

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import rule

from codec import BasicReturn
from conformance.drivers.interface import (
    ClientFailure,
    Confirmed,
    ConnectionLost,
    Event,
    NoReply,
    Returned,
    Unsupported,
    attempt,
)
from conformance.model import Confirm, Return, Violation
from conformance.suite.through_clients.machine_client_events import ClientEventsMachine
from conformance.suite.through_clients.machine_clients import KEYS, client_step

CONFIRM_RULES = ("PC-03", "PC-05", "PC-06", "PC-08")
TARGETS = st.sampled_from(["plain", "full", "nowhere"])


class ClientConfirmMachine(ClientEventsMachine):
    """PC-03, PC-05, PC-06, PC-08 through a client library (module doc)."""

    def setup_queues(self) -> None:
        self.declare("plain")
        self.declare("full", max_length=1, overflow="reject-publish")
        self.unroutable: set[tuple[int, int]] = set()  # (channel key, seqno) of publishes no queue took
        self.routing = {**self.real, "nowhere": f"{self.prefix}.nowhere"}  # logical -> routing key
        self.logical = {key: name for name, key in self.routing.items()}
        body = self.body()
        self.driver.publish(self.numbers[2], "", self.real["full"], body)  # full from the start (PC-08)
        self.model.publish(2, "", "full", body)
        self._sync(2, "full")  # in the queue before channel 1 publishes to it (another channel, another process)
        self.select(1)

    def select(self, key: int) -> None:
        observed = attempt(lambda: self.driver.confirm_select(self.numbers[key]))
        self._compare("confirm.select", key, observed, self.model.confirm_select(key))

    # -- the library's events --------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        try:
            if isinstance(event, Confirmed):
                note(f"the library reports {event}")
                self.model.confirm(self.key_of(event.channel), Confirm(event.seq, False, not event.ack))
            elif isinstance(event, Returned):
                note(f"the library reports {event}")
                code = self.replies.code(event.reply_code, BasicReturn, event.channel,  # not shown: the sent one
                                         matching=lambda sent: sent.body == event.body)
                routing_key = self.logical.get(event.routing_key, event.routing_key)
                self.model.returned(self.key_of(event.channel), Return(code, event.exchange, routing_key, event.body))
            elif isinstance(event, ClientFailure) and event.type == "UnknownConfirm":
                raise AssertionError(f"PC-02/PC-05: the library got a confirm that matches no outstanding publish "
                                     f"(seqnos count from 1, each is confirmed once): {event.text}")
            else:
                super().on_event(event)
        except Violation as exc:
            if isinstance(event, Confirmed):
                raise AssertionError(f"{self.confirm_rule(event)}: {exc}") from None
            raise

    def confirm_rule(self, event: Confirmed) -> str:
        """The rule a confirm the model refuses breaks, as far as the client's view shows it."""
        pending = self.model.state.channels[self.key_of(event.channel)].pending
        following = pending.get(event.seq + 1)
        if following is not None and following.nack == (not event.ack):
            # a broker counting from 0 (PC-02) and one that lost this publish's own confirm, so that a
            # multiple=true confirm of the next covered it (PC-05), look the same through a library
            return ("PC-02/PC-05: this confirm fits the next publish (as when the broker counts from 0), "
                    "or this publish's own confirm never came and a multiple confirm of a later one covered it")
        if event.multiple:
            return "PC-04: a multiple=true confirm settles this seqno"
        return "PC-05/PC-08"

    def still_owed(self) -> str | None:
        pending = {key: sorted(self.model.unsettled(key)) for key in (1, 2) if self.model.unsettled(key)}
        returns = {key: n for key in (1, 2) if (n := self.model.expected_returns(key))}
        if returns:
            return f"PC-06: the library saw no basic.return for {returns} unroutable mandatory publishes"
        if pending:
            return f"seqnos never confirmed through the library {pending} ({self.unconfirmed_rule(pending)})"
        return None

    def unconfirmed_rule(self, pending: dict[int, list[int]]) -> str:
        """What seqnos left unconfirmed say: an unroutable one PC-06; only the newest of a channel
        is what a broker counting from 0 leaves (PC-02); otherwise PC-05."""
        if any((key, s) in self.unroutable for key, seqnos in pending.items() for s in seqnos):
            return "PC-05/PC-06: every publish is confirmed, an unroutable one at once"
        newest = all(seqnos == [self.model.state.channels[key].publish_seqno - 1] for key, seqnos in pending.items())
        if newest:
            return "PC-02/PC-05: only the newest publish is unconfirmed, as when the broker counts from 0"
        return "PC-05: each publish is confirmed once"

    # -- rules -----------------------------------------------------------------------------------
    @rule(key=KEYS, to=st.lists(TARGETS, min_size=1, max_size=4), mandatory=st.booleans())
    @client_step
    def publish(self, key: int, to: list[str], mandatory: bool) -> None:
        """Publishes in a row: routed, refused and unroutable ones can share one flush (PC-04)."""
        if mandatory and not self.model.confirm_mode(key) and "returns-need-confirms" in self.driver.info().features:
            note("a mandatory publish without confirms: this library never reports its return, step left out")
            return
        for target in to:
            body = self.body()
            try:
                self.driver.publish(self.numbers[key], "", self.routing[target], body, mandatory=mandatory)
            except (NoReply, ConnectionLost) as exc:  # a library that waits for the confirm in basic.publish (pika)
                rule = "PC-05/PC-06: an unroutable publish is confirmed at once" if target == "nowhere" else "PC-05"
                raise AssertionError(f"{rule}: while the library waited for the confirm of {body!r} to {target}: "
                                     f"{exc}") from None
            published = self.model.publish(key, "", target, body, mandatory=mandatory)
            if published.seqno is not None and not published.queues:
                self.unroutable.add((key, published.seqno))

    @rule(key=KEYS)
    @client_step
    def select_unconfirmed(self, key: int) -> None:
        if not self.model.confirm_mode(key):  # PC-02: this channel counts from 1 now
            self.select(key)

    @rule()
    @client_step
    def tx_select(self) -> None:
        try:
            observed = attempt(lambda: self.driver.tx_select(self.numbers[1]))
        except Unsupported as exc:  # a library without transactions (amqplib): nothing was sent
            note(f"tx.select: not expressible through this library ({exc}), step left out")
            return
        self._compare("tx.select on a confirm channel", 1, observed, self.model.tx_select(1), "PC-03")
        self.model.quiesce()
        if not self.model.confirm_mode(1):  # closed, as the rules say (and reopened): confirm mode again
            self.select(1)
