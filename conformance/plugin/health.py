"""Broker health between tests and the session-end leak check.

Responsibility: `HealthProbe` answers "does the broker still answer?" cheaply between tests;
`find_leaks` lists the queues and exchanges named with the harness prefix that a run left on
the broker.

Rules:
- The probe keeps one connection and checks it with a channel.open/close round trip; when
  that connection is gone it makes one fresh connection (TCP connect + AMQP handshake). Every
  wait is bounded by the probe's timeout, so a wedged broker costs at most two timeouts.
- The probe's answer is None (healthy) or a reason that starts with "broker wedged" (no reply
  within N s) or "broker unreachable" (refused, reset, closed): the plugin turns it into the
  `broken` verdict for the current and every following broker test, and exit status 3.
- `HealthProbe.fresh()` answers "does the broker still take new work?" after the watchdog
  interrupted a stuck test: a new connection (TCP + handshake), channel.open, queue.declare
  and queue.delete of a scratch queue, each wait bounded by the probe's timeout. It shares
  nothing with the stuck test or with the long-lived probe connection.
- A broker that refuses the first connection of a run is described by `connect_failure`:
  a 403 ACCESS_REFUSED during the handshake is "authentication refused" (wrong user or
  password), anything else "broker unreachable". Both are exit status 3.
- The first healthy round trip of a run also asks the broker, on the probe's own connection and
  outside any test, whether it answers the driver's probe method (channel.flow(active=true):
  `conformance.drivers.probes`), within `PROBE_SUPPORT_WAIT` s; the answer is noted in
  `PROBE_SUPPORT` (a broker that does not answer it is never probed; the connection is dropped
  and made anew by the next check). It never changes the health answer.
- Leaks: with an admin adapter, every queue/exchange whose name starts with `PREFIX` is listed
  (split into those this run created and other leftovers); without one, only the names whose
  deletion at teardown did not succeed are checked, by passive declare. The check never
  raises: a failure is reported in `LeakReport.error`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from codec import (
    ChannelFlowOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
)
from codec.constants import ReplyCode
from conformance.drivers.probes import PROBE_METHOD, PROBE_SUPPORT
from conformance.drivers.raw import ChannelClosed, ConnectionClosed, DriverError, NoReply, RawClient
from conformance.results.verdicts import AUTH_REFUSED_AT, UNREACHABLE_AT
from conformance.run.admin import AdminAdapter, AdminError, Unavailable

PREFIX = "amqpc."
_PROBE_CHANNEL = 1
PROBE_SUPPORT_WAIT = 2.0  # s: a later flow-ok only means no probes (slower), never a wrong verdict


def connect_failure(where: str, exc: BaseException) -> str:
    """Why the broker at `where` (a URL without its password) refused a fresh connection."""
    if isinstance(exc, ConnectionClosed) and exc.code == ReplyCode.ACCESS_REFUSED:
        return (f"{AUTH_REFUSED_AT}{where}: check the user and password in "
                f"--broker-url (the broker said {exc.code} {exc.text})")
    return f"{UNREACHABLE_AT}{where}: {exc}"


class HealthProbe:
    """One long-lived probe connection to the broker under test."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url, self.timeout = url, timeout
        self.queue = f"amqpc-health.{uuid.uuid4().hex[:12]}"  # not PREFIX: never a leak
        self._client: RawClient | None = None

    def fresh(self) -> str | None:
        """None when a new connection can do work (see the module rules); otherwise why not."""
        client = RawClient(self.url, timeout=self.timeout, silences=False)  # every wait made (drivers.silence)
        scratch = f"{self.queue}.scratch"
        try:
            client.connect()
            client.channel(_PROBE_CHANNEL)
            client.rpc(_PROBE_CHANNEL, QueueDeclare(queue=scratch), QueueDeclareOk)
            client.rpc(_PROBE_CHANNEL, QueueDelete(queue=scratch), QueueDeleteOk)
        except NoReply as exc:
            reason: str | None = f"broker wedged: {exc}"
        except (DriverError, OSError) as exc:
            reason = f"broker unreachable: {exc}"
        else:
            client.close()
            return None
        if client.sock is not None:  # no close handshake with a broker that does not answer
            client.sock.close()
            client.sock = None
        return reason

    def check(self) -> str | None:
        """None when the broker answers; otherwise why not."""
        if self._client is not None:
            try:
                self._round_trip(self._client)
                return None
            except (DriverError, OSError):
                self._drop()
        try:
            self._client = RawClient(self.url, timeout=self.timeout, silences=False)
            self._round_trip(self._client.connect())
            self._learn_probe_support(self._client)
            return None
        except NoReply as exc:
            self._drop()
            return f"broker wedged: {exc}"
        except (DriverError, OSError) as exc:
            self._drop()
            return f"broker unreachable: {exc}"

    def _round_trip(self, client: RawClient) -> None:
        client.channel(_PROBE_CHANNEL)
        client.rpc(_PROBE_CHANNEL, QueueDeclare(queue=self.queue, exclusive=True, auto_delete=True),
                   QueueDeclareOk)
        client.close_channel(_PROBE_CHANNEL)

    def _learn_probe_support(self, client: RawClient) -> None:
        """Whether the broker answers the driver's probe method (module rules), once per run."""
        if PROBE_SUPPORT.known(client.address.key):
            return
        try:
            client.channel(_PROBE_CHANNEL)
            client.rpc(_PROBE_CHANNEL, PROBE_METHOD, ChannelFlowOk, timeout=min(self.timeout, PROBE_SUPPORT_WAIT))
            client.close_channel(_PROBE_CHANNEL)
        except (DriverError, OSError):
            PROBE_SUPPORT.note(client.address.key, False)
            self._drop()
        else:
            PROBE_SUPPORT.note(client.address.key, True)

    def _drop(self) -> None:
        """Forget the connection without a close handshake (the broker is not answering)."""
        client, self._client = self._client, None
        if client is not None and client.sock is not None:
            client.sock.close()
            client.sock = None

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()


