"""Scripted raw-driver scenarios and their normalised transcripts (the differential test's engine).

A scenario is a plain function `scenario(s: Script)`: it declares queues, opens connections and
channels, publishes, consumes, settles, and waits for checkpoints, all through `Script`. Running
the same function against two brokers gives two transcripts (lists of tuples); the differential
test compares them.

Rules:
- Everything the broker says is recorded, normalised: deliveries (channel, consumer tag,
  delivery tag, body, redelivered, x-delivery-count / x-acquired-count), basic.get-ok/-empty,
  broker basic.cancel, channel.close and connection.close (code, class/method ids and the text
  with queue names replaced by their aliases), confirms, ready/consumer counts on request.
- Timing windows are checkpoints: `s.at(t)` waits until t seconds (times `scale`) after the
  scenario's anchor (`s.anchor()`), then records every frame that has arrived since the previous
  checkpoint, per connection and channel in a fixed order. An event belongs to the window it
  arrived in; deadlines in scenarios sit well inside their windows.
- Every wait is bounded; a broker that does not answer ends the scenario with a recorded
  `("no-reply", what)` entry, never a hang.
- Queue names are unique per run (`prefix`), policies and the global consumer_timeout are
  changed through the side's admin callbacks and restored when the scenario ends.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from codec import (
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    BasicRecover,
    BasicRecoverOk,
    BasicReject,
    ChannelClose,
    Command,
    ConfirmSelect,
    ConfirmSelectOk,
    ConnectionClose,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
)
from conformance.drivers.raw import ChannelClosed, ConnectionClosed, DriverError, RawClient

Entry = tuple[Any, ...]
COUNT_HEADERS = ("x-delivery-count", "x-acquired-count")
NO_CAPABILITY = {"consumer_cancel_notify": False}


@dataclass
class Side:
    """One broker under comparison: its URL and how to change policies and the global timeout."""

    name: str
    url: str
    put_policy: Callable[[str, str, dict[str, Any]], None]  # (name, pattern, definition)
    delete_policy: Callable[[str], None]
    set_global_timeout: Callable[[int | None], None]  # ms; None restores the broker's default


@dataclass
class Script:
    side: Side
    scale: float = 1.0
    prefix: str = field(default_factory=lambda: f"diff-{uuid.uuid4().hex[:8]}")
    transcript: list[Entry] = field(default_factory=list)
    clients: dict[str, RawClient] = field(default_factory=dict)
    queues: dict[str, str] = field(default_factory=dict)
    policies: list[str] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    # -- connections and channels ----------------------------------------------------------------
    def connect(self, name: str, *, capable: bool = True) -> None:
        client = RawClient(self.side.url, capabilities=None if capable else NO_CAPABILITY,
                           timeout=5.0 * self.scale)
        self.clients[name] = client.connect()

    def channel(self, conn: str = "a") -> int:
        return self.clients[conn].channel()

    def setup(self) -> tuple[RawClient, int]:
        """The connection and channel used for declarations, publishes and counts."""
        if "setup" not in self.clients:
            self.connect("setup")
            assert self.clients["setup"].channel() == 1
        return self.clients["setup"], 1

    # -- queues, publishing, counts ------------------------------------------------------------------
    def queue(self, alias: str, kind: str = "quorum", **arguments: Any) -> None:
        name = f"{self.prefix}.{alias}"
        self.queues[alias] = name
        args = {"x-queue-type": kind, **arguments}
        client, ch = self.setup()
        client.rpc(ch, QueueDeclare(queue=name, durable=True, arguments=args), QueueDeclareOk)

    def try_queue(self, alias: str, kind: str, **arguments: Any) -> None:
        """A declaration that may be refused: its outcome is recorded, on a channel of its own."""
        self.queues[alias] = f"{self.prefix}.{alias}"
        client, _ = self.setup()
        ch = client.channel()
        self._call("setup", ch, QueueDeclare(queue=self.queues[alias], durable=True,
                                             arguments={"x-queue-type": kind, **arguments}), QueueDeclareOk)

    def publish(self, alias: str, *bodies: str) -> None:
        client, ch = self.setup()
        for body in bodies:
            client.send(ch, BasicPublish(exchange="", routing_key=self.queues[alias]), BasicProperties(),
                        body.encode())
        self.counts(alias, record=False)  # a round trip: the publishes are routed before the next step

    def counts(self, alias: str, *, record: bool = True) -> tuple[int, int]:
        client, ch = self.setup()
        ok = client.rpc(ch, QueueDeclare(queue=self.queues[alias], passive=True), QueueDeclareOk).method
        if record:
            self.transcript.append(("counts", alias, ok.message_count, ok.consumer_count))
        return ok.message_count, ok.consumer_count

    def await_counts(self, alias: str, ready: int, within: float = 5.0, *, consumers: int | None = None) -> None:
        """Poll the counts until `ready` (and `consumers`, when given) or the bound, then record
        them: returns and consumer removals are asynchronous."""
        deadline = time.monotonic() + within * self.scale
        while time.monotonic() < deadline:
            now = self.counts(alias, record=False)
            if now[0] == ready and consumers in (None, now[1]):
                break
            time.sleep(0.05)
        self.counts(alias)

    # -- admin ----------------------------------------------------------------------------------------
    def policy(self, alias: str, definition: dict[str, Any]) -> None:
        name = f"{self.prefix}.{alias}.policy"
        self.side.put_policy(name, f"^{self.queues[alias]}$", definition)
        self.policies.append(name)

    @contextmanager
    def global_timeout(self, ms: int) -> Iterator[None]:
        """The global consumer_timeout while the block runs (4.3 reads it at basic.consume)."""
        self.side.set_global_timeout(ms)
        try:
            yield
        finally:
            self.side.set_global_timeout(None)

    # -- consuming and settling ----------------------------------------------------------------------
    def qos(self, ch: int, count: int, *, global_: bool = False, conn: str = "a") -> None:
        self._call(conn, ch, BasicQos(prefetch_count=count, global_=global_), BasicQosOk)

    def consume(self, ch: int, alias: str, tag: str, *, conn: str = "a", **arguments: Any) -> None:
        self._call(conn, ch, BasicConsume(queue=self.queues[alias], consumer_tag=tag, arguments=arguments),
                   BasicConsumeOk)

    def take(self, ch: int, count: int = 1, *, conn: str = "a", within: float = 5.0) -> None:
        client = self.clients[conn]
        for _ in range(count):
            try:
                self.record(conn, client.expect(ch, BasicDeliver, timeout=within * self.scale))
            except DriverError as exc:
                self.transcript.append(("no-delivery", conn, ch, type(exc).__name__))
                return

    def get(self, ch: int, alias: str, *, conn: str = "a") -> None:
        self._call(conn, ch, BasicGet(queue=self.queues[alias]), BasicGetOk, BasicGetEmpty)

    def ack(self, ch: int, tag: int, *, multiple: bool = False, conn: str = "a") -> None:
        self.clients[conn].send(ch, BasicAck(delivery_tag=tag, multiple=multiple))

    def nack(self, ch: int, tag: int, *, requeue: bool = True, multiple: bool = False, conn: str = "a") -> None:
        self.clients[conn].send(ch, BasicNack(delivery_tag=tag, multiple=multiple, requeue=requeue))

    def reject(self, ch: int, tag: int, *, requeue: bool = True, conn: str = "a") -> None:
        self.clients[conn].send(ch, BasicReject(delivery_tag=tag, requeue=requeue))

    def recover(self, ch: int, *, conn: str = "a") -> None:
        self._call(conn, ch, BasicRecover(requeue=True), BasicRecoverOk)

    def cancel(self, ch: int, tag: str, *, conn: str = "a") -> None:
        self._call(conn, ch, BasicCancel(consumer_tag=tag), BasicCancelOk)

    def cancel_ok(self, ch: int, tag: str, *, conn: str = "a") -> None:
        """The client's answer to a broker basic.cancel (CCN-05; 4.3 accepts it)."""
        self.clients[conn].send(ch, BasicCancelOk(consumer_tag=tag))

    def close(self, ch: int, *, conn: str = "a") -> None:
        try:
            self.clients[conn].close_channel(ch)
            self.transcript.append(("closed", conn, ch))
        except DriverError as exc:
            self.transcript.append(("close-failed", conn, ch, self._outcome(exc)))

    def confirm(self, ch: int, *, conn: str = "a") -> None:
        self._call(conn, ch, ConfirmSelect(), ConfirmSelectOk)

    def publish_on(self, ch: int, alias: str, *bodies: str, conn: str = "a") -> None:
        """Publish on a consumer-side channel (for confirms)."""
        client = self.clients[conn]
        for body in bodies:
            client.send(ch, BasicPublish(exchange="", routing_key=self.queues.get(alias, alias)),
                        BasicProperties(), body.encode())

    def await_confirms(self, ch: int, count: int, *, conn: str = "a") -> None:
        """Collect confirms until tags 1..count are settled (bounded); record the acked and the
        nacked tags as sets, since how the broker coalesces them (multiple) may differ."""
        client = self.clients[conn]
        acked: set[int] = set()
        nacked: set[int] = set()
        deadline = time.monotonic() + 5.0 * self.scale
        while len(acked | nacked) < count and time.monotonic() < deadline:
            got = client.poll(ch, BasicAck, BasicNack, duration=0.1)
            if got is None:
                continue
            m = got.method
            done = acked if isinstance(m, BasicAck) else nacked
            settled = acked | nacked
            done |= set(range(1, m.delivery_tag + 1)) - settled if m.multiple else {m.delivery_tag}
        self.transcript.append(("confirmed", conn, ch, sorted(acked), sorted(nacked)))

    def delete(self, alias: str) -> None:
        client, ch = self.setup()
        client.rpc(ch, QueueDelete(queue=self.queues[alias]), QueueDeleteOk)

    def sync(self, ch: int, *, conn: str = "a") -> None:
        """A round trip on the channel: what was sent before has been processed."""
        self._call(conn, ch, BasicQos(prefetch_count=0), BasicQosOk, record=False)

    # -- time ------------------------------------------------------------------------------------------
    def anchor(self) -> None:
        self.t0 = time.monotonic()

    def at(self, seconds: float) -> None:
        """Checkpoint: wait until `seconds` after the anchor, then record what has arrived."""
        wait = self.t0 + seconds * self.scale - time.monotonic()
        if wait > 0:
            time.sleep(wait)  # a checkpoint is a point in time, not a synchronisation
        self.transcript.append(("at", seconds))
        self.drain()

    def drain(self) -> None:
        for conn in sorted(self.clients):
            client = self.clients[conn]
            if not client.lost and client.connection_closed is None:
                with suppress(DriverError):
                    client._read(0.05)
            for ch in sorted(client.inbox):
                while client.inbox[ch]:
                    self.record(conn, client.inbox[ch].popleft())

    # -- recording --------------------------------------------------------------------------------------
    def _call(self, conn: str, ch: int, method: Any, *replies: type, record: bool = True) -> None:
        client = self.clients[conn]
        try:
            reply = client.rpc(ch, method, *replies, timeout=5.0 * self.scale)
        except (ChannelClosed, ConnectionClosed) as exc:
            self.transcript.append((method.NAME, conn, ch, self._outcome(exc)))
            return
        except DriverError as exc:
            self.transcript.append(("no-reply", method.NAME, conn, ch, type(exc).__name__))
            return
        if record:
            self.record(conn, reply)

    def _outcome(self, exc: Exception) -> Entry:
        if isinstance(exc, ChannelClosed | ConnectionClosed):
            return (exc.scope, exc.code, exc.class_id, exc.method_id, self._text(exc.text))
        return (type(exc).__name__,)

    def _text(self, text: str) -> str:
        for alias, name in self.queues.items():
            text = text.replace(name, f"<{alias}>")
        return text

    def record(self, conn: str, command: Command) -> None:
        m = command.method
        ch = command.channel
        if isinstance(m, BasicDeliver | BasicGetOk):
            headers = (command.properties.headers or {}) if command.properties else {}
            counts = tuple((k, headers[k]) for k in COUNT_HEADERS if k in headers)
            who = m.consumer_tag if isinstance(m, BasicDeliver) else "get"
            entry: Entry = ("deliver", conn, ch, who, m.delivery_tag, command.body.decode(), m.redelivered, counts)
        elif isinstance(m, BasicCancel):
            entry = ("broker-cancel", conn, ch, m.consumer_tag)
        elif isinstance(m, ChannelClose | ConnectionClose):
            entry = (m.NAME, conn, ch, m.reply_code, m.class_id, m.method_id, self._text(m.reply_text))
        elif isinstance(m, BasicAck | BasicNack):
            entry = (m.NAME, conn, ch, m.delivery_tag, m.multiple)
        elif isinstance(m, BasicConsumeOk | BasicCancelOk):
            entry = (m.NAME, conn, ch, m.consumer_tag)
        else:
            entry = (m.NAME, conn, ch)
        self.transcript.append(entry)

    # -- teardown ---------------------------------------------------------------------------------------
    def finish(self) -> list[Entry]:
        for name in self.policies:
            self.side.delete_policy(name)
        for conn in list(self.clients):
            if conn != "setup":
                self.clients.pop(conn).close()
        client, ch = self.setup()
        for name in self.queues.values():
            try:
                client.rpc(ch, QueueDelete(queue=name), QueueDeleteOk)
            except (ChannelClosed, ConnectionClosed):  # deleted by the scenario
                client, ch = self._reopen_setup()
        self.clients.pop("setup").close()
        return self.transcript

    def _reopen_setup(self) -> tuple[RawClient, int]:
        self.clients.pop("setup").close()
        return self.setup()


def run(scenario: Callable[[Script], None], side: Side, scale: float = 1.0) -> list[Entry]:
    """The normalised transcript of `scenario` against one broker."""
    script = Script(side, scale)
    try:
        scenario(script)
    except DriverError as exc:
        script.transcript.append(("aborted", type(exc).__name__, str(exc)[:120]))
    finally:
        for name in script.policies:
            side.delete_policy(name)
        script.policies.clear()
    return script.finish()
