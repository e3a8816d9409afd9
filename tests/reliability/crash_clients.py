"""The crash test's clients (tests/reliability/crash.py runs them): a publisher and a consumer
thread on the raw driver (conformance/drivers/raw.py), the link they share to the broker that is
killed and restarted under them, and the final drain.

Shape: the publisher sends persistent messages (delivery_mode 2, unique `message_id`, each sent
once, never republished) to a durable queue in confirm mode with up to `window` confirms in
flight; the consumer consumes with manual acks (prefetch `prefetch`) and logs every delivery.
Both reconnect after the broker goes; `drain` empties the queue with basic.get at the end.

Rules:
- Every wait is bounded: reconnects (`reconnect_timeout`), confirms, thread joins, the drain.
- Epochs: the broker incarnation between two kills (`BrokerLink.epoch`, bumped by the runner).
  A client keeps a connection only when the epoch was the same before and after its handshake,
  so each delivery knows which incarnation sent it (the checker needs it to tell a lost consumer
  ack from a broker duplicate).
- On each connection a client first declares the queue passively: a 404 means the durable queue
  did not survive the restart; it is then declared again (durable declare is idempotent) and the
  epoch is recorded as "queue missing".
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import codec
from conformance.drivers.raw import ChannelClosed, ConnectionLost, DriverError, NoReply, RawClient, Recorder
from tests.reliability.crash_broker import CrashTestFailed
from tests.reliability.totalqueue import Delivery

QUEUE = "crash-test"
NOT_FOUND = 404
CONFIRMS = (codec.BasicAck, codec.BasicNack)


class _Stopped(Exception):
    """A client was asked to stop while reconnecting."""


class _NoRecording(Recorder):
    """The raw driver records every frame; a crash test sends tens of thousands."""

    def add(self, record: Any) -> None:
        pass


class BrokerLink:
    """What both clients share: the URL, the epoch, and per-epoch queue observations."""

    def __init__(self, port: int, reconnect_timeout: float) -> None:
        self.url = f"amqp://guest:guest@127.0.0.1:{port}/"
        self.reconnect_timeout = reconnect_timeout
        self.epoch = 0
        self.queue_missing: set[int] = set()  # epochs in which a client found no queue
        self.queue_ready: dict[int, int] = {}  # epoch -> message_count at its first declare

    def next_epoch(self) -> None:
        self.epoch += 1

    def connect(self, stop: threading.Event | None = None) -> tuple[RawClient, int]:
        """A connection and the epoch of the broker it is to; retries until `reconnect_timeout`."""
        deadline = time.monotonic() + self.reconnect_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                raise _Stopped
            before = self.epoch
            client = RawClient(self.url, timeout=5.0, recorder=_NoRecording())
            try:
                client.connect()
            except (DriverError, OSError) as exc:
                last = exc
                if client.sock is not None:
                    client.sock.close()
            else:
                if self.epoch == before:
                    return client, before
                client.close()  # the broker restarted during the handshake: which one is this?
            time.sleep(0.05)
        raise CrashTestFailed(f"no connection within {self.reconnect_timeout:.0f} s: {last}")

    def declare(self, client: RawClient, epoch: int) -> int:
        """Open a channel with the durable queue declared (passive first); its number."""
        ch = client.channel()
        try:
            ok = client.rpc(ch, codec.QueueDeclare(queue=QUEUE, passive=True), codec.QueueDeclareOk).method
        except ChannelClosed as exc:
            if exc.code != NOT_FOUND:
                raise
            self.queue_missing.add(epoch)
            ch = client.channel()
            ok = client.rpc(ch, codec.QueueDeclare(queue=QUEUE, durable=True), codec.QueueDeclareOk).method
        assert isinstance(ok, codec.QueueDeclareOk)
        self.queue_ready.setdefault(epoch, ok.message_count)
        return ch


class _Client(threading.Thread):
    """A thread that reconnects until stopped; subclasses do the work on one connection."""

    def __init__(self, link: BrokerLink, name: str, rate: float) -> None:
        super().__init__(name=name, daemon=True)
        self.link, self.rate = link, rate  # rate: operations per second on average at most (0: no limit)
        self._began = time.monotonic()
        self.stopping = threading.Event()
        self.connections = 0
        self.error: str | None = None
        self.anomalies: list[str] = []
        self.epoch = -1  # of its latest connection

    @property
    def reconnects(self) -> int:
        return max(self.connections - 1, 0)

    def run(self) -> None:
        self._began = time.monotonic()
        try:
            while not self.stopping.is_set():
                client, epoch = self.link.connect(self.stopping)
                self.connections += 1
                self.epoch = epoch
                try:
                    self.work(client, epoch)
                except (ConnectionLost, OSError):
                    pass  # the broker went (SIGKILL): reconnect
                except DriverError as exc:  # a live broker closed, refused or went silent
                    self.anomalies.append(f"epoch {epoch}: {exc}")
                finally:
                    client.close()
        except _Stopped:
            pass
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def work(self, client: RawClient, epoch: int) -> None:
        raise NotImplementedError

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        self.join(timeout)
        if self.is_alive():
            raise CrashTestFailed(f"{self.name} did not stop within {timeout:.0f} s")


class Publisher(_Client):
    """Persistent messages with unique ids, confirm mode, up to `window` confirms in flight, at
    most `rate` messages per second on average (0: as fast as confirms come back)."""

    def __init__(self, link: BrokerLink, window: int, rate: float, confirm_timeout: float = 10.0) -> None:
        super().__init__(link, "publisher", rate)
        self.window, self.confirm_timeout = window, confirm_timeout
        self.published: list[str] = []
        self.confirmed: set[str] = set()
        self.nacked: set[str] = set()
        self._ids = itertools.count(1)

    def work(self, client: RawClient, epoch: int) -> None:
        ch = self.link.declare(client, epoch)
        client.rpc(ch, codec.ConfirmSelect(), codec.ConfirmSelectOk)
        inflight: dict[int, str] = {}
        seqs = itertools.count(1)
        while not self.stopping.is_set():
            self._fill(client, ch, inflight, seqs)
            if not inflight:
                time.sleep(0.005)  # the rate allows nothing yet
                continue
            self._settle(inflight, client.expect(ch, *CONFIRMS, timeout=self.confirm_timeout))
            while (cmd := client.poll(ch, *CONFIRMS)) is not None:
                self._settle(inflight, cmd)
        deadline = time.monotonic() + 2.0  # stopping: collect what is still in flight, bounded
        while inflight and (cmd := client.poll(ch, *CONFIRMS, duration=max(deadline - time.monotonic(), 0))):
            self._settle(inflight, cmd)

    def _fill(self, client: RawClient, ch: int, inflight: dict[int, str], seqs: itertools.count[int]) -> None:
        """Publish until `window` confirms are in flight or the rate is used up."""
        room = self.window - len(inflight)
        if self.rate:
            room = min(room, int((time.monotonic() - self._began) * self.rate) - len(self.published))
        for _ in range(room):
            mid = f"m{next(self._ids)}"
            self.published.append(mid)  # published = attempted: a failed send may still arrive
            inflight[next(seqs)] = mid
            props = codec.BasicProperties(delivery_mode=2, message_id=mid)
            client.send(ch, codec.BasicPublish(routing_key=QUEUE), props, mid.encode())

    def _settle(self, inflight: dict[int, str], cmd: codec.Command) -> None:
        m = cmd.method
        assert isinstance(m, codec.BasicAck | codec.BasicNack)
        seqs = [s for s in inflight if s <= m.delivery_tag] if m.multiple else [m.delivery_tag]
        into = self.confirmed if isinstance(m, codec.BasicAck) else self.nacked
        for seq in seqs:
            mid = inflight.pop(seq, None)
            if mid is not None:
                into.add(mid)


class Consumer(_Client):
    """Consumes with manual acks, acking each delivery at once, and logs every delivery; at most
    `rate` deliveries per second on average (slower than the publisher: a backlog on disk and
    unacked deliveries are what a kill puts at risk)."""

    def __init__(self, link: BrokerLink, prefetch: int, rate: float) -> None:
        super().__init__(link, "consumer", rate)
        self.prefetch = prefetch
        self.log: list[Delivery] = []

    def work(self, client: RawClient, epoch: int) -> None:
        ch = self.link.declare(client, epoch)
        client.rpc(ch, codec.BasicQos(prefetch_count=self.prefetch), codec.BasicQosOk)
        client.rpc(ch, codec.BasicConsume(queue=QUEUE, consumer_tag="crash-consumer"), codec.BasicConsumeOk)
        while not self.stopping.is_set():
            try:
                cmd = client.expect(ch, timeout=0.2)
            except NoReply:
                continue
            if isinstance(cmd.method, codec.BasicCancel):  # the queue went under a live broker
                self.anomalies.append(f"epoch {epoch}: basic.cancel from the broker")
                return  # reconnect, which re-declares the queue
            if isinstance(cmd.method, codec.BasicDeliver):
                self.log.append(_deliver_and_ack(client, ch, cmd, epoch))
                if self.rate and (ahead := self._began + len(self.log) / self.rate - time.monotonic()) > 0:
                    time.sleep(min(ahead, 0.5))


def _message_id(cmd: codec.Command) -> str:
    props = cmd.properties
    return props.message_id if props is not None and props.message_id else cmd.body.decode(errors="replace")


def _deliver_and_ack(client: RawClient, ch: int, cmd: codec.Command, epoch: int) -> Delivery:
    """Ack a basic.deliver / basic.get-ok; the Delivery records whether the ack went out."""
    m = cmd.method
    assert isinstance(m, codec.BasicDeliver | codec.BasicGetOk)
    try:
        client.send(ch, codec.BasicAck(m.delivery_tag))
    except (DriverError, OSError):
        return Delivery(_message_id(cmd), m.redelivered, False, epoch)
    return Delivery(_message_id(cmd), m.redelivered, True, epoch)


def drain(link: BrokerLink, timeout: float) -> list[Delivery]:
    """basic.get (acking each) until get-empty, within `timeout` seconds."""
    client, epoch = link.connect()
    out: list[Delivery] = []
    try:
        ch = link.declare(client, epoch)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cmd = client.rpc(ch, codec.BasicGet(queue=QUEUE), codec.BasicGetOk, codec.BasicGetEmpty)
            if isinstance(cmd.method, codec.BasicGetEmpty):
                return out
            out.append(_deliver_and_ack(client, ch, cmd, epoch))
    finally:
        client.close()
    raise CrashTestFailed(f"the queue was not empty after draining {len(out)} messages for {timeout:.0f} s")
