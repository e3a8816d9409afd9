"""The small policy functions the rule code calls where RabbitMQ makes a choice.

Rules:
- `Rules()` is RabbitMQ's behaviour. The broker picks its `Rules` once, at construction; a
  named fault (reference_broker/faults.py) is a substitution of one or more of these
  functions, so the rule code reads as the rule and never branches on a fault.
- Each function is small and pure, or changes only the entity it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import takewhile
from typing import Any

from codec import AmqpError, BasicProperties, ReplyCode
from reference_broker.core import deaths, texts
from reference_broker.core.effects import Effect
from reference_broker.core.routing import HeadersMatch, TopicMatch, headers_match, topic_matches
from reference_broker.core.state import QUORUM, Channel, Connection, Consumer, Message, Queue, Unacked

Expired = list[tuple[int, int, int]]  # (connection, channel, delivery tag)


def _same(value: Any) -> Any:
    return value


def _up_to(unacked: dict[int, Unacked], tag: int) -> list[Unacked]:
    """ACK-05: multiple=true settles every outstanding tag up to N. `unacked` is in tag order
    (tags only grow; rollback re-sorts): stop at N, so a multi-ack costs what it settles."""
    return list(takewhile(lambda u: u.tag <= tag, unacked.values()))


def _everything(unacked: dict[int, Unacked]) -> list[Unacked]:
    return list(unacked.values())  # ACK-06: tag 0 with multiple=true


def _unknown_tag(tag: int, multiple: bool) -> AmqpError | None:
    return AmqpError(ReplyCode.PRECONDITION_FAILED, texts.unknown_tag(tag), scope="channel")  # ACK-03/04


def _none(items: list[Unacked]) -> list[Unacked]:
    return []


def _all(items: list[Unacked]) -> list[Unacked]:
    return items


def _no_change(*_args: Any) -> None:
    return None


def _false() -> bool:
    return False


def _put_back(queue: Queue, message: Message) -> None:
    queue.return_message(message)  # RQ-01 original position, RQ-02 quorum returns first


def _spent(fired_at: int | None, now_ms: int) -> int | None:
    return None  # TMO-4.3-2: the fired timer is spent; the next deadline gets a timer of its own


def _armed_already(queue: Queue, now_ms: int) -> list[Effect]:
    return []  # TMO-4.3-2: every deadline got its timer when it was set (timeouts.arm, rearm)


def _prefetch_size_refused(size: int) -> bool:
    return size != 0  # QOS-01


def _get_allowed(ch: Channel) -> bool:
    return True  # QOS-07: basic.get ignores the prefetch window


def _no_ack_unlimited(consumer: Consumer) -> bool:
    return False  # QOS-08: no-ack consumers are never limited by the prefetch count


def _unknown_exchange_type(kind: str) -> AmqpError:
    """DCL-02: a channel error from 3.13.3 on (rabbit_exchange:check_type, PR #11214)."""
    return AmqpError(ReplyCode.PRECONDITION_FAILED, f"unknown exchange type '{kind}'", scope="channel")


def _owner_must_match(owner: int | None, conn: int, exclusive: bool) -> bool:
    """DCL-01: a redeclaration names the queue's exclusive owner exactly (check_exclusive_access
    strict): the owner changing the exclusive flag is locked out like another connection."""
    return owner != (conn if exclusive else None)


def _priority_level(queue: Queue, message: Message, emulates: str) -> int:
    # PRI-01 classic with x-max-priority (0: one level before 3.13.4), PRI-02 quorum (4.3)
    return queue.level(message, one_level_at_zero=emulates != "4.3")


def _never_lost(seqno: int, accepted: bool | None) -> bool:
    return False


def _return_first(effects: list[Effect], returned: Effect, ack: Effect | None) -> tuple[list[Effect], bool]:
    """PC-06: the return goes first; the confirm follows at the flush (True: collect it)."""
    return [returned, *effects], True


def _tx_refused(ch: Channel) -> bool:
    return ch.confirm  # PC-03


def _unacked(ch: Channel) -> list[Unacked]:
    return list(ch.unacked.values())  # ACK-09, TX-04: what basic.recover requeues


def _no_cancel_error(tag: str) -> AmqpError | None:
    return None  # CCN-03: cancelling an unknown tag is not an error


def _smallest(values: Sequence[int]) -> int:
    return min(values)  # TMO-03: min(queue argument, policy)


def _queue_first(per_queue: int | None, global_value: int) -> int:
    return global_value if per_queue is None else per_queue  # TMO-03


def _only_quorum(kind: str) -> bool:
    return kind == QUORUM  # TMO-4.3-1: classic queues and streams never time out


def _only_expired(connections: dict[int, Connection], queue: Queue, expired: Expired) -> Expired:
    return expired


def _answered(_method: Any) -> bool:
    return True  # every method the broker implements gets its reply (or a 540 for one it does not)


def _lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


MIN_KEYS = frozenset({"expires", "message-ttl", "max-length", "max-length-bytes"})  # res_min / min/2


def _precedence(kind: str, key: str, legacy: bool) -> str:
    """POL-02: which of a queue argument and a policy value applies ("min", "argument", "policy"):
    classic queues rabbit_amqqueue_process process_args_policy (res_min, res_arg); quorum queues
    rabbit_quorum_queue args_policy_lookup (overflow: the policy; expires: the policy up to 3.13)."""
    if kind == QUORUM and (key == "overflow" or (key == "expires" and legacy)):
        return "policy"
    return "min" if key in MIN_KEYS else "argument"


def _highest(policies: list[dict[str, Any]]) -> dict[str, Any]:
    """POL-01: of the matching policies (highest priority first), the first one's definition alone."""
    return dict(policies[0].get("definition", {})) if policies else {}


def _lesser(value: Any, operator: Any) -> Any:
    """POL-03 (rabbit_policies merge_policy_value): the lower number; else the operator's."""
    numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (value, operator))
    return min(value, operator) if numbers else operator


