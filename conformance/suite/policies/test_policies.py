"""Policies on queues (POL-01, POL-02): which policy applies, and whether a queue's argument or
the policy's value does where both set a key.

Rules:
- Every policy matches exactly one queue of the test (`exact`: its name, anchored) and is put
  before that queue is declared (a queue reads its policy when it is created; a policy changed on
  a live queue reaches it asynchronously, not judged here). Such a policy touches no other queue,
  so the tests are not broker-wide (conformance/plugin/distributed.py); the `admin` fixture
  deletes it at teardown. Without --broker-admin the tests are needs-admin.
- Effects are read as the limits area reads them (`trial`, `predict`: LEN-02, LEN-04), a TTL of 0
  as the count falling to 0 (asked again, bounded by `prompt`), a dead-lettered message where it
  landed, an expiry as the queue gone within `EXPIRES_WAIT` (scaled, by kind) or still there after it,
  looked at in the admin's queue list (`gone_at`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from codec import BasicProperties, BasicReject, QueuePurge, QueuePurgeOk
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.limits import REJECT, Limits, bodies, held, predict, publish_one_by_one
from conformance.suite.steps.queues import CLASSIC, QUORUM, declare, get, poll_ready, prompt, require_kind
from conformance.suite.steps.timeouts import exact

Connect = Callable[..., RawClient]
KINDS = [CLASSIC, QUORUM]
LONG = 600_000  # ms: never reached within a test
EXPIRES_MS = 300
EXPIRES_WAIT = {CLASSIC: 3.0, QUORUM: 12.0}  # s (scaled): an unused queue with expires 300 ms gone, or seen to stay
# (a quorum queue looks at its expiry on its machine's tick, every 5 s: rabbit_fifo tick/2, is_expired)
LOOK_EVERY = 0.1  # s between two looks at the admin's queue list


def policy(admin: RestoringAdmin, target: Target, queue: str, definition: dict[str, Any], *, label: str = "pol",
           apply_to: str = "queues", priority: int = 0, operator: bool = False) -> None:
    admin.put_policy(target.vhost, f"{queue}.{label}", exact(queue), definition, apply_to, priority, operator=operator)


def under_policy(connect: Connect, names: Names, target: Target, admin: RestoringAdmin, kind: str,
                 definition: dict[str, Any], arguments: dict[str, Any] | None = None,
                 apply_to: str = "queues") -> tuple[RawClient, int, str]:
    """A `kind` queue declared (with `arguments`) under a policy of `definition` matching it alone:
    (client, channel, queue)."""
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    queue = names.queue(kind)
    policy(admin, target, queue, definition, apply_to=apply_to)
    declare(client, ch, queue, kind, arguments)
    return client, ch, queue


def kept(client: RawClient, ch: int, queue: str, count: int) -> tuple[list[str], list[bytes]]:
    """Publish m1..m<count> one at a time: (confirms, what the queue holds then)."""
    return publish_one_by_one(client, queue, bodies(count)), held(client, ch, queue)


def assert_kept(client: RawClient, ch: int, queue: str, kind: str, limits: Limits, count: int, why: str) -> None:
    """m1..m<count> published one at a time are confirmed and kept as a queue with `limits` would
    (`predict`); else fail with `why`, what was expected and what the broker did."""
    sent = bodies(count)
    predicted = predict(kind, limits, [len(b) for b in sent])
    want = predicted.confirms, [sent[i] for i in predicted.kept]
    have = kept(client, ch, queue, count)
    assert have == want, f"{why}: after m1..m{count} (confirms, held) {want}; got {have}"


@pytest.mark.rules("POL-01")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("apply_to", ["queues", "all", "exchanges"])
def test_a_policy_applies_to_the_queues_its_apply_to_names(connect: Connect, names: Names, target: Target,
                                                           admin: RestoringAdmin, kind: str, apply_to: str) -> None:
    client, ch, queue = under_policy(connect, names, target, admin, kind, {"max-length": 1}, apply_to=apply_to)
    applies = apply_to != "exchanges"
    assert_kept(client, ch, queue, kind, Limits(max_length=1 if applies else None), 3, (
        f"POL-01: a policy max-length 1 with apply-to {apply_to!r} matching the {kind} queue "
        f"{'applies' if applies else 'does not apply'} to it"))


APPLIED = 5.0  # s (scaled): a policy set on, or deleted from, a live queue reaches it (POL-01)


@pytest.mark.rules("POL-01")
@pytest.mark.parametrize("kind", KINDS)
def test_a_policy_reaches_a_live_queue_and_leaves_it_when_deleted(connect: Connect, names: Names, target: Target,
                                                                  admin: RestoringAdmin, kind: str) -> None:
    """The change reaches the queue's process asynchronously: each look starts afresh (purge, three
    publishes, the count), until the effect shows or `APPLIED` s passed."""
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    queue = declare(client, ch, names.queue(kind), kind)
    for phase, want in (("set", 1), ("deleted", 3)):
        if phase == "set":
            policy(admin, target, queue, {"max-length": 1})
        else:
            admin.delete_policy(target.vhost, f"{queue}.pol")
        deadline = time.monotonic() + target.timeout(APPLIED)
        while True:
            client.rpc(ch, QueuePurge(queue=queue), QueuePurgeOk)
            count = len(kept(client, ch, queue, 3)[1])
            if count == want or time.monotonic() > deadline:
                break
        assert count == want, (
            f"POL-01: once a policy max-length 1 matching the live {kind} queue {queue!r} is {phase}, the queue "
            f"keeps {want} of 3 messages; {target.timeout(APPLIED):.0f} s after that it still kept {count}")


@pytest.mark.rules("POL-01")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("higher", ["max-length 2", "max-length 1 reject-publish"])
def test_the_highest_priority_policy_applies_alone(connect: Connect, names: Names, target: Target,
                                                   admin: RestoringAdmin, kind: str, higher: str) -> None:
    """Two policies match the queue: {max-length 2} and {max-length 1, overflow reject-publish};
    only the higher one's keys apply (the other's overflow does not join a max-length 2)."""
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    queue = names.queue(kind)
    two, one = {"max-length": 2}, {"max-length": 1, "overflow": REJECT}
    policy(admin, target, queue, two, label="two", priority=10 if higher == "max-length 2" else 1)
    policy(admin, target, queue, one, label="one", priority=1 if higher == "max-length 2" else 10)
    declare(client, ch, queue, kind)
    limits = Limits(max_length=2) if higher == "max-length 2" else Limits(max_length=1, overflow=REJECT)
    assert_kept(client, ch, queue, kind, limits, 4, (
        f"POL-01: of the policies {two} and {one} matching the {kind} queue, the higher-priority one "
        f"({higher}) applies alone"))


@pytest.mark.rules("POL-02")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("argument", "value"), [(3, 1), (1, 3)], ids=["policy-lower", "argument-lower"])
def test_the_lower_max_length_wins(connect: Connect, names: Names, target: Target, admin: RestoringAdmin,
                                   kind: str, argument: int, value: int) -> None:
    client, ch, queue = under_policy(connect, names, target, admin, kind, {"max-length": value}, {"x-max-length": argument})
    assert_kept(client, ch, queue, kind, Limits(max_length=1), 4, (
        f"POL-02: x-max-length {argument} and a policy max-length {value}: the lower, 1, applies to the {kind} "
        f"queue"))


@pytest.mark.rules("POL-02")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("argument", "value"), [(LONG, 0), (0, LONG)], ids=["policy-lower", "argument-lower"])
def test_the_lower_message_ttl_wins(connect: Connect, names: Names, target: Target, admin: RestoringAdmin,
                                    kind: str, argument: int, value: int) -> None:
    """TTL 0 from either side: the message is gone at once (a quorum queue: within its
    millisecond, TTL-05; the count is asked again, bounded)."""
    client, ch, queue = under_policy(connect, names, target, admin, kind, {"message-ttl": value},
                                     {"x-message-ttl": argument})
    publish_one_by_one(client, queue, [b"m"])
    count = poll_ready(client, ch, queue, 0, prompt(client))
    assert count == 0, (f"POL-02: x-message-ttl {argument} and a policy message-ttl {value}: the lower, 0, applies "
                        f"and the message is gone from the {kind} queue at once; it still counts {count}")


@pytest.mark.rules("POL-02")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("source", ["argument and policy", "policy alone"])
def test_the_dead_letter_exchange_argument_wins(connect: Connect, names: Names, target: Target,
                                                admin: RestoringAdmin, kind: str, source: str) -> None:
    require_kind(target.profile, kind)
    client = connect()
    ch = client.channel()
    by_argument, by_policy = declare(client, ch, names.queue("dlq-arg")), declare(client, ch, names.queue("dlq-pol"))
    queue = names.queue(kind)
    policy(admin, target, queue, {"dead-letter-exchange": "", "dead-letter-routing-key": by_policy})
    arguments = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": by_argument}
    declare(client, ch, queue, kind, arguments if source == "argument and policy" else {})
    publish_one_by_one(client, queue, [b"m"], BasicProperties())
    got = get(client, ch, queue)
    assert got is not None, f"POL-02: the message published to {queue!r} is not there"
    client.send(ch, BasicReject(delivery_tag=got.tag, requeue=False))
    want = by_argument if source == "argument and policy" else by_policy
    other = by_policy if want == by_argument else by_argument
    arrived = poll_ready(client, ch, want, 1, client.timeout)  # 5 s (scaled): once seen at 0 after 2 s on 4.0.5
    astray = poll_ready(client, ch, other, 0, 0)
    assert (arrived, astray) == (1, 0), (
        f"POL-02: a message rejected from a {kind} queue with the dead-letter exchange and routing key from "
        f"{source} goes to {want!r} (the argument wins over the policy; the policy applies where there is no "
        f"argument); {want!r} counts {arrived}, {other!r} counts {astray}")


@pytest.mark.rules("POL-02")
@pytest.mark.parametrize("kind", KINDS)
def test_overflow_argument_or_policy(connect: Connect, names: Names, target: Target, admin: RestoringAdmin,
                                     kind: str) -> None:
    """x-overflow reject-publish and a policy overflow drop-head, x-max-length 1: a classic queue
    takes the argument's, a quorum queue the policy's."""
    client, ch, queue = under_policy(connect, names, target, admin, kind, {"overflow": "drop-head"},
                                     {"x-max-length": 1, "x-overflow": REJECT})
    wins = REJECT if kind == CLASSIC else None
    assert_kept(client, ch, queue, kind, Limits(max_length=1, overflow=wins), 3, (
        f"POL-02: with x-overflow reject-publish and a policy overflow drop-head, a {kind} queue takes the "
        f"{'argument' if kind == CLASSIC else 'policy'}'s"))


@pytest.mark.rules("POL-02")
@pytest.mark.parametrize("kind", [CLASSIC, pytest.param(QUORUM, marks=pytest.mark.long_wait(6))])  # the 5 s tick
@pytest.mark.parametrize(("argument", "value"), [(LONG, EXPIRES_MS), (EXPIRES_MS, LONG)],
                         ids=["policy-lower", "argument-lower"])
def test_expires_argument_and_policy(connect: Connect, names: Names, target: Target, admin: RestoringAdmin,
                                     kind: str, argument: int, value: int) -> None:
    """The lower applies; a quorum queue up to 3.13 takes the policy's (the variant)."""
    _client, _ch, queue = under_policy(connect, names, target, admin, kind, {"expires": value}, {"x-expires": argument})
    policy_wins = kind == QUORUM and target.profile.expect("POL-02").startswith("variant:")
    applied = value if policy_wins else min(argument, value)
    wait = EXPIRES_WAIT[kind]
    seen = gone_at(admin, target, queue, time.monotonic() + target.timeout(wait))
    if applied == EXPIRES_MS:
        assert seen is not None, (
            f"POL-02: x-expires {argument} and a policy expires {value}: {applied} ms applies to the unused {kind} "
            f"queue ({target.profile.name}); it was still there {wait} s (scaled) after its declaration")
    else:
        assert seen is None, (
            f"POL-02: x-expires {argument} and a policy expires {value}: a quorum queue up to 3.13 takes the "
            f"policy's, {value} ms ({target.profile.name}); the queue was deleted within {wait} s")


