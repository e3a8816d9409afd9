"""Pure-core tests: prefetch, confirms, transactions, cancel notification, error scopes."""

from __future__ import annotations

from codec import (
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicReturn,
    ChannelClose,
    ChannelCloseOk,
    ChannelFlow,
    ChannelOpen,
    ConfirmSelect,
    ConfirmSelectOk,
    QueueDeclare,
    QueueDelete,
    TxCommit,
    TxSelect,
)
from tests.reference_broker.sim import Sim, closes, methods, sends


def ready(n: int, kind: str = "classic", **config: object) -> Sim:
    sim = Sim(**config)
    sim.connect()
    sim.open()
    sim.queue("q", **{"x-queue-type": kind})
    sim.publish("q", *[f"m{i}".encode() for i in range(n)])
    return sim


def test_core_prefetch_size_is_connection_error_540() -> None:
    """QOS-01."""
    sim = ready(0)
    close = closes(sim.do(1, 1, BasicQos(prefetch_size=10)))[0]
    assert (close.code, close.text, close.class_id, close.method_id) == (
        540, "NOT_IMPLEMENTED - prefetch_size!=0 (10)", 60, 10)


def test_core_per_consumer_prefetch_applies_to_new_consumers_only() -> None:
    """QOS-02: an existing consumer keeps its limit."""
    sim = ready(10)
    sim.do(1, 1, BasicQos(prefetch_count=2))
    first = sends(sim.do(1, 1, BasicConsume(queue="q", consumer_tag="a")), BasicDeliver)
    assert len(first) == 2
    sim.do(1, 1, BasicQos(prefetch_count=5))
    assert not sends(sim.do(1, 1, BasicQos(prefetch_count=5)), BasicDeliver)
    more = sends(sim.do(1, 1, BasicAck(2, multiple=True)), BasicDeliver)
    assert [s.method.consumer_tag for s in more] == ["a", "a"]  # still 2 for "a"


def test_core_global_qos_is_per_consumer_in_43_and_channel_wide_when_permitted() -> None:
    """QOS-03 / QOS-04."""
    sim = ready(10)
    sim.do(1, 1, BasicQos(prefetch_count=2, global_=True))
    sim.do(1, 1, BasicConsume(queue="q", consumer_tag="a"))
    got = sends(sim.do(1, 1, BasicConsume(queue="q", consumer_tag="b")), BasicDeliver)
    assert len(got) == 2  # b gets its own 2: the global flag was treated as per-consumer
    legacy = ready(10, global_qos=True)
    legacy.do(1, 1, BasicQos(prefetch_count=3, global_=True))
    a = sends(legacy.do(1, 1, BasicConsume(queue="q", consumer_tag="a")), BasicDeliver)
    b = sends(legacy.do(1, 1, BasicConsume(queue="q", consumer_tag="b")), BasicDeliver)
    assert (len(a), len(b)) == (3, 0)  # one limit shared by the channel


def test_core_quorum_consume_under_global_limit_is_540() -> None:
    """QOS-06 (when global qos is honoured)."""
    sim = ready(1, kind="quorum", global_qos=True)
    sim.do(1, 1, BasicQos(prefetch_count=3, global_=True))
    close = closes(sim.do(1, 1, BasicConsume(queue="q")))[0]
    assert close.code == 540 and close.text.endswith("does not support global qos")


def test_core_get_ignores_prefetch_and_no_ack_is_unlimited() -> None:
    """QOS-07, QOS-08."""
    sim = ready(4)
    sim.do(1, 1, BasicQos(prefetch_count=1))
    assert len([m for _ in range(3) for m in methods(sim.do(1, 1, BasicGet(queue="q")), BasicGetOk)]) == 3
    other = ready(5)
    other.do(1, 1, BasicQos(prefetch_count=1))
    assert len(sends(other.do(1, 1, BasicConsume(queue="q", no_ack=True)), BasicDeliver)) == 5


def test_core_channel_flow_false_is_540() -> None:
    """QOS-11."""
    sim = ready(0)
    assert closes(sim.do(1, 1, ChannelFlow(active=False)))[0].text == "NOT_IMPLEMENTED - active=false"