def _true() -> bool:
    return True


def _pause(consumer: Consumer, tag: int) -> None:
    consumer.timed_out.add(tag)  # TMO-4.3-2: no new messages until it is settled


def _one_copy(queues: list[Queue]) -> list[Queue]:
    """ROUTE-10: each queue once, in the order first reached."""
    return list({id(q): q for q in queues}.values())


def _delivery_mode_refused(mode: int, emulates: str) -> bool:
    """MSG-03: up to 3.12 a delivery-mode other than 1 or 2 is refused (rabbit_basic:is_message_persistent);
    from 3.13 any octet is taken (mc_amqpl:essential_properties)."""
    return emulates != "4.3" and mode not in (1, 2)


@dataclass(frozen=True, slots=True)
class Rules:
    # -- acknowledgements (ACK-03..10) ----------------------------------------------------
    ack_all: Callable[[dict[int, Unacked]], list[Unacked]] = _everything
    multi_ack_scope: Callable[[dict[int, Unacked], int], list[Unacked]] = _up_to
    unknown_tag: Callable[[int, bool], AmqpError | None] = _unknown_tag  # None: accepted, settles nothing
    nack_requeue: Callable[[bool], bool] = _same
    recovered: Callable[[Message], None] = _no_change  # what basic.recover does to a message's history
    requeued_on_cancel: Callable[[list[Unacked]], list[Unacked]] = _none  # ACK-10: they stay unacked
    late_ack: Callable[[Queue, Message], None] = _no_change  # TMO-4.3-5: removes nothing
    consumer_first_tag: Callable[[int], int] = _same  # ACK-01: the channel's counter goes on
    # -- requeue (RQ-01..04) --------------------------------------------------------------
    put_back: Callable[[Queue, Message], None] = _put_back
    priority_level: Callable[[Queue, Message, str], int] = _priority_level  # the level a new message waits at
    redelivered: Callable[[bool], bool] = _same
    requeued_on_release: Callable[[list[Unacked]], list[Unacked]] = _all  # RQ-03
    # -- prefetch (QOS-01..08) ------------------------------------------------------------
    prefetch_window: Callable[[int], int] = _same
    no_ack_limited: Callable[[Consumer], bool] = _no_ack_unlimited
    no_ack_delivered: Callable[[Consumer], None] = _no_change  # a no-ack delivery is not counted
    global_qos: Callable[[bool], bool] = _same  # the configured global_qos (QOS-03)
    prefetch_size_refused: Callable[[int], bool] = _prefetch_size_refused
    prefetch_size_named: Callable[[int], int] = _same  # the size QOS-01's text names
    get_allowed: Callable[[Channel], bool] = _get_allowed
    # -- publisher confirms (PC-02..06) ---------------------------------------------------
    confirm_seqno: Callable[[int], int] = _same
    confirm_lost: Callable[[int, bool | None], bool] = _never_lost
    ack_cutoff: Callable[[list[int]], list[int]] = _same  # PC-04: nacks bound a multiple ack
    confirm_effects: Callable[[list[Effect]], list[Effect]] = _same
    unroutable_return: Callable[[list[Effect], Effect, Effect | None], tuple[list[Effect], bool]] = _return_first
    tx_select_refused: Callable[[Channel], bool] = _tx_refused
    tx_required: Callable[[], bool] = _true  # PC-11: commit and rollback need tx.select
    # -- transactions (TX-01..06) ---------------------------------------------------------
    tx_reselect_allowed: Callable[[], bool] = _true  # TX-01: tx.select on a tx channel is answered
    tx_holds_publishes: Callable[[], bool] = _true  # TX-02
    rollback_discards_publishes: Callable[[], bool] = _true  # TX-02
    tx_defers_settlements: Callable[[], bool] = _true  # TX-03: applied at the commit
    requeued_on_rollback: Callable[[list[Unacked]], list[Unacked]] = _none  # TX-04: unacked again
    recover_scope: Callable[[Channel], list[Unacked]] = _unacked  # TX-04
    tx_return_at_commit: Callable[[], bool] = _true  # TX-05
    tx_routes_at_publish: Callable[[], bool] = _true  # TX-06
    # -- consumer cancel (CCN-02, CCN-03) -------------------------------------------------
    cancel_on_delete: Callable[[bool], bool] = _same  # CCN-02: basic.cancel when the client has the capability
    unknown_cancel: Callable[[str], AmqpError | None] = _no_cancel_error
    # -- consumer timeouts (TMO-03, TMO-4.3-*) --------------------------------------------
    times_out: Callable[[str], bool] = _only_quorum  # a queue type's consumers time out (4.3 rules)
    combine_timeouts: Callable[[Sequence[int]], int] = _smallest
    consumer_timeout_arg: Callable[[Any], Any] = _same
    queue_or_global: Callable[[int | None, int], int] = _queue_first
    timeout_cancels: Callable[[bool], bool] = _same  # the client's consumer_cancel_notify
    expired: Callable[[dict[int, Connection], Queue, Expired], Expired] = _only_expired
    pause_timed_out: Callable[[Consumer, int], None] = _pause
    timer_after_firing: Callable[[int | None, int], int | None] = _spent  # (fired at, now): the timer still armed
    timer_after_command: Callable[[Queue, int], list[Effect]] = _armed_already  # at the end of a queue's dispatch
    # -- channels (ERR-04.q) ---------------------------------------------------------------
    channel_number_refused: Callable[[int], bool] = lambda number: False  # any number 1..65535 opens
    closing_drops: Callable[[Any], bool] = _answered  # ERR-03: after the broker's channel.close a method is dropped
    # -- declarations (DCL-01, DCL-02) ----------------------------------------------------
    exclusive_locked: Callable[[int | None, int, bool], bool] = _owner_must_match  # (owner, conn, exclusive)
    unknown_exchange_type: Callable[[str], AmqpError] = _unknown_exchange_type
    # -- exchanges and queues (EXCH-*, QUEUE-*) ---------------------------------------------
    compared_exchange_arguments: Callable[[], tuple[str, ...]] = lambda: ("alternate-exchange",)  # EXCH-03
    compared_exchange_flags: Callable[[], bool] = _true  # EXCH-02: type, durable, auto_delete, internal
    internal_refuses_publish: Callable[[], bool] = _true  # EXCH-09
    expires_checked: Callable[[], bool] = _true  # QUEUE-07
    expires_maximum: Callable[[], int] = lambda: 315_360_000_000  # QUEUE-07: rabbit_misc:check_expiry, ten years
    length_maximum: Callable[[], int | None] = lambda: None  # LEN-01: check_non_neg_int_arg has no upper bound
    exchange_in_use: Callable[[int], bool] = bool  # EXCH-06: (its bindings as a source) -> in use
    exchange_auto_deleted: Callable[[], bool] = _true  # EXCH-08: it goes with its last binding as a source
    bindings_go_with_queue: Callable[[], bool] = _true  # QUEUE-11
    exclusive_guarded: Callable[[], bool] = _true  # QUEUE-05: other connections may not use an exclusive queue
    purged_count: Callable[[int, int], int] = lambda ready, _unacked: ready  # QUEUE-09: purge-ok counts ready ones
    publish_renews_lease: Callable[[], bool] = _false  # QUEUE-08: a publish is not use
    consumer_rank: Callable[[int], int] = _same  # QUEUE-14: (x-priority) -> rank
    consumers_rotate: Callable[[], bool] = _true  # QUEUE-13: the consumer served goes to the back
    bcc_removed: Callable[[], bool] = _true  # ROUTE-13
    user_id_checked: Callable[[], bool] = _true  # MSG-02
    delivery_mode_refused: Callable[[int, str], bool] = _delivery_mode_refused  # MSG-03
    body_too_large: Callable[[int, int], bool] = lambda size, limit: size > limit  # PC-12: exactly the limit is taken
    # -- access (ACC-*) ---------------------------------------------------------------------
    vhost_access_checked: Callable[[], bool] = _true  # ACC-01
    permission_checked: Callable[[str, str], bool] = lambda kind, method: True  # ACC-02..04: (kind, method)
    topic_permission_checked: Callable[[], bool] = _true  # ACC-05
    topic_checks_sender_keys: Callable[[], bool] = _true  # ACC-05: 4.0+ check the CC and BCC keys too
    auth_failure_close: Callable[[bool], bool] = _same  # ACC-06: (the client's capability) -> connection.close
    mechanism_logs_in: Callable[[str], bool] = lambda mechanism: True  # ACC-06: every offered mechanism logs in
    impersonation_allowed: Callable[[list[str]], bool] = lambda tags: "impersonator" in tags  # ACC-07
    # -- message TTL (TTL-*) ------------------------------------------------------------------
    expiration_checked: Callable[[], bool] = _true  # TTL-01
    message_ttl_checked: Callable[[], bool] = _true  # TTL-02
    expired_dropped_on_arrival: Callable[[], bool] = _true  # TTL-05: a TTL-0 message nobody took is gone at once
    ttl_timer: Callable[[], bool] = _true  # TTL-03: the head's expiry is timed, not left to the next fetch
    ttl_combined: Callable[[int | None, int | None], int | None] = _lower  # TTL-03: (queue's, message's) -> the TTL
    returned_keeps_expiry: Callable[[], bool] = _true  # TTL-04: a returned message keeps its enqueue's expiry
    # -- dead-lettering (DLX-*) -----------------------------------------------------------
    deaths_merged: Callable[[], bool] = _true  # DLX-02: one x-death entry per (queue, reason), counted
    last_death_headers: Callable[[], bool] = _true  # DLX-02: x-last-death-* (4.x)
    dead_letter_key: Callable[[str | None, str], str] = lambda dlrk, key: key if dlrk is None else dlrk  # DLX-01
    dead_letter_strips_expiration: Callable[[], bool] = _true  # DLX-02
    dead_letter_args_checked: Callable[[], bool] = _true  # DLX-03
    dead_letter_cycle: Callable[[str, list[dict[str, Any]], str], bool] = (  # DLX-04: (target, deaths, reason)
        lambda target, deaths_, reason: reason != "rejected" and deaths.is_cycle(target, deaths_))
    missing_dead_letter_kept: Callable[[], bool] = _false  # DLX-05: a missing dead-letter exchange drops it
    dead_letter_extra_keys: Callable[[str | None, tuple[str, ...]], tuple[str, ...]] = (  # DLX-06
        lambda dlrk, keys: () if dlrk is not None else keys)
    publisher_deaths_read: Callable[[], bool] = _false  # DLX-07: from 3.13 only the broker's deaths count
    # -- policies (POL-*, core/settings.py) ---------------------------------------------------
    policy_precedence: Callable[[str, str, bool], str] = _precedence  # POL-02: (kind, key, legacy) -> rule
    policy_admits: Callable[[bool], bool] = _same  # POL-01: (apply-to admits the queue) -> the policy may apply
    policy_chosen: Callable[[list[dict[str, Any]]], dict[str, Any]] = _highest  # POL-01
    policy_follows_changes: Callable[[], bool] = _true  # POL-01: a live queue takes a policy set or deleted
    exchange_argument_wins: Callable[[], bool] = _true  # POL-04: an exchange's own alternate-exchange first
    operator_merge: Callable[[Any, Any], Any] = _lesser  # POL-03: (policy's, operator policy's) -> the value
    # -- queue length limits (LEN-*, core/limits.py) -----------------------------------------
    length_args_checked: Callable[[], bool] = _true  # LEN-01
    length_drop: Callable[[Queue], Message | None] = lambda queue: queue.pop()  # LEN-02: the head goes (returns first)
    length_counts_properties: Callable[[str, bool], bool] = lambda kind, modern: kind == QUORUM and modern  # LEN-02
    length_counts_unacked: Callable[[], bool] = _false  # LEN-02: only ready messages count
    trimmed_after_return: Callable[[], bool] = _true  # LEN-02: a requeue may take the queue over a limit
    maxlen_dead_lettered: Callable[[], bool] = _true  # LEN-03
    quorum_limit_after_enqueue: Callable[[], bool] = _true  # LEN-04: a quorum queue takes the publish that goes over
    refused_dead_lettered: Callable[[str], bool] = lambda overflow: overflow == "reject-publish-dlx"  # LEN-04, LEN-05
    stripped_name: Callable[[str], str] = lambda name: name.replace("\r", "").replace("\n", "")  # EXCH-11
    queue_shortcut: Callable[[], bool] = _true  # QUEUE-15: "" names the channel's last declared queue
    answers_nowait: Callable[[], bool] = _false  # EXCH-12: nowait means no -ok
    # -- routing (ROUTE-05, ROUTE-06, ROUTE-09, ROUTE-10) ----------------------------------
    topic_match: TopicMatch = topic_matches
    routes_on: Callable[[], bool] = _true  # ROUTE-09: an exchange-to-exchange binding that matches takes it on
    headers_match: HeadersMatch = headers_match
    one_copy: Callable[[list[Queue]], list[Queue]] = _one_copy
    # -- errors and framing (ERR-02, FRM-03) ----------------------------------------------
    error_scope: Callable[[str], str] = _same
    answered: Callable[[Any], bool] = _answered  # False: the method is dropped unanswered (a partial broker)
    enforced_frame_max: Callable[[int], int] = _same
    negotiated_heartbeat: Callable[[int, int], int] = lambda client, offered: client  # HB-01: the client's, no bounds
    # -- resource alarms (core/alarms.py and the engine: ALM-01..05) ------------------------
    publish_blocked: Callable[[frozenset[str]], bool] = bool  # ALM-01: a content frame during an alarm blocks
    blocked_notice: Callable[[frozenset[str]], str | None] = texts.blocked_reason  # ALM-01 (None: not sent)
    held_from_header: Callable[[], bool] = _true  # ALM-02: the publish meeting the alarm waits
    unblocks: Callable[[frozenset[str]], bool] = lambda left: not left  # ALM-03: once no alarm is left
    blocks_every_connection: Callable[[], bool] = _false  # ALM-04: only connections that publish
    blocked_heartbeat_paused: Callable[[], bool] = _true  # ALM-05
    # -- the connection engine (NET-02, MSG-01) ---------------------------------------------
    ends_socket_after_close_ok: Callable[[], bool] = _false  # NET-02: the client ends it
    delivered_properties: Callable[[BasicProperties], BasicProperties] = _same  # MSG-01: as published
    # -- a cluster's nodes (CLU-01..07 and CLU-09, core/cluster.py and core/nodes.py) ---------
    cancel_on_node_down: Callable[[bool], bool] = _same  # CLU-01: basic.cancel with the capability
    nack_for_stopped_queue: Callable[[], bool] = _true  # CLU-03: a stopped classic queue refuses
    lost_at_failover: Callable[[list[Unacked]], list[Unacked]] = _none  # CLU-05: nothing is lost
    delivers_without_majority: Callable[[], bool] = _false  # CLU-07
    confirm_waits_for_majority: Callable[[], bool] = _true  # CLU-07
    bindings_kept_at_restart: Callable[[], bool] = _true  # CLU-09: a restarted queue's bindings stay
    # TMO-4.3-6.c: how long a crashed node's quorum deliveries wait (the queue's setting, its default)
    disconnected_wait: Callable[[int | None, int], int] = lambda set_ms, default_ms: default_ms if set_ms is None else set_ms
