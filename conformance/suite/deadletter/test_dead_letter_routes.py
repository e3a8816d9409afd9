"""Where dead-lettering stops, and which keys and deaths a dead-lettered message takes along
(DLX-04 cycles, DLX-05 a missing or empty dead-letter exchange, DLX-06 CC and BCC, DLX-07 an
x-death header the publisher set).

Rules:
- As in test_dead_letter.py: queues named per test, publishes confirmed, what lands looked for with
  basic.get, waiting (bounded) for the dead-lettering the source queue does after its own reply.
- A message that must be gone (a cycle broken, a missing exchange) is judged on queue.declare-ok's
  count once its TTL plus `TTL_TOLERANCE` (test_ttl_expiry's, scaled) has passed since the confirm: a
  broker that dead-letters it again puts it straight back, so it is counted.
- Rejections (basic.reject, requeue=false) make it die where the rule does not need a clock.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import pytest

from codec import BasicProperties, BasicReject, ExchangeDeclare, ExchangeDeclareOk, QueueBind, QueueBindOk
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.deadletter import KINDS, TTL_TOLERANCE, die, get_ok, headers_of, landed
from conformance.suite.steps.queues import Publisher, declare, prompt, ready, require_kind

Connect = Callable[..., RawClient]
TTL_MS = 100


def past_ttls(hops: int) -> pytest.MarkDecorator:
    """Schedule mark: `hops` TTLs plus the tolerance pass on the broker's clock (`publish_and_wait`)."""
    return pytest.mark.long_wait(hops * TTL_MS / 1000 + TTL_TOLERANCE)


def setup(connect: Connect, target: Target, kind: str) -> tuple[RawClient, int]:
    require_kind(target.profile, kind)
    client = connect()
    return client, client.channel()


def publish_and_wait(client: RawClient, queue: str, target: Target, hops: int = 1,
                     properties: BasicProperties | None = None) -> None:
    """Publish one message to `queue` and let `hops` TTLs plus the tolerance pass on the broker's clock
    (part of the scenario, not a wait for a reply)."""
    Publisher(client).publish(queue, [b"m"], properties or BasicProperties())
    time.sleep(hops * TTL_MS / 1000 + target.timeout(TTL_TOLERANCE))


def ttl_to(queue: str | None, exchange: str = "") -> dict[str, Any]:
    arguments: dict[str, Any] = {"x-message-ttl": TTL_MS, "x-dead-letter-exchange": exchange}
    return arguments if queue is None else {**arguments, "x-dead-letter-routing-key": queue}


def exchange(client: RawClient, ch: int, name: str, kind: str) -> str:
    client.rpc(ch, ExchangeDeclare(exchange=name, exchange_type=kind), ExchangeDeclareOk)
    return name


def bind(client: RawClient, ch: int, queue: str, to: str, key: str = "") -> None:
    client.rpc(ch, QueueBind(queue=queue, exchange=to, routing_key=key), QueueBindOk)


# -- DLX-04: cycles ------------------------------------------------------------------------------
@past_ttls(1)
@pytest.mark.rules("DLX-04")
@pytest.mark.parametrize("kind", KINDS)
def test_a_message_expiring_into_its_own_queue_is_dropped(connect: Connect, names: Names, target: Target,
                                                         kind: str) -> None:
    client, ch = setup(connect, target, kind)
    queue = names.queue(kind)
    declare(client, ch, queue, kind, ttl_to(queue))
    publish_and_wait(client, queue, target)
    count = ready(client, ch, queue)
    assert count == 0, (
        f"DLX-04: a message that expired from {queue!r} (x-message-ttl {TTL_MS} ms), whose dead-letter exchange '' "
        f"and routing key lead back to {queue!r}, closes a cycle with no rejection in it and is dropped; "
        f"{target.timeout(TTL_TOLERANCE):.1f} s past its TTL the queue still counts {count} (it was dead-lettered into itself)")