@dataclass
class NameRegistry:
    """Every queue/exchange name handed out in the run, and those not known to be deleted."""

    created: set[tuple[str, str]] = field(default_factory=set)  # (kind, name), kind queue|exchange
    undeleted: set[tuple[str, str]] = field(default_factory=set)

    def add(self, kind: str, name: str) -> None:
        self.created.add((kind, name))
        self.undeleted.add((kind, name))

    def deleted(self, kind: str, name: str) -> None:
        self.undeleted.discard((kind, name))


@dataclass(frozen=True)
class LeakReport:
    method: str  # "admin" | "passive declare" | "skipped"
    ours: tuple[str, ...] = ()  # "queue amqpc.x" left by this run
    others: tuple[str, ...] = ()  # other amqpc.* leftovers (earlier or concurrent runs)
    error: str | None = None

    @property
    def clean(self) -> bool:
        return not (self.ours or self.others or self.error)


def find_leaks(url: str, vhost: str, registry: NameRegistry, admin: AdminAdapter | None,
               timeout: float) -> LeakReport:
    """The harness-named queues and exchanges left on the broker (see the module rules)."""
    if admin is not None:
        try:
            listed = {("queue", q.name) for q in admin.list_queues(vhost)}
            listed |= {("exchange", x) for x in admin.list_exchanges(vhost)}
        except Unavailable:
            pass
        except AdminError as exc:
            return LeakReport("admin", error=str(exc))
        else:
            ours = {entry for entry in listed if entry in registry.created}
            others = {entry for entry in listed if entry[1].startswith(PREFIX)} - ours
            return LeakReport("admin", _labels(ours), _labels(others))
    try:
        present = _passive_declare(url, sorted(registry.undeleted), timeout)
    except (DriverError, OSError) as exc:
        return LeakReport("passive declare", error=f"leak check failed: {exc}")
    return LeakReport("passive declare", _labels(present))


def _passive_declare(url: str, names: list[tuple[str, str]], timeout: float) -> set[tuple[str, str]]:
    present: set[tuple[str, str]] = set()
    if not names:
        return present
    with RawClient(url, timeout=timeout) as client:
        channel = client.channel()
        for kind, name in names:
            if kind == "queue":
                method: QueueDeclare | ExchangeDeclare = QueueDeclare(queue=name, passive=True)
                reply: type = QueueDeclareOk
            else:
                method, reply = ExchangeDeclare(exchange=name, passive=True), ExchangeDeclareOk
            try:
                client.rpc(channel, method, reply)
                present.add((kind, name))
            except ChannelClosed as closed:  # 404: gone; 405: exclusive to a live connection
                if closed.code == ReplyCode.RESOURCE_LOCKED:
                    present.add((kind, name))
                channel = client.channel()
    return present


def _labels(entries: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    return tuple(f"{kind} {name}" for kind, name in sorted(entries))


def close_quietly(probe: HealthProbe | None) -> None:
    if probe is not None:
        with contextlib.suppress(Exception):
            probe.close()
