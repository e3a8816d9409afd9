"""Which dead-letter arguments a queue may be declared with (DLX-03), with RabbitMQ's exact texts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from codec import QueueDeclare, QueueDeclareOk, ReplyCode
from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.queues import CLASSIC, QUORUM, require_kind
from conformance.suite.steps.topology import Judge

Connect = Callable[..., RawClient]
DLX, DLRK = "x-dead-letter-exchange", "x-dead-letter-routing-key"
KINDS = [CLASSIC, QUORUM]

REFUSED: dict[str, tuple[dict[str, Any], str]] = {  # case -> (arguments, the text after the queue)
    "exchange bool": ({DLX: True}, "invalid type 'bool' for arg 'x-dead-letter-exchange' in {q}"),
    "exchange double": ({DLX: 1.5}, "invalid type 'double' for arg 'x-dead-letter-exchange' in {q}"),
    "exchange table": ({DLX: {"a": 1}}, "invalid type 'table' for arg 'x-dead-letter-exchange' in {q}"),
    "exchange binary": ({DLX: b"dlx"}, "invalid type 'binary' for arg 'x-dead-letter-exchange' in {q}"),
    "routing key bool": ({DLX: "amq.direct", DLRK: True},
                         "invalid arg 'x-dead-letter-routing-key' for {q}: {{unacceptable_type,bool}}"),
    "routing key alone": ({DLRK: "rk"}, "invalid arg 'x-dead-letter-routing-key' for {q}: routing_key_but_no_dlx_defined"),
}
ACCEPTED: dict[str, dict[str, Any]] = {
    "an exchange that exists": {DLX: "amq.direct"},
    "an exchange that does not exist yet": {DLX: "amqpc.no.such.exchange"},
    "exchange and routing key": {DLX: "amq.direct", DLRK: "rk"},
    "the default exchange": {DLX: ""},
}


def queue_arguments(kind: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {**arguments, **({} if kind == CLASSIC else {"x-queue-type": kind})}


@pytest.mark.rules("DLX-03")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(REFUSED))
def test_invalid_dead_letter_arguments_are_refused(connect: Connect, names: Names, target: Target, kind: str,
                                                   case: str) -> None:
    require_kind(target.profile, kind)
    judge = Judge(connect(), target, "DLX-03")
    queue = names.queue(kind)
    arguments, text = REFUSED[case]
    judge.refused(f"declaring a {kind} queue with {arguments}",
                  QueueDeclare(queue=queue, durable=kind != CLASSIC, arguments=queue_arguments(kind, arguments)),
                  QueueDeclareOk, ReplyCode.PRECONDITION_FAILED,
                  "PRECONDITION_FAILED - " + text.format(q=f"queue '{queue}' in vhost '{target.vhost}'"))


@pytest.mark.rules("DLX-03")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(ACCEPTED))
def test_valid_dead_letter_arguments_are_taken(connect: Connect, names: Names, target: Target, kind: str,
                                               case: str) -> None:
    require_kind(target.profile, kind)
    judge = Judge(connect(), target, "DLX-03")
    arguments = ACCEPTED[case]
    judge.ok(f"declaring a {kind} queue with {case} ({arguments})",
             QueueDeclare(queue=names.queue(kind), durable=kind != CLASSIC, arguments=queue_arguments(kind, arguments)),
             QueueDeclareOk)
