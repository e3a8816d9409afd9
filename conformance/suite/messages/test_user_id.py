"""A publish's user-id property (MSG-02): it must name the user the connection authenticated as.

The user is the one of --broker-url (guest unless the URL names another). A refused publish is
seen on the next request of its channel; what was routed is read with basic.get.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from codec import (
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    QueueDeclare,
    QueueDeclareOk,
    ReplyCode,
)
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.access import account
from conformance.suite.steps.topology import Judge

Connect = Callable[..., RawClient]


@pytest.mark.rules("MSG-02")
@pytest.mark.clauses("MSG-02.a", "MSG-02.b", "MSG-02.c")
def test_user_id_must_be_the_connections_user(connect: Connect, names: Names, target: Target) -> None:
    judge = Judge(connect(), target, "MSG-02")
    user = unquote(urlsplit(target.url).username or "guest")
    q = names.queue("q")
    judge.ok("declaring a queue", QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    ch = judge.channel()
    judge.client.send(ch, BasicPublish(exchange="", routing_key=q), BasicProperties(user_id=user), b"own user")
    judge.client.send(ch, BasicPublish(exchange="", routing_key=q), BasicProperties(), b"no user-id")
    got: Any = judge.ok("a basic.get after publishes naming the connection's user and none", BasicGet(queue=q, no_ack=True),
                        BasicGetOk, BasicGetEmpty, ch=ch)
    assert isinstance(got.method, BasicGetOk) and got.body == b"own user", (
        f"MSG-02: a publish whose user-id is the connection's user ({user!r}) must be routed; the queue gave {got.method}")
    other = f"not-{user}"
    judge.publish_refused(f"a publish with user-id {other!r} on a connection of {user!r}", "", q,
                          ReplyCode.PRECONDITION_FAILED,
                          f"PRECONDITION_FAILED - user_id property set to '{other}' but authenticated user was '{user}'",
                          properties=BasicProperties(user_id=other), ch=ch)
    rest = [judge.client.rpc(judge.channel(), BasicGet(queue=q, no_ack=True), BasicGetOk, BasicGetEmpty,
                             timeout=target.timeout(5)) for _ in range(2)]
    bodies = [r.body for r in rest if isinstance(r.method, BasicGetOk)]
    assert bodies == [b"no user-id"], (f"MSG-02: the queue must hold the publish without user-id and not the "
                                      f"refused one; it held {bodies}")


@pytest.mark.rules("MSG-02")
@pytest.mark.clauses("MSG-02.d")
def test_an_impersonator_may_set_any_user_id(connect: Connect, names: Names, target: Target,
                                             admin: RestoringAdmin) -> None:
    user = account(admin, target, "impersonator", tags="impersonator")
    judge = Judge(connect(url=user.url), target, "MSG-02")
    q = names.queue("q")
    judge.ok("declaring a queue", QueueDeclare(queue=q, exclusive=True), QueueDeclareOk)
    ch = judge.channel()
    judge.client.send(ch, BasicPublish(exchange="", routing_key=q), BasicProperties(user_id="someone-else"), b"m")
    got: Any = judge.ok("a basic.get after a publish with user-id 'someone-else' by a user tagged impersonator",
                        BasicGet(queue=q, no_ack=True), BasicGetOk, BasicGetEmpty, ch=ch)
    assert isinstance(got.method, BasicGetOk) and got.body == b"m", (
        f"MSG-02: a user tagged impersonator may publish with any user-id; the publish with user-id 'someone-else' "
        f"was not routed (the queue gave {got.method})")
    assert got.properties.user_id == "someone-else", (
        f"MSG-02: the message keeps the user-id it was published with; it arrived with {got.properties.user_id!r}")
