"""Topic permissions and the user-id property over the wire: ACC-05 (the Java client's
server/TopicPermissions) and ACC-07 (functional/UserIDHeader, with the impersonator tag).

Rules:
- The user has every vhost permission (".*"): only the topic permission can refuse. The
  exchanges and queues are declared by the run's own user; a routed publish is checked with
  basic.get from the run's user.
- The topic patterns use "{username}" ("^{username}\\."), so the expansion is judged too.
"""

from __future__ import annotations

import pytest

from codec import (
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueUnbind,
    QueueUnbindOk,
    ReplyCode,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.access import (
    UNNAMED,
    Account,
    Connect,
    account,
    allowed,
    expect_closed,
    published,
    refused_403,
)
from conformance.suite.steps.queues import await_ready

OWN = r"^{username}\."


def _get(client: RawClient, ch: int, queue: str) -> BasicGetOk | None:
    reply = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk, BasicGetEmpty)
    return reply.method if isinstance(reply.method, BasicGetOk) else None


def _topic_refusal(target: Target, kind: str, key: str, exchange: str, user: str) -> str:
    named = "" if UNNAMED in target.profile.expect("ACC-05") else f"{kind} "
    return (f"{named}access to topic '{key}' in exchange '{exchange}' in vhost '{target.vhost}' "
            f"refused for user '{user}'")


@pytest.mark.rules("ACC-05")
def test_topic_permissions_match_the_routing_key(admin: RestoringAdmin, connect: Connect, names: Names,
                                                 target: Target) -> None:
    setup = connect()
    sch = setup.channel()
    protected, free, direct = names.exchange("topic"), names.exchange("free"), names.exchange("direct")
    by_vhost = names.exchange("byvhost")
    for name, kind in ((protected, "topic"), (free, "topic"), (direct, "direct"), (by_vhost, "topic")):
        setup.rpc(sch, ExchangeDeclare(exchange=name, exchange_type=kind), ExchangeDeclareOk)
    queue = names.queue("q")
    setup.rpc(sch, QueueDeclare(queue=queue), QueueDeclareOk)
    setup.rpc(sch, QueueBind(queue=queue, exchange=protected, routing_key="#"), QueueBindOk)
    user = account(admin, target, "topic")
    for exchange in (protected, direct):
        admin.set_topic_permissions(target.vhost, user.user, exchange, OWN, OWN)
    admin.set_topic_permissions(target.vhost, user.user, by_vhost, r"^{vhost}\.", r"^{vhost}\.")
    client = connect(url=user.url)
    ch = client.channel()
    mine = f"{user.user}.a"
    published(client, ch, BasicPublish(exchange=protected, routing_key=mine),
              f"basic.publish to the topic exchange {protected} with the key {mine!r} (matches {OWN})")
    await_ready(setup, sch, queue, 1, target.timeout(2.0))
    got = _get(setup, sch, queue)
    assert got is not None and got.routing_key == mine, (
        f"ACC-05: the publish with the permitted key {mine!r} is routed to {queue}; basic.get found {got}")
    refused_403(client, ch, BasicPublish(exchange=protected, routing_key="other.a"),
                _topic_refusal(target, "write", "other.a", protected, user.user),
                f"basic.publish to {protected} with the key 'other.a': its write topic permission is {OWN}")
    assert _get(setup, sch, queue) is None, "ACC-05: the refused publish reached the queue"
    ch = client.channel()
    _cc_keys(client, ch, setup, sch, queue, protected, user.user, target)
    ch = client.channel()
    allowed(client, ch, QueueBind(queue=queue, exchange=protected, routing_key=f"{user.user}.#"), QueueBindOk,
            f"queue.bind to {protected} with the key '{user.user}.#' (matches the read topic permission {OWN})")
    refused_403(client, ch, QueueBind(queue=queue, exchange=protected, routing_key="other.#"),
                _topic_refusal(target, "read", "other.#", protected, user.user),
                f"queue.bind to {protected} with the key 'other.#': its read topic permission is {OWN}", reply=QueueBindOk)
    ch = client.channel()
    refused_403(client, ch, QueueUnbind(queue=queue, exchange=protected, routing_key="other.#"),
                _topic_refusal(target, "read", "other.#", protected, user.user),
                f"queue.unbind from {protected} with the key 'other.#': its read topic permission is {OWN}",
                reply=QueueUnbindOk)
    ch = client.channel()
    published(client, ch, BasicPublish(exchange=free, routing_key="other.a"),
              f"basic.publish to the topic exchange {free}, which has no topic permission, with any key")
    published(client, ch, BasicPublish(exchange=direct, routing_key="other.a"),
              f"basic.publish to the direct exchange {direct}: a topic permission applies to topic exchanges only")
    allowed(client, ch, QueueBind(queue=queue, exchange=direct, routing_key="other"), QueueBindOk,
            f"queue.bind to the direct exchange {direct} with any key (not a topic exchange)")
    published(client, ch, BasicPublish(exchange=by_vhost, routing_key=f"{target.vhost}.a"),
              f"basic.publish to {by_vhost} with the key '{target.vhost}.a' (write topic permission ^{{vhost}}\\.)")
    refused_403(client, ch, BasicPublish(exchange=by_vhost, routing_key="{vhost}.a"),
                _topic_refusal(target, "write", "{vhost}.a", by_vhost, user.user),
                f"basic.publish to {by_vhost} with the key '{{vhost}}.a': the pattern's {{vhost}} is replaced first")


