"""Priority queues (PRI-01 classic with x-max-priority, PRI-02 quorum), judged by the model's
delivery order (conformance.model.priorities) for the profile.

Messages are published in one write behind a confirm barrier (all enqueued before the first get),
then taken one by one with basic.get; each body is its publish index.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings

from codec import (
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDeclareOk,
    Typed,
    encode_content,
)
from codec.constants import METHOD_IDS, ReplyCode
from conformance.catalogue.rules import REQUIRED
from conformance.drivers.raw import ChannelClosed, RawClient
from conformance.model.priorities import classic_order, quorum_order
from conformance.plugin.cluster import Cluster
from conformance.plugin.session import Names, Target
from conformance.plugin.verdicts import judged_elsewhere
from conformance.suite.steps.cluster import await_queue_back
from conformance.suite.steps.field_values import ExampleConnection, optional_priorities, typed_integers
from conformance.suite.steps.replies import assert_text
from conformance.suite.steps.wire import Confirms

Connect = Callable[..., RawClient]
PRIORITIES: list[int | None] = [None, 5, 1, 10, 5, 200, 0, 9, 3, None, 31, 40, 4, 2]


def publish_all(client: RawClient, ch: int, queue: str, priorities: list[int | None], target: Target) -> None:
    """One publish per priority, body = its index, in one write; confirmed before returning."""
    client.rpc(ch, ConfirmSelect(), ConfirmSelectOk)
    data = b"".join(encode_content(ch, BasicPublish(routing_key=queue), BasicProperties(priority=p, delivery_mode=2),
                                   b"%d" % i, client.frame_max) for i, p in enumerate(priorities))
    client.send_raw(data, channel=ch)
    Confirms.expecting(1, len(priorities)).collect(client, ch, target.timeout(10))


def get_all(client: RawClient, ch: int, queue: str, no_ack: bool = True) -> list[int]:
    got: list[int] = []
    while isinstance((reply := client.rpc(ch, BasicGet(queue=queue, no_ack=no_ack), BasicGetOk, BasicGetEmpty)).method,
                     BasicGetOk):
        got.append(int(reply.body))
    return got


def _version(target: Target) -> tuple[int, int]:
    name = target.profile.name.removeprefix("rabbitmq-")
    major, minor = name.split(".")
    return int(major), int(minor)


# -- PRI-01 ----------------------------------------------------------------------------------
@pytest.mark.rules("PRI-01")
@pytest.mark.clauses("PRI-01.a", "PRI-01.b")
@pytest.mark.parametrize("max_priority", [10, None], ids=["x-max-priority-10", "no-priorities"])
def test_classic_queue_serves_the_highest_priority_first(connect: Connect, names: Names, target: Target,
                                                         max_priority: int | None) -> None:
    client = connect()
    ch = client.channel()
    queue = names.queue("prio")
    args = {} if max_priority is None else {"x-max-priority": max_priority}
    client.rpc(ch, QueueDeclare(queue=queue, exclusive=True, arguments=args), QueueDeclareOk)
    publish_all(client, ch, queue, PRIORITIES, target)
    assert get_all(client, ch, queue) == classic_order(PRIORITIES, max_priority)


@pytest.mark.rules("PRI-01", "RQ-01")
@pytest.mark.clauses("PRI-01.c")
def test_classic_requeue_goes_back_to_its_place_in_its_level(connect: Connect, names: Names,
                                                             target: Target) -> None:
    if target.profile.expect("PRI-01") != REQUIRED:  # no priorities (0-9-1): RQ-01 alone leaves the position open
        judged_elsewhere(target.profile, "PRI-01")
    client = connect()
    ch = client.channel()
    queue = names.queue("prio")
    client.rpc(ch, QueueDeclare(queue=queue, exclusive=True, arguments={"x-max-priority": 10}), QueueDeclareOk)
    publish_all(client, ch, queue, PRIORITIES, target)
    taken = [int(client.rpc(ch, BasicGet(queue=queue), BasicGetOk).body) for _ in range(5)]
    client.send(ch, BasicNack(delivery_tag=0, multiple=True, requeue=True))
    order = classic_order(PRIORITIES, 10)
    assert taken == order[:5]
    assert get_all(client, ch, queue) == order


@pytest.mark.rules("PRI-01")
@pytest.mark.clauses("PRI-01.d")
def test_classic_priority_order_survives_a_restart(cluster: Cluster, names: Names, target: Target) -> None:
    """A durable priority queue on node 2 holds persistent messages of many priorities; after that
    node's restart (the `cluster` fixture's node control) it serves them in the same order."""
    cluster.require(2)
    queue = names.queue("prio")
    home = cluster.connect(2)
    ch = home.channel()
    home.rpc(ch, QueueDeclare(queue=queue, durable=True, arguments={"x-max-priority": 10}), QueueDeclareOk)
    publish_all(home, ch, queue, PRIORITIES, target)
    cluster.stop(2)
    cluster.start(2)
    client = cluster.connect(2)
    assert await_queue_back(client, queue, target, "PRI-01") == len(PRIORITIES)
    order = get_all(client, client.channel(), queue)
    assert order == classic_order(PRIORITIES, 10), (
        f"PRI-01: a durable priority queue's persistent messages keep their order over a restart: want "
        f"{classic_order(PRIORITIES, 10)} (message indexes), got {order}")


# -- PRI-02 ----------------------------------------------------------------------------------
@pytest.mark.rules("PRI-02")
@pytest.mark.clauses("PRI-02.a")
def test_quorum_queue_priorities(connect: Connect, names: Names, target: Target) -> None:
    if not target.profile.rabbitmq:
        judged_elsewhere(target.profile, "PRI-02")
    client = connect()
    ch = client.channel()
    queue = names.queue("qprio")
    client.rpc(ch, QueueDeclare(queue=queue, durable=True, arguments={"x-queue-type": "quorum"}), QueueDeclareOk)
    publish_all(client, ch, queue, PRIORITIES, target)
    assert get_all(client, ch, queue) == quorum_order(PRIORITIES, _version(target))


@pytest.mark.rules("PRI-02")
@pytest.mark.clauses("PRI-02.b")
def test_quorum_returned_message_goes_before_higher_priorities(connect: Connect, names: Names,
                                                              target: Target) -> None:
    """m1 (priority 1) is taken and returned after m2 (priority 9) was published: the return goes
    first. A delivery limit is set, so 3.10.8 keeps its returns FIFO too (RQ-02)."""
    if not target.profile.rabbitmq:
        judged_elsewhere(target.profile, "PRI-02")
    client = connect()
    ch = client.channel()
    queue = names.queue("qprio")
    client.rpc(ch, QueueDeclare(queue=queue, durable=True, arguments={"x-queue-type": "quorum",
                                                                      "x-delivery-limit": 10}), QueueDeclareOk)
    publish_all(client, ch, queue, [1], target)
    taken = client.rpc(ch, BasicGet(queue=queue), BasicGetOk, timeout=target.timeout(5))
    assert isinstance(taken.method, BasicGetOk) and taken.body == b"0"
    publish_more = encode_content(ch, BasicPublish(routing_key=queue), BasicProperties(priority=9, delivery_mode=2),
                                  b"1", client.frame_max)
    client.send_raw(publish_more, channel=ch)
    Confirms.expecting(2, 1).collect(client, ch, target.timeout(10))
    client.send(ch, BasicNack(delivery_tag=taken.method.delivery_tag, requeue=True))
    order = get_all(client, ch, queue)
    assert order == [0, 1], (f"PRI-02: a returned message goes first (RQ-02), ahead of a higher-priority ready "
                             f"message: want m0 (priority 1, returned) then m1 (priority 9); the queue gave "
                             f"{[f'm{i}' for i in order]}")


BAD_MAX_PRIORITY = {"256": (256, "{max_value_exceeded,256}"), "negative": (-1, "{value_negative,-1}"),
                    "text": ("x", '"expected integer, got longstr"')}


@pytest.mark.rules("PRI-01")
@pytest.mark.clauses("PRI-01.e", "PRI-01.f")
@pytest.mark.parametrize("case", [*BAD_MAX_PRIORITY, "on-quorum"])
def test_a_bad_x_max_priority_is_406(connect: Connect, names: Names, target: Target, case: str) -> None:
    client = connect()
    ch = client.channel()
    queue = names.queue("badprio")
    if case == "on-quorum":
        args: dict[str, object] = {"x-queue-type": "quorum", "x-max-priority": 10}
        reason = " of queue type rabbit_quorum_queue"
    else:
        value, term = BAD_MAX_PRIORITY[case]
        args, reason = {"x-max-priority": value}, f": {term}"
    with pytest.raises(ChannelClosed) as closed:
        client.rpc(ch, QueueDeclare(queue=queue, durable=True, arguments=args), QueueDeclareOk,
                   timeout=target.timeout(5))
    assert (closed.value.code, closed.value.class_id, closed.value.method_id) == (ReplyCode.PRECONDITION_FAILED, *METHOD_IDS["queue.declare"])
    what = f"queue '{queue}' in vhost '{target.vhost}'"
    assert_text(target, closed.value, f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for {what}{reason}")


# -- PRI-01 over the whole range ------------------------------------------------------------
ARGUMENT_INTEGERS = (b"b", b"B", b"s", b"u", b"I", b"i", b"l")  # rabbit_amqqueue INTEGER_ARG_TYPES
PRIORITY_EXAMPLES = 25


def two_levels_at_zero(target: Target) -> bool:
    """PRI-01: x-max-priority 0 has two levels from 3.13.4 (by the reported version, else the profile)."""
    numbers = [int(p) for p in (target.profile.version or "").split(".")[:3] if p.isdigit()]
    return tuple(numbers) >= (3, 13, 4) if len(numbers) == 3 else target.profile.at_least("4.0")


@pytest.mark.takes(12)  # measured: 11.6 s on RabbitMQ 4.3.6, 0.1 s embedded
@pytest.mark.rules("PRI-01")
@pytest.mark.clauses("PRI-01.a", "PRI-01.g", "PRI-01.h")
def test_every_maximum_type_and_priority_orders_by_level(connect: Connect, names: Names, target: Target) -> None:
    """Drawn: x-max-priority of every integer type and value 0..255, priorities 0..255 or none."""
    at_zero = two_levels_at_zero(target)
    examples = ExampleConnection(connect)
    # One queue per typed maximum and connection, drained by each example: a queue with
    # x-max-priority 255 costs RabbitMQ about 2 CPU-s to declare and delete (a backing queue per
    # level), and an empty priority queue orders what comes next as a fresh one (docs/probes.md,
    # "A priority queue kept across examples"). A failed example's connection and queues are left.
    queues: dict[tuple[int, bytes, int], str] = {}

    @settings(max_examples=PRIORITY_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck), phases=(Phase.explicit, Phase.generate, Phase.shrink))
    @example(maximum=Typed(b"b", 0), priorities=[None, 0, 1, 255])
    @example(maximum=Typed(b"l", 255), priorities=[254, 255, 0, None, 128])
    @given(maximum=typed_integers(0, 255, ARGUMENT_INTEGERS), priorities=optional_priorities(10))
    def orders(maximum: Typed, priorities: list[int | None]) -> None:
        with examples.channel() as (client, ch):
            key = (id(client), maximum.kind, maximum.value)
            if (queue := queues.get(key)) is None:
                queue = queues[key] = names.queue("drawn-prio")
                client.rpc(ch, QueueDeclare(queue=queue, exclusive=True, arguments={"x-max-priority": maximum}),
                           QueueDeclareOk)
            publish_all(client, ch, queue, priorities, target)
            got = get_all(client, ch, queue)
        want = classic_order(priorities, maximum.value, at_zero)
        levels = "one level" if maximum.value == 0 and not at_zero else f"levels 0..{max(1, maximum.value)}"
        assert got == want, (
            f"PRI-01: a classic queue with x-max-priority {maximum.value} (type '{maximum.kind.decode()}', {levels}"
            f"{'; 0 is two levels from 3.13.4' if maximum.value == 0 else ''}) serves the highest level first, "
            f"publish order within a level, a message at min(priority, M) (none at 0); published priorities "
            f"{priorities}: want the order {want}, got {got}")

    orders()
