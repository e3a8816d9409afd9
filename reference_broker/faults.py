"""The fault switchboard: named, realistic deviations the reference broker can be told to make.

Rules:
- A fault is switched on only by configuration (`faults = [...]` in BrokerConfig), which the
  edges fill: the config file, `reference-broker --fault NAME`, or the environment variable
  AMQPC_BROKER_FAULTS (comma-separated, `from_environment`) read by `reference-broker` and by
  the harness that starts an embedded broker; never by default, never from AMQP, never read
  by the core itself. An unknown name is a configuration error.
- Each fault names the area whose tests must kill it (the mutation score) and the
  rule it breaks, and is a substitution of policy functions of `core.rules.Rules`: the
  core's rule code calls the policy and never asks which faults are on. `rules_with`
  builds the rules of a set of faults, once, when the core is built.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from codec import AmqpError, BasicProperties, ReplyCode
from reference_broker.core import deaths, texts, timeouts
from reference_broker.core.effects import Effect
from reference_broker.core.routing import headers_match, topic_matches
from reference_broker.core.rules import Expired, Rules
from reference_broker.core.state import QUORUM, STREAM, Channel, Connection, Consumer, Message, Queue, Unacked
from reference_broker.fault_type import Fault
from reference_broker.fault_type import const as _const
from reference_broker.faults_cluster import CLUSTER_FAULTS
from reference_broker.faults_connection import CONNECTION_FAULTS
from reference_broker.faults_edges import EDGE_FAULTS

ENV = "AMQPC_BROKER_FAULTS"
__all__ = ["BY_NAME", "ENV", "FAULTS", "Fault", "check", "from_environment", "rules_with"]


# -- the substituted policies (what each fault does instead of the rule) ----------------------
def _same_name(name: str) -> str:
    return name


def _nothing(*_args: Any) -> list[Unacked]:
    return []


def _recover_held_too(ch: Channel) -> list[Unacked]:
    """basic.recover takes the deliveries settled in the open transaction too (forgetting those
    settlements), not only the unacked ones."""
    held, ch.tx_held = list(ch.tx_held.values()), {}
    ch.tx_settles.clear()
    return [*ch.unacked.values(), *held]
def _merged_policies(policies: list[dict[str, Any]]) -> dict[str, Any]:
    """policies_merged: every matching policy's keys, the higher priority's value kept."""
    merged: dict[str, Any] = {}
    for policy in reversed(policies):
        merged.update(policy.get("definition", {}))
    return merged


def _drop_tail(queue: Queue) -> Message | None:
    """drop_tail_instead_of_head: the newest ready message goes."""
    ready = queue.ready_messages()
    if ready:
        queue.remove(ready[-1])
    return ready[-1] if ready else None


def _requeue_classic_to_tail(queue: Queue, message: Message) -> None:
    if queue.kind == QUORUM:
        queue.return_message(message)
    else:
        queue.enqueue(message)  # a new position at the tail


def _requeue_quorum_behind(queue: Queue, message: Message) -> None:
    if queue.kind == QUORUM:
        queue.enqueue(message)  # behind never-delivered messages
    else:
        queue.return_message(message)


def _silent_if(multiple: bool) -> Callable[[int, bool], AmqpError | None]:
    def unknown_tag(tag: int, is_multiple: bool) -> AmqpError | None:
        if is_multiple == multiple:
            return None
        return AmqpError(ReplyCode.PRECONDITION_FAILED, texts.unknown_tag(tag), scope="channel")

    return unknown_tag


def _unknown_tag_hard(tag: int, multiple: bool) -> AmqpError:
    return AmqpError(ReplyCode.PRECONDITION_FAILED, texts.unknown_tag(tag), scope="connection")


def _forget_history(message: Message) -> None:
    message.delivered, message.acquired_count = False, 0


def _limit_no_ack(consumer: Consumer) -> bool:
    return bool(consumer.prefetch) and consumer.unacked >= consumer.prefetch


def _count_no_ack(consumer: Consumer) -> None:
    consumer.unacked += 1  # counted and never released


def _get_within_window(ch: Any) -> bool:
    return not (ch.prefetch_count and len(ch.unacked) >= ch.prefetch_count)


def _ack_before_return(effects: list[Effect], returned: Effect, ack: Effect | None) -> tuple[list[Effect], bool]:
    if ack is None:
        return [returned, *effects], True
    return [*effects, ack, returned], False  # the ack goes now, not at the flush


def _whole_consumers(connections: dict[int, Connection], queue: Queue, expired: Expired) -> Expired:
    """Every delivery of a consumer with an expired one."""
    owners = set()
    for conn_id, number, tag in expired:
        conn = connections.get(conn_id)
        u = conn.channels[number].unacked.get(tag) if conn and number in conn.channels else None
        if u is not None:
            owners.add((conn_id, number, u.consumer_tag))
    more = [k for k in queue.deadlines if k not in expired and any(
        (k[0], k[1]) == (c, n) and (u := connections[c].channels[n].unacked.get(k[2])) is not None
        and u.consumer_tag == t for c, n, t in owners)]
    return sorted([*expired, *more])


def _evaluated_after_command(queue: Queue, now_ms: int) -> list[Effect]:
    """RabbitMQ 4.3.6's evaluation after each batch of a quorum queue's commands (rabbit_fifo
    handle_aux(leader, cast, eval, ...), v4.3.5): the deadline it remembered is spent once `now_ms`
    is past it, and then a timer is armed for the earliest deadline, at once if that has passed;
    otherwise only for a deadline earlier than the remembered one. It remembers the earliest
    deadline, armed or not (with none left, the one it had)."""
    if queue.timer_at is not None and queue.timer_at < now_ms:
        queue.timer_at = None
    effects = timeouts.rearm(queue)
    if queue.deadlines:
        queue.timer_at = min(queue.deadlines.values())
    return effects


def _reencoded(properties: BasicProperties) -> BasicProperties:
    return BasicProperties(*properties)  # MSG-01: field types guessed again from the decoded values


def _named_only(unacked: dict[int, Unacked], tag: int) -> list[Unacked]:
    return [unacked[tag]]


def _other_connections_only(owner: int | None, conn: int, exclusive: bool) -> bool:
    return owner is not None and owner != conn  # the flag itself is then 406 "inequivalent arg"


def _unknown_type_hard(kind: str) -> AmqpError:
    return AmqpError(ReplyCode.COMMAND_INVALID, f"unknown exchange type '{kind}'", scope="connection")


def _unknown_cancel(tag: str) -> AmqpError:
    return AmqpError(ReplyCode.NOT_FOUND, f"unknown consumer tag '{tag}'", scope="channel")


def _hash_one_word(pattern: str, routing_key: str) -> bool:
    return topic_matches(".".join("*" if w == "#" else w for w in pattern.split(".")), routing_key)


def _any_as_all(binding_args: Mapping[str, Any], headers: Mapping[str, Any] | None) -> bool:
    mode = str(binding_args.get("x-match", "all")).replace("any", "all")
    return headers_match({**binding_args, "x-match": mode}, headers)


FAULTS: tuple[Fault, ...] = (
    Fault("multi_ack_only_named", "ack", "ACK-05", "basic.ack multiple=true settles only the named tag",
          {"multi_ack_scope": _named_only}),
    Fault("multi_unknown_tag_silent", "ack", "ACK-05", "multiple=true with an unknown tag settles nothing, no 406",
          {"unknown_tag": _silent_if(multiple=True)}),
    Fault("double_ack_accepted", "ack", "ACK-04", "an already settled tag is accepted silently",
          {"unknown_tag": _silent_if(multiple=False)}),
    Fault("unknown_tag_closes_connection", "ack", "ACK-03", "an unknown tag closes the connection, not the channel",
          {"unknown_tag": _unknown_tag_hard}),
    Fault("unknown_tag_accepted", "ack", "ACK-03", "an unknown or already settled tag is accepted silently",
          {"unknown_tag": _const(None)}),
    Fault("tag_zero_multiple_ignored", "ack", "ACK-06", "tag 0 with multiple=true settles nothing",
          {"ack_all": _nothing}),
    Fault("nack_requeue_false_requeues", "ack", "ACK-07", "basic.nack requeue=false requeues the message",
          {"nack_requeue": _const(True)}),
    Fault("recover_no_redelivered", "ack", "ACK-09", "basic.recover redeliveries are not flagged redelivered",
          {"recovered": _forget_history}),
    Fault("cancel_requeues", "ack", "ACK-10", "basic.cancel requeues the consumer's unacked deliveries",
          {"requeued_on_cancel": lambda own: own}),
    Fault("requeue_to_tail", "requeue", "RQ-01", "classic queues requeue at the tail, not the original position",
          {"put_back": _requeue_classic_to_tail}),
    Fault("quorum_returns_not_first", "requeue", "RQ-02", "quorum returns go behind never-delivered messages",
          {"put_back": _requeue_quorum_behind}),
    Fault("redelivered_not_set", "requeue", "RQ-04", "redeliveries carry redelivered=false",
          {"redelivered": _const(False)}),
    Fault("tags_restart_per_consumer", "ack", "ACK-01", "each new consumer restarts the channel's delivery tags at 1",
          {"consumer_first_tag": _const(1)}),
    Fault("no_requeue_on_channel_close", "requeue", "RQ-03", "unacked deliveries are dropped when the channel closes",
          {"requeued_on_release": _nothing}),
    Fault("prefetch_off_by_one", "qos", "QOS-02", "a consumer gets prefetch_count + 1 unacked deliveries",
          {"prefetch_window": lambda prefetch: prefetch + 1}),
    Fault("global_qos_channel_wide", "qos", "QOS-03", "4.3: global=true is honoured as a channel-wide limit",
          {"global_qos": _const(True)}),
    Fault("prefetch_size_accepted", "qos", "QOS-01", "basic.qos prefetch_size != 0 is accepted",
          {"prefetch_size_refused": _const(False)}),
    Fault("no_ack_obeys_prefetch", "qos", "QOS-08", "no-ack consumers are limited by the prefetch count",
          {"no_ack_limited": _limit_no_ack, "no_ack_delivered": _count_no_ack}),
    Fault("get_obeys_prefetch", "qos", "QOS-07", "basic.get returns get-empty while the prefetch window is full",
          {"get_allowed": _get_within_window}),
    Fault("confirms_start_at_zero", "confirms", "PC-02", "confirm sequence numbers start at 0",
          {"confirm_seqno": lambda seqno: seqno - 1}),
    Fault("confirm_lost", "confirms", "PC-05", "the confirm of the third publish is never sent",
          {"confirm_lost": lambda seqno, accepted: seqno == 3}),
    Fault("confirm_duplicated", "confirms", "PC-05", "every ack confirm is sent twice",
          {"confirm_effects": lambda out: [*out, *out]}),
    Fault("multiple_ack_covers_nacked", "confirms", "PC-04", "a multiple=true ack also covers nacked seqnos",
          {"ack_cutoff": _nothing}),
    Fault("return_after_ack", "confirms", "PC-06", "basic.return follows the ack of an unroutable mandatory publish",
          {"unroutable_return": _ack_before_return}),
    Fault("unroutable_never_confirmed", "confirms", "PC-06", "unroutable publishes are never confirmed",
          {"confirm_lost": lambda seqno, accepted: accepted is None}),
    Fault("tx_select_on_confirm_accepted", "confirms", "PC-03", "tx.select on a confirm channel is accepted",
          {"tx_select_refused": _const(False)}),
    Fault("tx_commit_without_select_ok", "confirms", "PC-11",
          "tx.commit and tx.rollback on a channel without tx.select are answered -ok",
          {"tx_required": _const(False)}),
    Fault("cancel_without_capability", "cancel", "CCN-02", "basic.cancel is sent to clients without the capability",
          {"cancel_on_delete": _const(True)}),
    Fault("no_cancel_on_queue_delete", "cancel", "CCN-02", "consumers of a deleted queue are dropped silently",
          {"cancel_on_delete": _const(False)}),
    Fault("cancel_unknown_tag_error", "cancel", "CCN-03", "cancelling an unknown tag is a 404 channel error",
          {"unknown_cancel": _unknown_cancel}),
    Fault("timeout_max_of_queue_and_policy", "timeout", "TMO-03", "max(queue argument, policy) instead of min",
          {"combine_timeouts": max}),
    Fault("consumer_timeout_argument_ignored", "timeout", "TMO-03", "the consumer's x-consumer-timeout is ignored",
          {"consumer_timeout_arg": _const(None)}),
    Fault("global_before_policy", "timeout", "TMO-03", "the global consumer_timeout wins over queue argument and policy",
          {"queue_or_global": lambda per_queue, global_value: global_value}),
    Fault("timeout_closes_channel_with_capability", "timeout", "TMO-4.3-3", "a timeout closes the channel even with the capability",
          {"timeout_cancels": _const(False)}),
    Fault("partial_timeout_returns_all", "timeout", "TMO-4.3-2", "a timeout returns all the consumer's deliveries",
          {"expired": _whole_consumers}),
    Fault("later_deadline_timer_lost", "timeout", "TMO-4.3-2",
          "a deadline set when the queue's timer fires gets no timer (RabbitMQ 4.3.6's race, never caught up)",
          {"timer_after_firing": lambda fired_at, _now: fired_at}),
    Fault("later_deadline_fires_at_next_command", "timeout", "TMO-4.3-2",
          "a deadline set when the queue's timer fires times out only at the queue's next command after it "
          "(RabbitMQ 4.3.6's lost-timer race, lost every time; TMO-4.3-7's second SAC consumer)",
          {"timer_after_firing": lambda _fired_at, now: now,  # evaluated within the firing's millisecond
           "timer_after_command": _evaluated_after_command}),
    Fault("streams_time_out", "timeout", "TMO-4.3-1",
          "stream consumers time out like quorum ones (a 4.3 broker evaluating timeouts for streams too)",
          {"times_out": lambda kind: kind in (QUORUM, STREAM)}),
    Fault("timed_out_consumer_not_paused", "timeout", "TMO-4.3-2", "a timed-out consumer keeps getting messages",
          {"pause_timed_out": _const(None)}),
    Fault("late_ack_removes_message", "timeout", "TMO-4.3-5", "a late ack removes the already returned message",
          {"late_ack": lambda queue, message: queue.remove(message)}),
    Fault("soft_errors_close_connection", "errors", "ERR-02", "channel errors close the whole connection",
          {"error_scope": _const("connection")}),
    Fault("closing_channel_answers", "errors", "ERR-03",
          "methods that follow the broker's channel.close are carried out and answered, not dropped",
          {"closing_drops": _const(False)}),
    Fault("frame_max_not_enforced", "framing", "FRM-03", "frames over the negotiated frame_max are accepted",
          {"enforced_frame_max": _const(0)}),
    Fault("exclusive_flag_change_is_406", "errors", "DCL-01",
          "an owner redeclaring its queue with another exclusive flag gets 406, not 405",
          {"exclusive_locked": _other_connections_only}),
    Fault("unknown_exchange_type_is_503", "errors", "DCL-02", "an unknown exchange type is a 503 connection error (3.x)",
          {"unknown_exchange_type": _unknown_type_hard}),
    Fault("priorities_ignored", "messages", "PRI-01", "every message waits at one level: publish order, priority ignored",
          {"priority_level": _const(0)}),
    Fault("heartbeat_bounded_by_offer", "framing", "HB-01", "the negotiated heartbeat is the smaller of offer and tune-ok",
          {"negotiated_heartbeat": lambda client, offered: min(client, offered) if client and offered else client}),
    Fault("socket_closed_after_close_ok", "framing", "NET-02", "the socket is closed right after close-ok to a client's close",
          {"ends_socket_after_close_ok": _const(True)}),
    Fault("get_unanswered", "qos", "QOS-07", "basic.get is dropped: no get-ok, no get-empty, no 540 (a partial broker)",
          {"answered": lambda method: method.NAME != "basic.get"}),
    Fault("properties_reencoded", "messages", "MSG-01", "delivered properties are re-encoded from decoded values",
          {"delivered_properties": _reencoded}),
    Fault("topic_hash_one_word", "routing", "ROUTE-05", "a topic '#' matches exactly one word, as '*' does",
          {"topic_match": _hash_one_word}),
    Fault("headers_any_as_all", "routing", "ROUTE-06", "a headers binding with x-match=any is judged as all",
          {"headers_match": _any_as_all}),
    Fault("exchange_bindings_ignored", "routing", "ROUTE-09",
          "an exchange-to-exchange binding that matches takes nothing on", {"routes_on": _const(False)}),
    Fault("copy_per_binding", "routing", "ROUTE-10", "a queue gets one copy per matching binding or route",
          {"one_copy": lambda queues: queues}),
    Fault("alternate_exchange_not_compared", "exchanges", "EXCH-03",
          "an exchange redeclared with another alternate-exchange is accepted",
          {"compared_exchange_arguments": _const(())}),
    Fault("exchange_flags_not_compared", "exchanges", "EXCH-02",
          "an exchange redeclared with another type, durable, auto-delete or internal flag is accepted",
          {"compared_exchange_flags": _const(False)}),
    Fault("internal_exchange_publishable", "exchanges", "EXCH-09", "a publish to an internal exchange is routed",
          {"internal_refuses_publish": _const(False)}),
    Fault("expires_unchecked", "queues", "QUEUE-07", "any x-expires value is accepted", {"expires_checked": _const(False)}),
    Fault("if_unused_ignored", "exchanges", "EXCH-06", "exchange.delete with if-unused deletes an exchange in use",
          {"exchange_in_use": _const(False)}),
    Fault("auto_delete_exchange_kept", "exchanges", "EXCH-08", "an auto-delete exchange is never deleted",
          {"exchange_auto_deleted": _const(False)}),
    Fault("exclusive_queue_shared", "queues", "QUEUE-05",
          "another connection may consume from, get from, bind, purge and delete an exclusive queue",
          {"exclusive_guarded": _const(False)}),
    Fault("purge_counts_unacked", "queues", "QUEUE-09", "purge-ok counts the delivered, unacked messages too",
          {"purged_count": lambda ready, unacked: ready + unacked}),
    Fault("publish_renews_lease", "queues", "QUEUE-08", "a publish renews a queue's x-expires lease",
          {"publish_renews_lease": _const(True)}),
    Fault("binding_kept_after_queue_delete", "queues", "QUEUE-11",
          "a deleted queue's bindings stay and reach a queue declared again under its name",
          {"bindings_go_with_queue": _const(False)}),
    Fault("consumer_priority_ignored", "queues", "QUEUE-14", "x-priority is ignored: every consumer takes its turn",
          {"consumer_rank": _const(0)}),
    Fault("first_consumer_takes_all", "queues", "QUEUE-13",
          "the first consumer with room gets every message (no turns)", {"consumers_rotate": _const(False)}),
    Fault("bcc_delivered", "routing", "ROUTE-13", "the BCC header is delivered with the message",
          {"bcc_removed": _const(False)}),
    Fault("user_id_unchecked", "messages", "MSG-02", "a publish may carry any user-id", {"user_id_checked": _const(False)}),
    Fault("names_kept_with_cr_lf", "exchanges", "EXCH-11", "CR and LF stay in declared and bound names",
          {"stripped_name": _same_name}),
    Fault("nowait_answered", "exchanges", "EXCH-12", "declarations, bindings and deletions with nowait are answered",
          {"answers_nowait": _const(True)}),
    Fault("no_queue_name_shortcut", "queues", "QUEUE-15", "an empty queue name never names the last declared queue",
          {"queue_shortcut": _const(False)}),
    Fault("expiration_unchecked", "ttl", "TTL-01", "any expiration property is accepted (one that is no integer: no TTL)",
          {"expiration_checked": _const(False)}),
    Fault("message_ttl_unchecked", "ttl", "TTL-02", "any x-message-ttl value is accepted (one that is no integer: no TTL)",
          {"message_ttl_checked": _const(False)}),
    Fault("ttl_zero_kept", "ttl", "TTL-05", "a TTL-0 message no consumer took stays at the head until it is fetched",
          {"expired_dropped_on_arrival": _const(False)}),
    Fault("ttl_queue_wins", "ttl", "TTL-03", "a queue's x-message-ttl wins over a lower expiration",
          {"ttl_combined": lambda queue, message: queue if queue is not None else message}),
    Fault("ttl_restarts_on_return", "ttl", "TTL-04", "a message returned to its queue gets its TTL afresh",
          {"returned_keeps_expiry": _const(False)}),
    Fault("ttl_head_untimed", "ttl", "TTL-03", "an expired message stays counted at the head until the next fetch",
          {"ttl_timer": _const(False)}),
    Fault("dead_letter_key_ignored", "deadletter", "DLX-01",
          "x-dead-letter-routing-key is ignored: a dead-lettered message keeps its own routing key",
          {"dead_letter_key": lambda _dlrk, key: key}),
    Fault("x_death_not_merged", "deadletter", "DLX-02",
          "a message dying again in the same queue for the same reason gets a new x-death entry",
          {"deaths_merged": _const(False)}),
    Fault("dead_letter_keeps_expiration", "deadletter", "DLX-02",
          "a dead-lettered message keeps its expiration (and may expire again)",
          {"dead_letter_strips_expiration": _const(False)}),
    Fault("dead_letter_args_unchecked", "deadletter", "DLX-03",
          "any x-dead-letter-exchange and x-dead-letter-routing-key values are accepted",
          {"dead_letter_args_checked": _const(False)}),
    Fault("dead_letter_cycle_kept", "deadletter", "DLX-04",
          "a message expiring around a dead-letter cycle is dead-lettered again and again (no cycle detection)",
          {"dead_letter_cycle": lambda _target, _deaths, _reason: False}),
    Fault("dead_letter_cycle_rejections_ignored", "deadletter", "DLX-04",
          "a dead-letter cycle is broken even when a consumer rejected the message inside it",
          {"dead_letter_cycle": lambda target, deaths_, _reason: deaths.is_cycle(target, deaths_, False)}),
    Fault("missing_dead_letter_exchange_kept", "deadletter", "DLX-05",
          "a message whose dead-letter exchange does not exist stays in its queue (without its TTL)",
          {"missing_dead_letter_kept": _const(True)}),
    Fault("dead_letter_cc_ignored", "deadletter", "DLX-06",
          "without a dead-letter routing key, a dead-lettered message is routed by its own key only (not CC or BCC)",
          {"dead_letter_extra_keys": lambda _dlrk, _keys: ()}),
    Fault("x_death_from_publisher", "deadletter", "DLX-07",
          "from 3.13's behaviour on: an x-death header the publisher set is taken as the message's deaths",
          {"publisher_deaths_read": _const(True)}),
    Fault("tx_reselect_refused", "tx", "TX-01", "tx.select on a transactional channel is a 406 channel error",
          {"tx_reselect_allowed": _const(False)}),
    Fault("tx_publish_not_held", "tx", "TX-02", "a publish on a transactional channel is enqueued at once",
          {"tx_holds_publishes": _const(False)}),
    Fault("tx_rollback_keeps_publishes", "tx", "TX-02", "tx.rollback enqueues the transaction's publishes",
          {"rollback_discards_publishes": _const(False)}),
    Fault("tx_settle_immediate", "tx", "TX-03", "acks, nacks and rejects on a transactional channel apply at once",
          {"tx_defers_settlements": _const(False)}),
    Fault("tx_rollback_requeues", "tx", "TX-04", "tx.rollback requeues the deliveries whose settlements it rolls back",
          {"requeued_on_rollback": lambda held: held}),
    Fault("tx_recover_redelivers_acked", "tx", "TX-04",
          "basic.recover also redelivers the deliveries acked in the open transaction",
          {"recover_scope": _recover_held_too}),
    Fault("tx_return_immediate", "tx", "TX-05", "an unroutable mandatory publish in a transaction is returned at once",
          {"tx_return_at_commit": _const(False)}),
    Fault("tx_routed_at_commit", "tx", "TX-06", "a transaction's publishes are routed at the commit, not when published",
          {"tx_routes_at_publish": _const(False)}),
    # policies (core/settings.py)
    Fault("policy_apply_to_ignored", "policies", "POL-01", "a policy applies to queues whatever its apply-to",
          {"policy_admits": _const(True)}),
    Fault("policy_fixed_at_declare", "policies", "POL-01",
          "a queue keeps the policy it was declared under: later policy changes and deletions never reach it",
          {"policy_follows_changes": _const(False)}),
    Fault("exchange_policy_wins", "policies", "POL-04",
          "a policy's alternate-exchange wins over the exchange's own alternate-exchange argument",
          {"exchange_argument_wins": _const(False)}),
    Fault("policies_merged", "policies", "POL-01",
          "the definitions of every matching policy are merged, the higher priority winning a key",
          {"policy_chosen": _merged_policies}),
    Fault("operator_policy_loses", "policies", "POL-03",
          "where a policy and an operator policy set one key, the policy's value applies",
          {"operator_merge": lambda value, _operator: value}),
    Fault("arguments_always_win", "policies", "POL-02", "a queue argument always wins over a policy's value",
          {"policy_precedence": _const("argument")}),
    # queue length limits (core/limits.py)
    Fault("length_args_unchecked", "limits", "LEN-01", "any x-max-length, x-max-length-bytes and x-overflow is accepted",
          {"length_args_checked": _const(False)}),
    Fault("drop_tail_instead_of_head", "limits", "LEN-02", "a full drop-head queue drops its newest message",
          {"length_drop": _drop_tail}),
    Fault("max_length_bytes_counts_headers", "limits", "LEN-02",
          "x-max-length-bytes counts a message's encoded properties on classic queues too",
          {"length_counts_properties": _const(True)}),
    Fault("length_counts_unacked", "limits", "LEN-02", "delivered, unacknowledged messages count toward the limits",
          {"length_counts_unacked": _const(True)}),
    Fault("requeue_not_trimmed", "limits", "LEN-02", "a requeue that takes a queue over its limit drops nothing",
          {"trimmed_after_return": _const(False)}),
    Fault("maxlen_not_dead_lettered", "limits", "LEN-03", "a message dropped from the head is discarded, not dead-lettered",
          {"maxlen_dead_lettered": _const(False)}),
    Fault("quorum_reject_publish_exact", "limits", "LEN-04",
          "a quorum queue refuses the publish that would take it over its limit, as a classic queue does",
          {"quorum_limit_after_enqueue": _const(False)}),
    Fault("reject_publish_dead_lettered", "limits", "LEN-04", "a publish refused under reject-publish is dead-lettered",
          {"refused_dead_lettered": lambda overflow: overflow.startswith("reject-publish")}),
    Fault("reject_publish_dlx_not_dead_lettered", "limits", "LEN-05",
          "a publish refused under reject-publish-dlx is not dead-lettered", {"refused_dead_lettered": _const(False)}),
    *CLUSTER_FAULTS,
    *CONNECTION_FAULTS,
    *EDGE_FAULTS,
)
BY_NAME = {f.name: f for f in FAULTS}


def from_environment() -> list[str]:
    raw = os.environ.get(ENV, "")
    return [name.strip() for name in raw.split(",") if name.strip()]


def check(names: list[str]) -> frozenset[str]:
    unknown = sorted(set(names) - set(BY_NAME))
    if unknown:
        raise ValueError(f"unknown fault(s): {', '.join(unknown)} (see reference_broker/faults.py)")
    return frozenset(names)


def rules_with(names: frozenset[str]) -> Rules:
    """RabbitMQ's rules with the substitutions of these (checked) faults."""
    rules = Rules()
    for name in sorted(names):
        rules = replace(rules, **BY_NAME[name].substitutes)
    return rules