def gone_at(admin: RestoringAdmin, target: Target, queue: str, until: float) -> float | None:
    """When the admin's queue list first lacked `queue` (monotonic), asking until `until`; None if
    it never did. Asked of the admin, not the queue: a declare or a basic.get would renew its lease,
    and a publish to a quorum queue being deleted crashed RabbitMQ 3.10.8's channel (541)."""
    while True:
        if all(q.name != queue for q in admin.list_queues(target.vhost)):
            return time.monotonic()
        if time.monotonic() >= until:
            return None
        time.sleep(LOOK_EVERY)


OPERATOR_CASES: dict[str, tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any], Limits]] = {
    # case -> (x-arguments, policy's definition or None, operator policy's definition, what applies)
    "alone": ({}, None, {"max-length": 1}, Limits(max_length=1)),
    "policy-lower": ({}, {"max-length": 1}, {"max-length": 3}, Limits(max_length=1)),
    "operator-lower": ({}, {"max-length": 3}, {"max-length": 1}, Limits(max_length=1)),
    "merged-keys": ({}, {"overflow": REJECT}, {"max-length": 1}, Limits(max_length=1, overflow=REJECT)),
    "argument-lower": ({"x-max-length": 1}, None, {"max-length": 3}, Limits(max_length=1)),
    "operator-lower-than-argument": ({"x-max-length": 3}, None, {"max-length": 1}, Limits(max_length=1)),
}


@pytest.mark.rules("POL-03")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(OPERATOR_CASES))
def test_an_operator_policy_merges_with_the_policy(connect: Connect, names: Names, target: Target,
                                                   admin: RestoringAdmin, kind: str, case: str) -> None:
    """An operator policy's keys join the policy's; a key both set, or set by the queue's argument
    too, takes the lower number."""
    require_kind(target.profile, kind)
    arguments, user, operator, applies = OPERATOR_CASES[case]
    client = connect()
    ch = client.channel()
    queue = names.queue(kind)
    policy(admin, target, queue, operator, label="op", operator=True)
    if user is not None:
        policy(admin, target, queue, user)
    declare(client, ch, queue, kind, arguments)
    assert_kept(client, ch, queue, kind, applies, 3, (
        f"POL-03: with the arguments {arguments}, the policy {user} and the operator policy {operator}, the {kind} "
        f"queue acts on {applies}"))
