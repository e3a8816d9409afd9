"""Declarations whose outcome changed between RabbitMQ versions (DCL-03..05, the upgrade pre-flight's).

DCL-03: a classic queue's x-queue-version other than 2 is refused on 4.3 (406), accepted before.
DCL-04: a transient non-exclusive queue is deprecated from 4.0 but, permitted by default, declared.
DCL-05: x-queue-mode is accepted everywhere (ignored from 3.12).
Each case runs on a fresh channel; the reply code, scope, text and class/method ids are judged.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codec import (
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicProperties,
    BasicPublish,
    QueueDeclare,
    QueueDeclareOk,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.plugin.session import Names, Target
from conformance.run.admin import AdminError
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.replies import assert_text, refused
from conformance.suite.steps.timeouts import exact

Connect = Callable[..., RawClient]


@pytest.mark.rules("DCL-03")
@pytest.mark.clauses("DCL-03.a", "DCL-03.b")
@pytest.mark.parametrize("version", [1, 2])
def test_a_classic_queue_version(connect: Connect, names: Names, target: Target, version: int) -> None:
    client = connect()
    queue = names.queue("qv")
    declare = QueueDeclare(queue=queue, durable=True, arguments={"x-queue-version": version})
    if version == 2 or not target.profile.at_least("4.3"):
        client.rpc(client.channel(), declare, QueueDeclareOk, timeout=target.timeout(5))
        return
    closed = refused(client, client.channel(), declare, QueueDeclareOk, target)
    assert isinstance(closed, ChannelClosed), f"a channel error was expected: {closed}"
    assert (closed.code, closed.class_id, closed.method_id) == (ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["queue.declare"]), closed
    assert_text(target, closed, f"PRECONDITION_FAILED - invalid arg 'x-queue-version' for queue '{queue}' in vhost "
                                f"'{target.vhost}': \"unsupported queue version '{version}'\"")


@pytest.mark.rules("DCL-04")
@pytest.mark.clauses("DCL-04.a")
@pytest.mark.parametrize("auto_delete", [False, True], ids=["plain", "auto-delete"])
def test_a_transient_non_exclusive_queue_is_still_declared(connect: Connect, names: Names, target: Target,
                                                             auto_delete: bool) -> None:
    """Deprecated (transient_nonexcl_queues) but permitted by default on every version here."""
    client = connect()
    queue = names.queue("transient")
    ok = client.rpc(client.channel(), QueueDeclare(queue=queue, auto_delete=auto_delete), QueueDeclareOk,
                    timeout=target.timeout(5)).method
    assert isinstance(ok, QueueDeclareOk) and ok.queue == queue, ok


@pytest.mark.rules("DCL-05")
@pytest.mark.clauses("DCL-05.a")
@pytest.mark.parametrize("mode", ["lazy", "default"])
def test_x_queue_mode_is_accepted(connect: Connect, names: Names, target: Target, mode: str) -> None:
    client = connect()
    queue = names.queue("mode")
    ok = client.rpc(client.channel(), QueueDeclare(queue=queue, durable=True, arguments={"x-queue-mode": mode}),
                    QueueDeclareOk, timeout=target.timeout(5)).method
    assert isinstance(ok, QueueDeclareOk) and ok.queue == queue, ok


@pytest.mark.rules("DCL-05")
@pytest.mark.clauses("DCL-05.c")
def test_a_queue_mode_policy_is_accepted_and_changes_nothing_seen(connect: Connect, names: Names, target: Target,
                                                                  admin: RestoringAdmin) -> None:
    """The queue-mode policy key is accepted, and the queue it names serves its messages as any
    classic queue (what it keeps on disk is not visible over the wire)."""
    client = connect()
    ch = client.channel()
    queue = names.queue("mode")
    try:
        admin.put_policy(target.vhost, f"{queue}.mode", exact(queue), {"queue-mode": "lazy"}, "queues", 100)
    except AdminError as exc:
        raise AssertionError(f"DCL-05: the queue-mode policy key must be accepted (ignored from 3.12); the broker "
                             f"refused the policy: {exc}") from None
    client.rpc(ch, QueueDeclare(queue=queue, durable=True), QueueDeclareOk, timeout=target.timeout(5))
    client.send(ch, BasicPublish(routing_key=queue), BasicProperties(delivery_mode=2), b"m")
    got = client.rpc(ch, BasicGet(queue=queue, no_ack=True), BasicGetOk, BasicGetEmpty, timeout=target.timeout(5))
    assert isinstance(got.method, BasicGetOk) and got.body == b"m", (
        f"DCL-05: a classic queue under a queue-mode policy serves its messages as any other; basic.get gave "
        f"{got.method}")
