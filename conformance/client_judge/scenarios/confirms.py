"""Scenarios: publisher confirms and returns as the application sees them (CL-PC).

The broker's confirms are scripted (`confirming`): the engine routes each publish as usual, its
own confirms are dropped, and the script answers publish n with the plan's method for n (or
nothing yet). Clients whose publish waits for its confirm (feature "confirms-block-publish")
cannot have several publishes outstanding: the multiple-confirm scenarios are not applicable
to them, and say so.
"""

from __future__ import annotations

from collections.abc import Callable

from codec import BasicAck, BasicNack, BasicPublish, Command, Method
from codec.constants import ReplyCode
from conformance.client_judge.broker import ScriptedConnection
from conformance.client_judge.scenario import Play, scenario
from conformance.drivers import interface as di
from conformance.embedded import Output, Send

BLOCKING = frozenset({"confirms-block-publish"})
WHY_BLOCKING = "the client's publish waits for its own confirm, so no two publishes are ever outstanding"


def confirming(p: Play, plan: Callable[[int], Method | None]) -> int:
    """Open a confirm channel whose confirms follow `plan(n)` for the n-th publish."""
    p.connect()
    ch = p.client.open_channel()
    p.client.declare_queue(ch, "pcq")
    count = [0]

    def answer(conn: ScriptedConnection, command: Command) -> list[Output] | None:
        if command.channel != ch or not isinstance(command.method, BasicPublish):
            return None
        count[0] += 1
        reply = plan(count[0])
        return [*conn.engine(command), *([conn.write(ch, reply)] if reply is not None else [])]

    def engine_confirm(send: Send) -> bool:
        return send.channel == ch and isinstance(send.method, BasicAck | BasicNack)

    p.broker.script.drop = engine_confirm
    p.broker.script.intercept = answer
    p.client.confirm_select(ch)
    return ch


def outcomes(p: Play, ch: int, n: int) -> dict[int, bool]:
    """seq -> acked, once the application has seen the outcome of publishes 1..n."""
    seen: dict[int, bool] = {}
    while len(seen) < n:
        event = p.event(di.Confirmed, what=f"confirm of publish {len(seen) + 1} of {n}",
                        where=lambda e: e.channel == ch)
        p.expect(event.seq not in seen, f"publish {event.seq} was confirmed twice")
        seen[event.seq] = event.ack
    return seen


def publish(p: Play, ch: int, n: int, mandatory: bool = False, key: str = "pcq") -> None:
    for i in range(1, n + 1):
        p.client.publish(ch, "", key, f"m{i}".encode(), mandatory=mandatory)


@scenario("confirm-acks", ("CL-PC-01",), "one broker ack per publish", smoke=True)
def confirm_acks(p: Play) -> None:
    ch = confirming(p, lambda n: BasicAck(n, False))
    publish(p, ch, 3)
    got = outcomes(p, ch, 3)
    p.expect(got == {1: True, 2: True, 3: True}, f"the application saw {got}, not three acks")


@scenario("confirm-nack", ("CL-PC-03",), "a nack among acks is that publish's failure")
def confirm_nack(p: Play) -> None:
    ch = confirming(p, lambda n: BasicNack(n, False, False) if n == 2 else BasicAck(n, False))
    publish(p, ch, 3)
    got = outcomes(p, ch, 3)
    p.expect(got == {1: True, 2: False, 3: True}, f"the application saw {got}; the broker nacked only 2")


@scenario("confirm-multiple", ("CL-PC-02",), "ack with multiple=true confirms every earlier publish",
          excludes=BLOCKING, why_excluded=WHY_BLOCKING)
def confirm_multiple(p: Play) -> None:
    ch = confirming(p, lambda n: BasicAck(3, True) if n == 3 else None)
    publish(p, ch, 3)
    got = outcomes(p, ch, 3)
    p.expect(got == {1: True, 2: True, 3: True}, f"the application saw {got} after ack(3, multiple)")


@scenario("confirm-mixed", ("CL-PC-02", "CL-PC-03"), "multiple acks and nacks interleaved",
          excludes=BLOCKING, why_excluded=WHY_BLOCKING, smoke=True)
def confirm_mixed(p: Play) -> None:
    plan: dict[int, Method] = {2: BasicAck(2, True), 3: BasicNack(3, False, False), 5: BasicNack(5, True, False),
                               6: BasicAck(6, False)}
    ch = confirming(p, plan.get)
    publish(p, ch, 6)
    got = outcomes(p, ch, 6)
    want = {1: True, 2: True, 3: False, 4: False, 5: False, 6: True}
    p.expect(got == want, f"the application saw {got}; the broker sent ack(2,multiple) nack(3) "
                          f"nack(5,multiple) ack(6), so {want}")


@scenario("return-then-confirm", ("CL-PC-04",), "basic.return before the ack of an unroutable mandatory message",
          smoke=True)
def return_then_confirm(p: Play) -> None:
    p.connect()
    ch = p.client.open_channel()
    p.client.confirm_select(ch)
    p.client.publish(ch, "", "no-such-queue", b"unroutable", mandatory=True)
    returned = p.event(di.Returned, what="the returned message")
    confirmed = p.event(di.Confirmed, what="the confirm of the returned message")
    p.expect(returned.reply_code in (ReplyCode.NO_ROUTE, None) and returned.body == b"unroutable",
             f"the return carried {returned.reply_code} {returned.body!r}")
    p.expect(confirmed.ack, "the client reported the returned message's confirm as a nack")
    p.expect(p.events.index(returned) < p.events.index(confirmed),
             "the application saw the confirm before the return")


@scenario("mandatory-return", ("CL-PC-05",), "basic.return of an unroutable mandatory message")
def mandatory_return(p: Play) -> None:
    p.connect()
    ch = p.client.open_channel()
    p.client.publish(ch, "amq.direct", "nowhere", b"lost", mandatory=True)
    returned = p.event(di.Returned, what="the returned message")
    p.expect(returned.reply_code in (ReplyCode.NO_ROUTE, None)  # None: the library does not show the code
             and (returned.exchange, returned.routing_key, returned.body) == ("amq.direct", "nowhere", b"lost"),
             f"the return reached the application as {returned}")
    p.client.declare_queue(ch, "still-open")
    p.alive("a basic.return")
