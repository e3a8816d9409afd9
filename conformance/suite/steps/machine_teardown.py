"""An example's teardown deletes: what a model machine declared, deleted once its connections closed.

Responsibility: delete the queues and exchanges of one example after every connection of that
example has closed, on a connection of the harness's own that one machine test keeps across its
examples (`kept_connections`), so that an example costs no extra connection's open and close.
Rules:
- The deletes start only once every connection of the example has closed: no consumer of theirs is
  left on what is deleted (GarageMQ deadlocks on the queue.delete of a queue with a consumer,
  docs/garagemq.md). The kept connection itself never consumes, publishes or declares: it holds no
  consumer, no exclusive queue and no unconfirmed publish, so nothing a later example observes
  depends on it being open (docs/probes.md, "the machines' teardown connection").
- One channel; a channel error (an exclusive queue whose closed owner the broker has not yet
  cleared: 405) skips that delete on a new channel. A connection error (a node a cluster test
  stopped, a broker that closed it) drops the kept connection: the deletes are made again, from
  the first, on a new one (a queue.delete of a queue already gone is answered delete-ok by
  RabbitMQ, or closes the channel, which skips it); a second connection error ends them.
- Outside `kept_connections` (a machine run another way) each teardown opens its own connection,
  as every teardown did before.
- Every wait is bounded: the connection's timeout bounds each open and each reply.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from codec import ExchangeDeleteOk, QueueDeleteOk
from conformance.drivers.raw import ChannelClosed, DriverError, RawClient

_KEPT: list[dict[tuple[str, float], Janitor]] = []  # the janitors of the machine test running now


class Janitor:
    """The teardown connection to one broker URL: opened at its first use, reopened after an error."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url, self.timeout = url, timeout
        self.client: RawClient | None = None
        self.number = 0
        self.opened = 0  # connections opened (tests: one for a whole machine test)

    def delete(self, deletes: list[Any]) -> None:
        for _attempt in range(2):
            try:
                if self.client is None:
                    self.client = RawClient(self.url, timeout=self.timeout).connect()
                    self.opened += 1
                    self.number = self.client.channel()
                self.number = _delete_each(self.client, self.number, deletes)
                return
            except (DriverError, OSError):
                self.close()

    def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            with contextlib.suppress(DriverError, OSError):
                client.close()


@contextlib.contextmanager
def kept_connections() -> Iterator[dict[tuple[str, float], Janitor]]:
    """For one machine test: every `delete_after_close` uses one connection per broker URL, closed at
    the end."""
    janitors: dict[tuple[str, float], Janitor] = {}
    _KEPT.append(janitors)
    try:
        yield janitors
    finally:
        _KEPT.remove(janitors)
        for janitor in janitors.values():
            janitor.close()


def delete_after_close(deletes: list[Any], url: str, timeout: float) -> None:
    """An example's teardown, once every connection of the example has closed (module rules)."""
    if not deletes:
        return
    if _KEPT:
        janitors = _KEPT[-1]
        janitor = janitors.setdefault((url, timeout), Janitor(url, timeout))
        janitor.delete(deletes)
        return
    once = Janitor(url, timeout)
    try:
        once.delete(deletes)
    finally:
        once.close()


def _delete_each(client: RawClient, number: int, deletes: list[Any]) -> int:
    """Each delete in turn on channel `number`; a channel error skips that delete on a new channel.
    The channel open at the end."""
    for method in deletes:
        try:
            client.rpc(number, method, QueueDeleteOk, ExchangeDeleteOk)
        except ChannelClosed:
            number = client.channel()
    return number
