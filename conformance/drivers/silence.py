"""Requests a broker never answers, learned once per run (a deviating broker is judged about as
fast as a clean one).

A partial broker answers some methods and silently ignores others (no reply, no 540). Without
this, every test that sends an ignored method waits out its whole timeout, often several times,
and such a broker's run takes many times a clean one's. The rules:
- A request is *unanswered* when a wait for its reply (`RawClient.expect`, never a `poll`'s
  bounded look for what may or may not come) ends with no reply while the channel is alive: a
  harmless synchronous method sent right after it on the same channel is answered (the broker
  handles a channel's methods in order, so it read the method and left it unanswered: the
  silence is about the method, not a wedge, nor a channel the broker closed without telling). The
  ping is the driver's probe (`conformance.drivers.probes`): it goes out only where those rules
  allow one, so with none allowed nothing is learned.
- A silence is learned for exactly the request that went unanswered: its method *and arguments*
  (`Request.key`). basic.qos(prefetch_size=10) left unanswered teaches nothing about a plain
  basic.qos; a request naming a test's own queue is never the same request in another test.
- Once `TESTS_TO_LEARN` different tests met the same silence (one late reply of a conforming
  broker under load is not taken for a method it never answers), in this run and against this
  broker (host, port, virtual host), a wait for the reply to the same request fails at once with
  `Unanswered`: a `NoReply` whose text says how many earlier tests met the same silence. The
  request is still sent (the broker sees the same traffic); only the wait is skipped. Each test
  keeps its own verdict (`failed`).
- Learning is on only inside a rule test of a suite run (the plugin names the running test in
  `SILENCES.test`, so the text counts earlier tests, not waits, and forgets everything at the
  start of a session); a unit test driving `RawClient` directly
  never learns nor skips, nor does the plugin's health probe (`RawClient(silences=False)`): a
  learned silence must never make the broker look wedged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conformance.drivers.interface import NoReply

Broker = tuple[str, int, str]  # host, port, virtual host
TESTS_TO_LEARN = 2  # different tests whose wait met the silence before later waits are skipped


class Unanswered(NoReply):
    """A wait skipped: the broker never answered this method earlier in the run."""

    def __init__(self, request: str, waited: float, earlier: int, waiting_for: str) -> None:
        super().__init__(waited, waiting_for)
        where = (f"as in {earlier} earlier {'test' if earlier == 1 else 'tests'} of this run" if earlier
                 else "as earlier in this test")
        self.args = (f"no reply to {request} (waiting for {waiting_for}), {where}: the broker answered none "
                     f"within {waited:.1f} s, so this wait was not made again",)
        self.request = request


@dataclass
class Silences:
    """The unanswered requests (method and arguments) of this process's run, per broker; `test` is
    the rule test running (None: learning is off)."""

    test: str | None = None
    waited: dict[tuple[Broker, str], float] = field(default_factory=dict)  # the first wait's length
    met: dict[tuple[Broker, str], set[str]] = field(default_factory=dict)  # the tests that met the silence

    def forget(self) -> None:
        self.waited.clear()
        self.met.clear()

    def learn(self, broker: Broker, request: str, waited: float) -> None:
        if self.test is not None:
            self.waited.setdefault((broker, request), waited)
            self.met.setdefault((broker, request), set()).add(self.test)

    def check(self, broker: Broker, request: str, waiting_for: str) -> None:
        """Raise `Unanswered` when exactly `request` is known to go unanswered by `broker` in this run."""
        key = (broker, request)
        if self.test is not None and len(self.met.get(key, ())) >= TESTS_TO_LEARN:
            tests = self.met[key]
            earlier = len(tests - {self.test})
            tests.add(self.test)
            raise Unanswered(request, self.waited[key], earlier, waiting_for)


SILENCES = Silences()