def _cc_keys(client: RawClient, ch: int, setup: RawClient, sch: int, queue: str, exchange: str, user: str,
             target: Target) -> None:
    """4.0+: a CC key is checked like the routing key (refused); 3.x: not checked (routed)."""
    mine, cc = f"{user}.a", "other.cc"
    props = BasicProperties(headers={"CC": [cc]})
    what = f"basic.publish to {exchange} with the key {mine!r} and CC [{cc!r}] (write topic permission {OWN})"
    if "CC and BCC keys are not checked" in target.profile.expect("ACC-05"):
        published(client, ch, BasicPublish(exchange=exchange, routing_key=mine), what + ": 3.x checks the key only",
                  props)
        await_ready(setup, sch, queue, 1, target.timeout(2.0))
        assert _get(setup, sch, queue) is not None, f"ACC-05: {what} is routed on 3.x; basic.get found nothing"
        return
    refused_403(client, ch, BasicPublish(exchange=exchange, routing_key=mine),
                _topic_refusal(target, "write", cc, exchange, user), what + ": 4.0+ check the CC keys too", props=props)
    assert _get(setup, sch, queue) is None, f"ACC-05: the refused publish ({what}) reached the queue"


# -- ACC-07: user-id --------------------------------------------------------------------------------
def _publisher(admin: RestoringAdmin, connect: Connect, names: Names, target: Target, label: str,
               tags: str = "") -> tuple[RawClient, int, str, Account, RawClient, int]:
    """The run's client and channel, a queue, and a new user (with `tags`) connected, a channel open."""
    setup = connect()
    sch = setup.channel()
    queue = names.queue(label)
    setup.rpc(sch, QueueDeclare(queue=queue), QueueDeclareOk)
    user = account(admin, target, label, tags=tags)
    client = connect(url=user.url)
    return setup, sch, queue, user, client, client.channel()


@pytest.mark.rules("ACC-07")
def test_the_user_id_must_name_the_user(admin: RestoringAdmin, connect: Connect, names: Names,
                                        target: Target) -> None:
    setup, sch, queue, user, client, ch = _publisher(admin, connect, names, target, "uid")
    published(client, ch, BasicPublish(exchange="", routing_key=queue),
              f"basic.publish with the user-id {user.user!r}, the user's own", BasicProperties(user_id=user.user))
    await_ready(setup, sch, queue, 1, target.timeout(2.0))
    got = _get(setup, sch, queue)
    assert got is not None, "ACC-07: the publish naming its own user is routed; basic.get found nothing"
    expect_closed(client, ch, BasicPublish(exchange="", routing_key=queue), ReplyCode.PRECONDITION_FAILED,
                  f"PRECONDITION_FAILED - user_id property set to 'someone.else' but authenticated user was "
                  f"'{user.user}'", f"basic.publish by {user.user} with the user-id 'someone.else'",
                  props=BasicProperties(user_id="someone.else"))
    assert _get(setup, sch, queue) is None, "ACC-07: the refused publish reached the queue"


@pytest.mark.rules("ACC-07")
def test_an_impersonator_may_publish_any_user_id(admin: RestoringAdmin, connect: Connect, names: Names,
                                                 target: Target) -> None:
    setup, sch, queue, user, client, ch = _publisher(admin, connect, names, target, "imp", tags="impersonator")
    published(client, ch, BasicPublish(exchange="", routing_key=queue),
              f"basic.publish by {user.user} (tag impersonator) with the user-id 'someone.else'",
              BasicProperties(user_id="someone.else"))
    await_ready(setup, sch, queue, 1, target.timeout(2.0))
    setup_get = setup.rpc(sch, BasicGet(queue=queue, no_ack=True), BasicGetOk, BasicGetEmpty)
    assert isinstance(setup_get.method, BasicGetOk), (
        "ACC-07: the impersonator's publish is routed; basic.get found the queue empty")
    props = setup_get.properties
    assert props is not None and props.user_id == "someone.else", (
        f"ACC-07: the message keeps the user-id it was published with; it came with {props}")