@past_ttls(2)
@pytest.mark.rules("DLX-04")
@pytest.mark.parametrize("kind", KINDS)
def test_an_expiry_cycle_through_two_queues_is_broken_where_it_closes(connect: Connect, names: Names,
                                                                     target: Target, kind: str) -> None:
    """a (TTL) → fanout → {b, watch}; b (TTL) → a: the message dies in a, then in b; back to a would
    close the cycle. watch sees a's one death; a and b end empty."""
    client, ch = setup(connect, target, kind)
    a, b, watch = names.queue(f"a-{kind}"), names.queue(f"b-{kind}"), names.queue("watch")
    fanout = exchange(client, ch, names.exchange("fanout"), "fanout")
    declare(client, ch, a, kind, ttl_to(None, fanout))
    declare(client, ch, b, kind, ttl_to(a))
    declare(client, ch, watch)
    bind(client, ch, b, fanout)
    bind(client, ch, watch, fanout)
    publish_and_wait(client, a, target, hops=2)
    counts = {q: ready(client, ch, q) for q in (a, b, watch)}
    assert counts == {a: 0, b: 0, watch: 1}, (
        f"DLX-04: a message expiring in {a!r} is dead-lettered to {b!r} and {watch!r}; expiring in {b!r}, whose "
        f"dead-letter route leads back to {a!r}, it would close a cycle of expiries and is dropped. "
        f"{2 * TTL_MS} ms + {target.timeout(TTL_TOLERANCE):.1f} s after the publish the queues count {counts} "
        f"(expected {a}: 0, {b}: 0, {watch}: 1)")


@pytest.mark.rules("DLX-04")
@pytest.mark.parametrize("kind", KINDS)
def test_a_cycle_with_a_rejection_in_it_goes_on(connect: Connect, names: Names, target: Target, kind: str) -> None:
    """q1 (TTL) → q2 → q1, a consumer rejecting in q2: the message comes round to q2 again."""
    client, ch = setup(connect, target, kind)
    q1, q2 = names.queue(f"q1-{kind}"), names.queue(f"q2-{kind}")
    declare(client, ch, q1, kind, ttl_to(q2))
    declare(client, ch, q2, kind, {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q1})
    Publisher(client).publish(q1, [b"m"], BasicProperties())
    within = TTL_MS / 1000 + target.timeout(TTL_TOLERANCE) + prompt(client)
    first = landed(client, ch, q2, within, no_ack=False)
    assert first is not None, f"DLX-04: the message never expired from {q1!r} into {q2!r} (DLX-01)"
    client.send(ch, BasicReject(delivery_tag=get_ok(first).delivery_tag, requeue=False))
    again = landed(client, ch, q2, within)
    assert again is not None, (
        f"DLX-04: rejected in {q2!r}, the message went to {q1!r}, expired there and is dead-lettered to {q2!r} again: "
        f"a cycle with a rejection in it is not broken; it never came back to {q2!r} within {within:.1f} s")
    deaths = [{k: d.get(k) for k in ("queue", "reason", "count")} for d in headers_of(again).get("x-death", [])]
    assert deaths == [{"queue": q1, "reason": "expired", "count": 2}, {"queue": q2, "reason": "rejected", "count": 1}], (
        f"DLX-04: after expiring in {q1!r}, rejected in {q2!r} and expiring in {q1!r} again, x-death is "
        f"[{q1} expired 2, {q2} rejected 1]; got {deaths}")