def test_core_confirms_count_from_one_and_select_twice_keeps_counter() -> None:
    """PC-01, PC-02."""
    sim = ready(0)
    sim.publish("q", b"before")
    assert methods(sim.do(1, 1, ConfirmSelect()))[0] == ConfirmSelectOk()
    assert methods(sim.publish("q", b"x"), BasicAck) == [BasicAck(1, False)]
    sim.do(1, 1, ConfirmSelect())
    assert methods(sim.publish("q", b"y"), BasicAck) == [BasicAck(2, False)]


def test_core_confirm_and_tx_exclude_each_other() -> None:
    """PC-03."""
    sim = ready(0)
    sim.do(1, 1, ConfirmSelect())
    close = methods(sim.do(1, 1, TxSelect()), ChannelClose)[0]
    assert close.reply_text == "PRECONDITION_FAILED - cannot switch from confirm to tx mode"
    other = ready(0)
    other.do(1, 1, TxSelect())
    close = methods(other.do(1, 1, ConfirmSelect()), ChannelClose)[0]
    assert close.reply_text == "PRECONDITION_FAILED - cannot switch from tx to confirm mode"


def test_core_confirms_of_one_flush_are_coalesced() -> None:
    """PC-04: several confirms in one flush go out as one multiple=true ack."""
    from reference_broker.core import Meta

    sim = ready(0)
    sim.do(1, 1, ConfirmSelect())
    for body in (b"a", b"b", b"c"):
        sim.core.apply(Meta(sim.now), 1, 1, BasicPublish(routing_key="q"), BasicProperties(), body)
    assert methods(sim.core.flush()) == [BasicAck(3, True)]


def test_core_mandatory_unroutable_returns_before_ack() -> None:
    """PC-06."""
    sim = ready(0)
    sim.do(1, 1, ConfirmSelect())
    effects = sim.do(1, 1, BasicPublish(routing_key="nowhere", mandatory=True), BasicProperties(), b"x")
    assert methods(effects) == [BasicReturn(312, "NO_ROUTE", "", "nowhere"), BasicAck(1, False)]


def test_core_reject_publish_overflow_nacks() -> None:
    """PC-08."""
    sim = Sim()
    sim.connect()
    sim.open()
    sim.queue("q", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    sim.do(1, 1, ConfirmSelect())
    assert methods(sim.publish("q", b"a"), BasicAck) == [BasicAck(1, False)]
    assert methods(sim.publish("q", b"b"), BasicNack) == [BasicNack(2, True, True)]  # as RabbitMQ sends it


def test_core_tx_commit_publishes_and_errors() -> None:
    """PC-11."""
    sim = ready(0)
    assert methods(sim.do(1, 1, TxCommit()), ChannelClose)[0].reply_text == (
        "PRECONDITION_FAILED - channel is not transactional")
    other = ready(0)
    other.do(1, 1, TxSelect())
    other.publish("q", b"x")
    q = other.core.find_queue("/", "q")
    assert q is not None and q.ready_count() == 0
    other.do(1, 1, TxCommit())
    assert q.ready_count() == 1


def test_core_immediate_and_oversize_publishes() -> None:
    """PC-12."""
    sim = ready(0)
    assert closes(sim.publish("q", b"x", immediate=True))[0].text == "NOT_IMPLEMENTED - immediate=true"
    small = ready(0, max_message_size=4)
    close = methods(small.publish("q", b"12345"), ChannelClose)[0]
    assert close.reply_text == "PRECONDITION_FAILED - message size 5 is larger than configured max size 4"


def test_core_queue_delete_cancels_consumers_only_with_capability() -> None:
    """CCN-02."""
    for capable in (True, False):
        sim = Sim()
        sim.connect(1, cancel_notify=capable)
        sim.connect(2)
        sim.open(1)
        sim.open(2)
        sim.queue("q")
        sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))
        effects = sim.do(2, 1, QueueDelete(queue="q"))
        cancels = [s for s in sends(effects, BasicCancel) if s.conn == 1]
        assert [s.method for s in cancels] == ([BasicCancel("c", nowait=True)] if capable else [])
        assert sim.core.connections[1].channels[1].consumers == {}


def test_core_cancel_unknown_tag_is_cancel_ok() -> None:
    """CCN-03."""
    sim = ready(0)
    assert methods(sim.do(1, 1, BasicCancel("nope"))) == [BasicCancelOk("nope")]


