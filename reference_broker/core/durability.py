"""Durability: what the core asks the store to keep, and how a restart rebuilds the state.

Rules (seed 001, PC-07):
- Only persistent messages (delivery_mode 2) in durable, non-exclusive queues are written,
  and every message of a stream.
  Each queue copy gets a store id; a `put` is journalled when it is enqueued, a `delete`
  when it leaves the broker's custody (acked, delivered with no-ack, dead-lettered,
  dropped, expired, purged; never for a stream's log); a deleted queue journals one `drop`.
- Durable definitions (vhosts, durable exchanges, durable non-exclusive queues, bindings
  between durable ends, policies, users and permissions) are journalled as one snapshot
  whenever an exchange/queue command or a policy change may have altered them.
- The journal goes to the transport as one `Persist` effect per flush; the transport
  writes it (group commit, fsync) and reports the position it reached with `stored()`.
- A publisher confirm for a publish that journalled a `put` waits until the store has
  reached that publish's position (RabbitMQ: confirmed once on disk); coalescing never
  covers a waiting seqno (confirms.py). A tx.commit-ok whose commit journalled a `put` waits
  likewise.
- A restart rebuilds definitions and messages in store-id order. Recovered messages may
  have been delivered before the crash, so they carry redelivered=true (RQ-04's "may have
  been delivered"); a TTL counts again from the restart (the monotonic clock does not
  survive it). The stored users and permissions replace the configured ones: the config
  seeds a new data directory, as RabbitMQ's definitions import does.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from codec import BasicProperties, TxCommitOk
from codec.fast_tables import RABBITMQ_TABLES
from codec.frames import encode_header_payload
from codec.wire_properties import decode_image
from reference_broker.core.broker_state import BrokerState, Meta
from reference_broker.core.effects import Effect, Send
from reference_broker.core.journal import Definitions, Delete, Drop, Put, StoredMessage, StoreOp
from reference_broker.core.settings import message_ttl, set_policies
from reference_broker.core.state import QUORUM, STREAM, Binding, Channel, Exchange, Message, Queue

PERSISTENT = 2
SYSTEM_EXCHANGES = frozenset({"", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"})


def is_durable_copy(queue: Queue, message: Message) -> bool:
    """A stream writes every message to its log on disk (osiris), whatever its delivery mode."""
    return (queue.durable and queue.exclusive_owner is None
            and (queue.kind == STREAM or message.properties.delivery_mode == PERSISTENT))


def remember(core: BrokerState, queue: Queue, message: Message) -> None:
    """Journal a put for a persistent message just enqueued in a durable queue."""
    if core.journal is None or not is_durable_copy(queue, message):
        return
    core.store_seq += 1
    message.store_id = core.store_seq
    core.journal.append(Put(message.store_id, queue.vhost, queue.name, message))
    core.journal_pos += 1


def forget(core: BrokerState, message: Message) -> None:
    """The message left the broker's custody: journal its delete."""
    if core.journal is None or not message.store_id:
        return
    core.journal.append(Delete(message.store_id))
    core.journal_pos += 1
    message.store_id = 0


def forget_all(core: BrokerState, messages: Iterable[Message]) -> None:
    for message in messages:
        forget(core, message)


def drop_queue(core: BrokerState, queue: Queue) -> None:
    if core.journal is None or not queue.durable:
        return
    core.journal.append(Drop(queue.vhost, queue.name))
    core.journal_pos += 1
    core.defs_dirty = True


def take(core: BrokerState) -> tuple[list[StoreOp], int]:
    """The journal since the last flush (with a definitions snapshot when they may have
    changed) and the position it reaches; empties the journal."""
    if core.journal is None:
        return [], 0
    if core.defs_dirty:
        core.defs_dirty = False
        core.journal.append(Definitions(snapshot(core)))
        core.journal_pos += 1
    ops, core.journal = core.journal, []
    return ops, core.journal_pos


def defer_confirm(core: BrokerState, ch: Channel, seqno: int, puts_before: int) -> bool:
    """Hold a publish's confirm until the store has its puts; True when deferred."""
    if core.journal is None or core.store_seq == puts_before:
        return False
    ch.confirms_waiting.append((core.journal_pos, seqno))
    core.awaiting_store[(ch.conn, ch.number)] = ch
    return True


def defer_commit(core: BrokerState, ch: Channel, puts_before: int) -> bool:
    """Hold a tx.commit-ok until the store has the commit's puts; True when deferred."""
    if core.journal is None or core.store_seq == puts_before:
        return False
    ch.commit_waiting = core.journal_pos
    core.awaiting_store[(ch.conn, ch.number)] = ch
    return True