@past_ttls(2)
@pytest.mark.rules("DLX-04")
@pytest.mark.parametrize("kind", KINDS)
def test_an_expiry_cycle_entered_by_a_rejection_is_broken(connect: Connect, names: Names, target: Target,
                                                          kind: str) -> None:
    """c → a (TTL) → b (TTL) → a: rejected in c, the message expires in a, then in b; back into a it
    would close a cycle of expiries (the rejection in c is not part of it) and is dropped. The
    queues are watched for three TTLs more: a broker that lets it go round shows it in a or b."""
    client, ch = setup(connect, target, kind)
    a, b, c = names.queue(f"a-{kind}"), names.queue(f"b-{kind}"), names.queue(f"c-{kind}")
    declare(client, ch, a, kind, ttl_to(b))
    declare(client, ch, b, kind, ttl_to(a))
    declare(client, ch, c, kind, {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": a})
    Publisher(client).publish(c, [b"m"], BasicProperties())
    die(client, ch, c, "reject")
    time.sleep(2 * TTL_MS / 1000 + target.timeout(TTL_TOLERANCE))  # its two expiries, on the broker's clock
    watch_until = time.monotonic() + 3 * TTL_MS / 1000
    while True:
        counts = {q: ready(client, ch, q) for q in (a, b)}
        assert counts == {a: 0, b: 0}, (
            f"DLX-04: a message rejected in {c!r} goes to {a!r}, expires there into {b!r} and expires there again; "
            f"back into {a!r} it closes a cycle of expiries (the rejection happened before the cycle) and is dropped. "
            f"{2 * TTL_MS} ms + {target.timeout(TTL_TOLERANCE):.1f} s after the reject the queues count {counts}: it is "
            "still going round")
        if time.monotonic() > watch_until:
            break


# -- DLX-05: a missing or empty dead-letter exchange ------------------------------------------------
@pytest.mark.long_wait(3 * (TTL_MS / 1000 + TTL_TOLERANCE))  # schedule: a TTL and its tolerance in each phase
@pytest.mark.rules("DLX-05")
@pytest.mark.parametrize("how", ["reject", "expired"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_dead_letter_exchange_drops_the_message_until_it_exists(connect: Connect, names: Names,
                                                                         target: Target, kind: str, how: str) -> None:
    client, ch = setup(connect, target, kind)
    dlx, dlq = names.exchange("later"), declare(client, ch, names.queue("dlq"))
    queue = declare(client, ch, names.queue(kind), kind, {"x-dead-letter-exchange": dlx})
    properties = BasicProperties(expiration=str(TTL_MS) if how == "expired" else None)
    phases = ("missing", "unbound", "bound")
    for phase in phases:
        if phase == "unbound":
            exchange(client, ch, dlx, "fanout")
        if phase == "bound":
            bind(client, ch, dlq, dlx)
        Publisher(client).publish(queue, [phase.encode()], properties)
        die(client, ch, queue, how)
        if how == "expired":
            time.sleep(TTL_MS / 1000 + target.timeout(TTL_TOLERANCE))
        if phase == "bound":  # a quorum queue dead-letters after it applied the reject (a rabbit_fifo
            # effect): the "unbound" message may be routed once the binding exists, and arrive first
            bodies: list[bytes] = []
            while b"bound" not in bodies and len(bodies) < len(phases):
                got = landed(client, ch, dlq, prompt(client) + 0.1)
                if got is None:
                    break
                bodies.append(got.body)
            assert b"bound" in bodies, (
                f"DLX-05: once the dead-letter exchange {dlx!r} exists and {dlq!r} is bound to it, a message {how} "
                f"from {queue!r} lands there; {dlq!r} got {bodies or 'nothing'}")
            continue
        count = ready(client, ch, queue)  # the round trip also shows the channel is still open
        assert count == 0, (
            f"DLX-05: a message {how} from {queue!r} whose dead-letter exchange {dlx!r} "
            f"{'does not exist' if phase == 'missing' else 'routes it nowhere'} is dropped, with no error; "
            f"the queue still counts {count}")


@pytest.mark.rules("DLX-05")
@pytest.mark.parametrize("kind", KINDS)
def test_each_queue_the_dead_letter_exchange_reaches_gets_a_copy(connect: Connect, names: Names, target: Target,
                                                               kind: str) -> None:
    client, ch = setup(connect, target, kind)
    fanout = exchange(client, ch, names.exchange("dlx"), "fanout")
    dlqs = [declare(client, ch, names.queue(f"dlq{i}")) for i in (1, 2)]
    for dlq in dlqs:
        bind(client, ch, dlq, fanout)
    queue = declare(client, ch, names.queue(kind), kind, {"x-dead-letter-exchange": fanout})
    Publisher(client).publish(queue, [b"m"], BasicProperties())
    die(client, ch, queue, "reject")
    got = {dlq: landed(client, ch, dlq, prompt(client) + 0.1) is not None for dlq in dlqs}
    assert all(got.values()), (f"DLX-05: a message rejected from {queue!r} goes to each queue its dead-letter "
                               f"exchange {fanout!r} (fanout) reaches; arrived: {got}")


# -- DLX-06: the keys of a dead-lettered message ------------------------------------------------------
def cc_bcc_case(connect: Connect, names: Names, target: Target, kind: str, dlrk: str | None,
                expected: set[str]) -> tuple[dict[str, str], dict[str, list[Any]]]:
    """A message published to amq.direct with key k1, CC [k2], BCC [k3], dead-lettered (rejected)
    into a direct exchange bound to a queue per key (k1, k2, k3 and `dlrk`): (keys, what each queue
    got). The `expected` queues are waited for (each queue takes its copy on its own), then the
    others looked at once."""
    client, ch = setup(connect, target, kind)
    keys = {k: names.queue(k) for k in ("k1", "k2", "k3", "dlrk")}
    dlx = exchange(client, ch, names.exchange("dlx"), "direct")
    for key in keys.values():
        bind(client, ch, declare(client, ch, key), dlx, key)
    arguments = {"x-dead-letter-exchange": dlx, **({"x-dead-letter-routing-key": keys["dlrk"]} if dlrk else {})}
    src = declare(client, ch, names.queue(f"src-{kind}"), kind, arguments)
    bind(client, ch, src, "amq.direct", keys["k1"])
    Publisher(client).publish(keys["k1"], [b"m"], BasicProperties(headers={"CC": [keys["k2"]], "BCC": [keys["k3"]]}),
                              exchange="amq.direct")
    die(client, ch, src, "reject")
    got: dict[str, list[Any]] = {}
    for k in sorted(keys, key=lambda k: k not in expected):
        reply = landed(client, ch, keys[k], prompt(client) + 0.1 if k in expected else 0)
        got[k] = [] if reply is None else [get_ok(reply).routing_key, headers_of(reply)]
    return keys, got


@pytest.mark.rules("DLX-06")
@pytest.mark.parametrize("kind", KINDS)
def test_with_a_dead_letter_routing_key_cc_and_bcc_do_not_route_it(connect: Connect, names: Names, target: Target,
                                                                  kind: str) -> None:
    keys, got = cc_bcc_case(connect, names, target, kind, "dlrk", {"dlrk"})
    arrived = sorted(k for k, v in got.items() if v)
    assert arrived == ["dlrk"], (
        f"DLX-06: dead-lettered with x-dead-letter-routing-key {keys['dlrk']!r}, a message published with key "
        f"{keys['k1']!r}, CC [{keys['k2']!r}] and BCC [{keys['k3']!r}] is routed by that key alone; it arrived "
        f"by {arrived}")
    headers = got["dlrk"][1]
    legacy = target.profile.expect("DLX-06").startswith("variant:")
    want_cc = None if legacy else [keys["k2"]]
    assert "BCC" not in headers and headers.get("CC") == want_cc, (
        f"DLX-06: BCC is never delivered; CC is {'removed before 3.13' if legacy else 'kept from 3.13'} "
        f"({target.profile.name}); headers: {headers}")
    deaths = headers.get("x-death") or [{}]
    assert deaths[0].get("routing-keys") == [keys["k1"], keys["k2"]], (
        f"DLX-06: x-death routing-keys are the key it was published with and its CC keys (not BCC); "
        f"got {deaths[0].get('routing-keys')!r}")


@pytest.mark.rules("DLX-06")
@pytest.mark.parametrize("kind", KINDS)
def test_without_a_dead_letter_routing_key_its_cc_and_bcc_keys_route_it(connect: Connect, names: Names,
                                                                        target: Target, kind: str) -> None:
    keys, got = cc_bcc_case(connect, names, target, kind, None, {"k1", "k2", "k3"})
    arrived = sorted(k for k, v in got.items() if v)
    assert arrived == ["k1", "k2", "k3"], (
        f"DLX-06: without x-dead-letter-routing-key, a dead-lettered message is routed by every key it was "
        f"published with: {keys['k1']!r}, CC {keys['k2']!r} and BCC {keys['k3']!r}; it arrived by {arrived}")
    for k in arrived:
        key, headers = got[k]
        assert key == keys["k1"] and "BCC" not in headers and headers.get("CC") == [keys["k2"]], (
            f"DLX-06: each copy is delivered with the key it was published with ({keys['k1']!r}), its CC header and "
            f"no BCC; the copy bound by {k} came with key {key!r}, headers {headers}")


# -- DLX-07: an x-death header the publisher set --------------------------------------------------------
OLD = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)


def with_publisher_deaths(connect: Connect, names: Names, target: Target, kind: str,
                          headers: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    client, ch = setup(connect, target, kind)
    dlq = declare(client, ch, names.queue("dlq"))
    src = declare(client, ch, names.queue(f"src-{kind}"), kind,
                  {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    Publisher(client).publish(src, [b"m"], BasicProperties(headers={k: v(src) for k, v in headers.items()}))
    die(client, ch, src, "reject")
    got = landed(client, ch, dlq, prompt(client) + 0.1)
    assert got is not None, f"DLX-07: the rejected message never reached {dlq!r} (DLX-01)"
    return src, headers_of(got)


def summary(deaths: Any) -> list[tuple[Any, Any, Any]]:
    return [(d.get("queue"), d.get("reason"), d.get("count")) for d in deaths] if isinstance(deaths, list) else deaths


@pytest.mark.rules("DLX-07")
@pytest.mark.parametrize("kind", KINDS)
def test_deaths_the_publisher_wrote_count_only_before_3_13(connect: Connect, names: Names, target: Target,
                                                           kind: str) -> None:
    def entries(src: str) -> list[dict[str, Any]]:
        return [{"queue": "elsewhere", "reason": "expired", "count": 3, "exchange": "", "routing-keys": ["x"],
                 "time": OLD},
                {"queue": src, "reason": "rejected", "count": 2, "exchange": "", "routing-keys": [src], "time": OLD}]
    src, headers = with_publisher_deaths(connect, names, target, kind,
                                         {"x-death": entries, "x-first-death-queue": lambda _src: "elsewhere"})
    deaths = summary(headers.get("x-death"))
    if target.profile.expect("DLX-07").startswith("variant:"):
        want, first = [(src, "rejected", 3), ("elsewhere", "expired", 3)], "elsewhere"
        why = "before 3.13 the publisher's entries are the message's deaths: its own (queue, reason) entry counts one more"
    else:
        want, first = [(src, "rejected", 1)], src
        why = "from 3.13 only the deaths the broker recorded count: the publisher's x-death is replaced"
    assert (deaths, headers.get("x-first-death-queue")) == (want, first), (
        f"DLX-07: a message published with x-death [elsewhere expired 3, {src} rejected 2] and rejected from "
        f"{src!r} ({target.profile.name}): {why}; expected x-death {want} and x-first-death-queue {first!r}, "
        f"got {deaths} and {headers.get('x-first-death-queue')!r}")


@pytest.mark.rules("DLX-07")
@pytest.mark.parametrize("kind", KINDS)
def test_repeated_publisher_deaths_are_grouped_only_before_3_13(connect: Connect, names: Names, target: Target,
                                                                kind: str) -> None:
    """Entries without a count, repeated (as brokers before 3.5 wrote them): before 3.13 grouped per
    (queue, reason) with the number of repeats as count (rabbitmq-server #152)."""
    repeated = [{"queue": q, "reason": "expired", "exchange": "", "routing-keys": [q], "time": OLD}
                for q in ("q97", "q97", "q97", "q98")]
    src, headers = with_publisher_deaths(connect, names, target, kind, {"x-death": lambda _src: repeated})
    deaths = summary(headers.get("x-death"))
    legacy = target.profile.expect("DLX-07").startswith("variant:")
    want = [(src, "rejected", 1), ("q98", "expired", 1), ("q97", "expired", 3)] if legacy else [(src, "rejected", 1)]
    assert deaths == want, (
        f"DLX-07: x-death [q97, q97, q97, q98] (expired, no count) set by the publisher, then rejected from {src!r} "
        f"({target.profile.name}): expected {want}, got {deaths}")


@pytest.mark.rules("DLX-07")
@pytest.mark.parametrize("kind", KINDS)
def test_an_x_death_that_is_no_array_is_replaced(connect: Connect, names: Names, target: Target, kind: str) -> None:
    src, headers = with_publisher_deaths(connect, names, target, kind, {"x-death": lambda _src: "[I, am, not, array]"})
    deaths = summary(headers.get("x-death"))
    assert deaths == [(src, "rejected", 1)], (
        f"DLX-07: a message whose x-death header is a string, rejected from {src!r}, carries a fresh x-death "
        f"[{src} rejected 1]; got {deaths}")