def test_core_client_cancel_ok_accepted_in_43_and_503_in_legacy() -> None:
    """CCN-05."""
    sim = ready(0)
    sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))
    assert sim.do(1, 1, BasicCancelOk("c")) == []
    assert sim.core.connections[1].channels[1].consumers == {}
    legacy = ready(0, timeout_mode="legacy")
    close = closes(legacy.do(1, 1, BasicCancelOk("c")))[0]
    assert (close.code, close.text) == (503, "COMMAND_INVALID - unimplemented method")


def test_core_consumer_tag_reuse_is_530_and_exclusive_is_403() -> None:
    """CCN-07."""
    sim = ready(0)
    assert methods(sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c")))[0] == BasicConsumeOk("c")
    close = closes(sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c")))[0]
    assert (close.code, close.text) == (530, "NOT_ALLOWED - attempt to reuse consumer tag 'c'")
    other = ready(0)
    other.do(1, 1, BasicConsume(queue="q", consumer_tag="a"))
    close2 = methods(other.do(1, 1, BasicConsume(queue="q", exclusive=True)), ChannelClose)[0]
    assert (close2.reply_code, close2.reply_text) == (403, "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use")


def test_core_channel_errors_are_connection_scope() -> None:
    """ERR-04: second channel.open and methods before open are 504; channel_max is 530."""
    sim = ready(0)
    assert closes(sim.do(1, 1, ChannelOpen()))[0].text == "CHANNEL_ERROR - second 'channel.open' seen"
    sim2 = ready(0)
    assert closes(sim2.do(1, 7, BasicGet(queue="q")))[0].text == "CHANNEL_ERROR - expected 'channel.open'"
    sim3 = Sim()
    sim3.connect(channel_max=2)
    sim3.open(1, 5)  # numbers above channel_max are fine: RabbitMQ counts open channels
    sim3.open(1, 1)
    close = closes(sim3.do(1, 3, ChannelOpen()))[0]
    assert (close.code, close.class_id, close.method_id) == (530, 0, 0)


def test_core_closing_channel_ignores_all_but_close() -> None:
    """ERR-03."""
    sim = ready(1)
    assert methods(sim.do(1, 1, BasicGet(queue="missing")), ChannelClose)[0].reply_code == 404
    assert sim.do(1, 1, BasicGet(queue="q")) == []
    assert methods(sim.do(1, 1, ChannelClose(200, "", 0, 0))) == [ChannelCloseOk()]
    assert sim.do(1, 1, ChannelCloseOk()) == []
    assert 1 not in sim.core.connections[1].channels


def test_core_missing_and_locked_queue_texts() -> None:
    """ERR-04 404/405 texts."""
    sim = ready(0)
    assert methods(sim.do(1, 1, BasicGet(queue="zz")), ChannelClose)[0].reply_text == (
        "NOT_FOUND - no queue 'zz' in vhost '/'")
    s2 = Sim()
    s2.connect(1)
    s2.connect(2)
    s2.open(1)
    s2.open(2)
    s2.do(1, 1, QueueDeclare(queue="ex", exclusive=True))
    close = methods(s2.do(2, 1, BasicGet(queue="ex")), ChannelClose)[0]
    assert close.reply_code == 405 and "cannot obtain exclusive access to locked queue 'ex'" in close.reply_text
    s3 = Sim()
    s3.connect()
    s3.open()
    assert methods(s3.do(1, 1, BasicGet(queue="")), ChannelClose)[0].reply_text == (
        "NOT_FOUND - no previously declared queue")


def test_core_permissions_refuse_with_403() -> None:
    """Vhost permissions: configure/write/read regexes, 403 channel errors."""
    sim = Sim(users={"guest": "guest", "app": "pw"}, permissions={"app": {"/": ["^app\\.", "^app\\.", "^app\\."]}})
    sim.core.connection_opened(5, "/", "app", {}, 2047)
    sim.open(5)
    assert methods(sim.do(5, 1, QueueDeclare(queue="app.q")))[0].queue == "app.q"
    close = methods(sim.do(5, 1, QueueDeclare(queue="other")), ChannelClose)[0]
    assert (close.reply_code, close.reply_text) == (
        403, "ACCESS_REFUSED - configure access to queue 'other' in vhost '/' refused for user 'app'")
    sim.do(5, 1, ChannelCloseOk())
    sim.open(5, 2)
    close = methods(sim.do(5, 2, BasicPublish(exchange="amq.topic"), BasicProperties(), b"x"), ChannelClose)[0]
    assert close.reply_code == 403


def test_core_memory_alarm_blocks_publishers_and_unblocks() -> None:
    """ALM-01/03: the watermark raises the memory alarm; the next content frame blocks the
    connection (connection.blocked to a capable client, reads paused); draining under 80 %
    clears it: connection.unblocked, reads resume."""
    from codec import BasicAck, ConnectionBlocked, ConnectionUnblocked
    from reference_broker.core.effects import PauseReading

    sim = Sim(memory_high_watermark=10)
    sim.core.connection_opened(1, "/", "guest", {"capabilities": {"connection.blocked": True}}, 2047)
    sim.open()
    sim.queue("q")
    sim.publish("q", b"12345")
    assert sim.core.flush() == [] and sim.core.alarms == frozenset()
    sim.publish("q", b"123456")
    sim.core.flush()
    assert sim.core.alarms == {"memory"} and not sim.core.is_blocked(1)  # blocked at its next publish
    effects = sim.core.publish_received(1)
    assert methods(effects, ConnectionBlocked) == [ConnectionBlocked("low on memory")]
    assert PauseReading(1, True) in effects and sim.core.is_blocked(1)
    sim.do(1, 1, BasicConsume(queue="q", consumer_tag="c"))
    sim.do(1, 1, BasicAck(0, multiple=True))
    released = sim.core.memory_check()
    assert methods(released, ConnectionUnblocked) == [ConnectionUnblocked()]
    assert PauseReading(1, False) in released


def test_core_overlapping_alarms_unblock_once_both_clear() -> None:
    """ALM-03: a blocked connection stays blocked while any alarm is left; a client without the
    capability is blocked silently; a connection that does not publish is never blocked (ALM-04)."""
    from codec import ConnectionBlocked, ConnectionUnblocked
    from reference_broker.core.effects import PauseReading

    sim = Sim()
    sim.core.connection_opened(1, "/", "guest", {"capabilities": {"connection.blocked": True}}, 2047)
    sim.core.connection_opened(2, "/", "guest", {}, 2047)
    sim.core.connection_opened(3, "/", "guest", {"capabilities": {"connection.blocked": True}}, 2047)
    assert sim.core.set_alarm("memory", True) == []  # nobody blocked until it publishes
    assert sim.core.set_alarm("disk", True) == []
    assert methods(sim.core.publish_received(1), ConnectionBlocked) == [ConnectionBlocked("low on memory & disk")]
    assert sim.core.publish_received(2) == [PauseReading(2, True)]  # no capability: no notice
    assert sim.core.set_alarm("memory", False) == []
    assert sim.core.publish_received(1) == []  # blocked once
    cleared = sim.core.set_alarm("disk", False)
    assert methods(cleared, ConnectionUnblocked) == [ConnectionUnblocked()]
    assert PauseReading(2, False) in cleared and not sim.core.is_blocked(3)


def test_core_direct_reply_to_round_trip() -> None:
    """Direct reply-to: reply_to rewritten to the requester's pseudo-queue; the reply goes to
    its no-ack consumer with the channel's next tag, which it uses up (ACK-01.e on 4.2+)."""
    from codec import BasicGet

    sim = ready(0)
    sim.connect(2)
    sim.open(2)
    sim.do(1, 1, BasicConsume(queue="amq.rabbitmq.reply-to", no_ack=True, consumer_tag="r"))
    sim.do(1, 1, BasicPublish(routing_key="q"), BasicProperties(reply_to="amq.rabbitmq.reply-to"), b"?")
    request = sends(sim.do(2, 1, BasicGet(queue="q", no_ack=True)), BasicGetOk)[0]
    address = request.properties.reply_to if request.properties else None
    assert address is not None and address.startswith("amq.rabbitmq.reply-to.")
    reply = sends(sim.do(2, 1, BasicPublish(routing_key=address), BasicProperties(), b"!"), BasicDeliver)
    assert [(s.conn, s.method.consumer_tag, s.method.delivery_tag, s.body) for s in reply] == [(1, "r", 1, b"!")]
    assert sim.core.connections[1].channels[1].next_tag == 2
    refused = methods(sim.do(2, 1, BasicPublish(routing_key="q"),
                             BasicProperties(reply_to="amq.rabbitmq.reply-to"), b"x"), ChannelClose)[0]
    assert refused.reply_text == "PRECONDITION_FAILED - fast reply consumer does not exist"
    acking = methods(sim.do(1, 1, BasicConsume(queue="amq.rabbitmq.reply-to", consumer_tag="r2")), ChannelClose)[0]
    assert acking.reply_code == 406


def test_core_partial_tx_completion_is_406() -> None:
    """PC-11: a publish refused by a queue makes tx.commit fail with 406 (90/20)."""
    sim = Sim()
    sim.connect()
    sim.open()
    sim.queue("q", **{"x-max-length": 0, "x-overflow": "reject-publish"})
    sim.do(1, 1, TxSelect())
    sim.publish("q", b"x")
    close = methods(sim.do(1, 1, TxCommit()), ChannelClose)[0]
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        406, "PRECONDITION_FAILED - partial tx completion", 90, 20)


def test_core_global_qos_mode_matches_3x_limiter() -> None:
    """With global qos honoured: qos(global=false) lifts the channel limit (as 3.10.8's
    rabbit_limiter:unlimit_prefetch does) and a reached limit pauses no-ack consumers (QOS-08)."""
    sim = ready(3, global_qos=True)
    sim.do(1, 1, BasicQos(prefetch_count=1, global_=True))
    assert len(sends(sim.do(1, 1, BasicConsume(queue="q", consumer_tag="a")), BasicDeliver)) == 1
    assert not sends(sim.do(1, 1, BasicConsume(queue="q", consumer_tag="n", no_ack=True)), BasicDeliver)
    assert len(sends(sim.do(1, 1, BasicQos(prefetch_count=5)), BasicDeliver)) == 2


def test_core_topic_permissions_match_routing_keys_of_topic_exchanges_only() -> None:
    """ACC-05: write patterns on publishes, read patterns on bindings, "{username}" expanded, "" is "^$"."""
    from codec import ExchangeDeclare, QueueBind, QueueDeclare
    from reference_broker.core.permissions import expand

    assert expand("^{username}\\.{vhost}$", "u", "/") == "^u\\./$" and expand("", "u", "/") == "^$"
    sim = Sim(users={"guest": "guest", "app": "pw"}, permissions={"app": {"/": [".*", ".*", ".*"]}},
              topic_permissions={"app": {"/": {"amq.topic": ["^{username}\\.", ""], "amq.direct": ["^$", "^$"]}}})
    sim.core.connection_opened(5, "/", "app", {}, 2047)
    sim.open(5)
    assert not methods(sim.do(5, 1, BasicPublish(exchange="amq.topic", routing_key="app.a"), BasicProperties(), b"x"),
                       ChannelClose)
    assert not methods(sim.do(5, 1, BasicPublish(exchange="amq.direct", routing_key="other"), BasicProperties(), b"x"),
                       ChannelClose)  # not a topic exchange
    sim.do(5, 1, ExchangeDeclare(exchange="t2", exchange_type="topic"))
    assert not methods(sim.do(5, 1, BasicPublish(exchange="t2", routing_key="other"), BasicProperties(), b"x"),
                       ChannelClose)  # no topic permission on it
    close = methods(sim.do(5, 1, BasicPublish(exchange="amq.topic", routing_key="other.a"), BasicProperties(), b"x"),
                    ChannelClose)[0]
    assert (close.reply_code, close.reply_text) == (
        403, "ACCESS_REFUSED - write access to topic 'other.a' in exchange 'amq.topic' in vhost '/' refused for user 'app'")
    sim.do(5, 1, ChannelCloseOk())
    sim.open(5, 2)
    sim.do(5, 2, QueueDeclare(queue="q"))
    close = methods(sim.do(5, 2, QueueBind(queue="q", exchange="amq.topic", routing_key="app.#")), ChannelClose)[0]
    assert close.reply_text.startswith("ACCESS_REFUSED - read access to topic 'app.#'")  # read "" is "^$"