def stored(core: BrokerState, position: int) -> list[Effect]:
    """The store reached `position`: the confirms waiting for it become ready (sent at
    flush); the tx.commit-oks waiting for it go now. Only channels that wait are visited
    (a released channel's lists are empty: it just leaves the set)."""
    core.stored_pos = max(core.stored_pos, position)
    effects: list[Effect] = []
    for key, ch in list(core.awaiting_store.items()):
        if ch.commit_waiting and ch.commit_waiting <= core.stored_pos:
            ch.commit_waiting = 0
            if not ch.closing:
                effects.append(Send(ch.conn, ch.number, TxCommitOk()))
        waiting = ch.confirms_waiting
        done = 0
        while done < len(waiting) and waiting[done][0] <= core.stored_pos:
            ch.confirms_ready.append(waiting[done][1])
            done += 1
        del waiting[:done]
        if not waiting and not ch.commit_waiting:
            del core.awaiting_store[key]
    return effects


# -- definitions ---------------------------------------------------------------------------
def _table(value: Mapping[str, Any]) -> str:
    return base64.b64encode(RABBITMQ_TABLES.encode_table(dict(value))).decode("ascii")


def _untable(text: str) -> dict[str, Any]:
    data = base64.b64decode(text)
    return RABBITMQ_TABLES.decode_table(data, 0)[0]  # encode_table includes the length


def snapshot(core: BrokerState) -> dict[str, Any]:
    """The durable definitions as JSON-ready data (field tables as base64 AMQP tables)."""
    vhosts = []
    for v in core.vhosts.values():
        exchanges = [e for e in v.exchanges.values() if e.durable and e.name not in SYSTEM_EXCHANGES]
        queues = [q for q in v.queues.values() if q.durable and q.exclusive_owner is None]
        durable_ends = {("x", e.name) for e in v.exchanges.values() if e.durable} | {
            ("q", q.name) for q in queues}
        bindings = [
            {"source": e.name, "destination": b.destination, "is_exchange": b.is_exchange,
             "routing_key": b.routing_key, "arguments": _table(b.arguments)}
            for e in v.exchanges.values() if e.durable
            for b in e.bindings if ("x" if b.is_exchange else "q", b.destination) in durable_ends
        ]
        vhosts.append({
            "name": v.name,
            "exchanges": [{"name": e.name, "type": e.kind, "auto_delete": e.auto_delete,
                           "internal": e.internal, "arguments": _table(e.arguments)} for e in exchanges],
            "queues": [{"name": q.name, "kind": q.kind, "auto_delete": q.auto_delete,
                        "arguments": _table(q.arguments)} for q in queues],
            "bindings": bindings,
            "policies": core.policies.get(v.name, {}),
        })
    return {"version": 1, "vhosts": vhosts, "users": core.config.users,
            "permissions": core.config.permissions, "topic_permissions": core.config.topic_permissions}


def restore(core: BrokerState, meta: Meta, definitions: dict[str, Any] | None,
            messages: Iterable[StoredMessage]) -> None:
    """Rebuild the durable state after a restart (before any connection is accepted).
    Stored messages of queues that no longer exist are journalled for deletion."""
    if definitions is not None:
        _restore_definitions(core, definitions)
    for row in messages:
        core.store_seq = max(core.store_seq, row.id)
        queue = core.find_queue(row.vhost, row.queue)
        if queue is None:
            if core.journal is not None:
                core.journal.append(Delete(row.id))
                core.journal_pos += 1
            continue
        properties = decode_image(row.properties[12:])  # as published (message pass-through)
        message = Message(row.exchange, row.routing_key, properties, row.body)
        message.store_id = row.id
        if queue.kind == STREAM:
            queue.append_to_log(message, meta.now_ms)  # a stream's log comes back in offset order
            continue
        message.delivered = True  # it may have been delivered before the crash
        if queue.kind == QUORUM:
            message.acquired_count = 1
        ttl = message_ttl(core, queue, properties)
        if ttl is not None:
            message.expires_at = meta.now_ms + ttl
        queue.enqueue(message, core.rules.priority_level(queue, message, core.config.emulates))


def _restore_definitions(core: BrokerState, definitions: dict[str, Any]) -> None:
    if isinstance(definitions.get("users"), dict):
        core.config.users = definitions["users"]
    if isinstance(definitions.get("permissions"), dict):
        core.config.permissions = definitions["permissions"]
    if isinstance(definitions.get("topic_permissions"), dict):
        core.config.topic_permissions = definitions["topic_permissions"]
    for vd in definitions.get("vhosts", []):
        v = core.add_vhost(vd["name"])
        for ed in vd.get("exchanges", []):
            v.exchanges[ed["name"]] = Exchange(ed["name"], ed["type"], True, ed["auto_delete"],
                                               ed["internal"], _untable(ed["arguments"]))
        for qd in vd.get("queues", []):
            v.queues[qd["name"]] = Queue(qd["name"], v.name, qd["kind"], True, None, qd["auto_delete"],
                                         _untable(qd["arguments"]))
        for bd in vd.get("bindings", []):
            source = v.exchanges.get(bd["source"])
            if source is not None:
                source.bindings.append(Binding(bd["destination"], bd["is_exchange"], bd["routing_key"],
                                               _untable(bd["arguments"])))
        if vd.get("policies"):
            set_policies(core, v.name, vd["policies"])


def encode_properties(properties: BasicProperties) -> bytes:
    """A message's properties as stored: a content-header payload (body size 0)."""
    return encode_header_payload(0, properties)
