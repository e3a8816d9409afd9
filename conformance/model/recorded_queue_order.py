"""Each queue's requeue order rebuilt from one channel's recorded frames (RQ-01, RQ-02).

Responsibility: where requeued messages come back, the requeue-order rules of
`conformance.model.recorded_channel`. A queue's requeued messages are
kept in the model's own ready lists (`queues.ClassicReady`, RQ-01: back at the original
position; `queues.QuorumReady`, RQ-02: a returns FIFO served first), fed with the recorded
requeues (nack/reject requeue=true, basic.recover, tx.commit; one landing group per consumer
and per basic.get delivery, `queues` module docstring); each redelivery must be one of the
model's candidates; on a classic queue a never-delivered message (first seen here,
redelivered=false) may come only when the model lets one come. The queue type is the one
declared in the recording (`Context.queue_types`); when it is unknown an order is a finding
only when neither type allows it.

Rules:
- A requeue reaches the queue some time after the client sent it; a delivery recorded after it
  may have left the queue before. A requeue is known to have landed before a delivery when the
  delivery is the requeued message itself, or follows a later requeue known to have landed
  (the queue handles one channel's requeues in order), or is the answer to a basic.get sent
  after it, or when the consumer had no credit without it (prefetch p: it had received d
  deliveries and the queue can have handled at most s of its settlements first, d - s >= p).
  s counts the settlements sent before the requeue and every ack sent since: a classic queue
  handles acks before anything else waiting (rabbit_amqqueue_process prioritise_cast gives
  `ack` priority 4, `requeue` 0; seen live on 3.10.8: an ack sent after two rejects freed the
  credit for a never-delivered message before the rejected ones were back). Only requeues
  known to have landed are fed.
- Never-delivered messages ahead of returned ones are not judged on quorum queues: on 3.10
  (the catalogue's RQ-02 variant) basic.reject/nack requeue=true re-enqueue at the back of the
  main queue without a delivery limit (seen live on 3.10.8: a consumer with a full window of 3
  rejecting one message got a never-delivered one next); the queue arguments are not recorded.
  Among themselves, returned messages keep the order they were returned in either way.
- Judged on RabbitMQ profiles only (`Traits.requeue_position`): 0-9-1 leaves the position open,
  and an unidentified broker (no connection.start) is not judged.
- A message may leave a queue unseen (TTL, a length limit, a purge, a delivery limit): an
  order is a finding only once a message that should have come first does come later.
- Judged only where the order is the queue's alone: the queue is read by this channel only in
  the whole recording (`Context.readers`), no delivered message has a priority above 0 (the
  `priority` column; without it nothing is judged), identities (body digests) are unambiguous.
  A requeue that cannot be judged is counted (`unjudged-requeue-order`) with the reason.
"""

from __future__ import annotations

from conformance.model.order import Arriving, Overtaking, QueueOrder, Requeue
from conformance.model.prefetch import requeue_races_resume
from conformance.model.queues import Message
from conformance.model.recorded_frames import Columns
from conformance.model.recorded_lifetime import ChannelLifetime

_KINDS = ("classic", "quorum")  # the order of `QueueOrder.models`


def _queue(s: ChannelLifetime, name: str | None, c: Columns) -> QueueOrder | None:
    if not name:
        return None
    order = s.order.queues.get(name)
    if order is None:
        order = s.order.queues[name] = QueueOrder()
        kind = s.context.queue_types.get(name)
        if kind in _KINDS:
            order.kinds = (kind,)
        if s.context.traits is None or not s.context.traits.requeue_position:
            order.unjudged = ""  # no rule: the broker is unknown, or its profile leaves the position open
        elif kind is not None and kind not in _KINDS:
            order.unjudged = f"a {kind} queue"
        elif s.context.readers.get(name) != 1:
            order.unjudged = "the queue has other readers in the recording (or its readers are unknown)"
        elif c.priority is None:
            order.unjudged = "message priorities were not recorded (a lake without the priority column)"
    return order


def _judged(s: ChannelLifetime) -> bool:
    return s.order_judged


def on_deliver(s: ChannelLifetime, c: Columns, i: int, tag: int, ctag: str | None, queue: str | None,
               prefetch: int, no_ack: bool) -> None:
    """A basic.deliver: which requeues are known to have landed before it left its queue."""
    order = s.order
    if ctag is None or queue is None or not _judged(s):
        order.arriving = None
        return
    if not no_ack:  # a no-ack delivery is never settled, nor requeued
        order.queue_of[tag] = queue
    known = 0
    q = order.queues.get(queue)
    if q is not None and prefetch and not no_ack:
        for requeue in q.pending:  # credit: d - s >= p before the requeue
            first = requeue.settled.get(ctag, 0) + order.acked[ctag] - requeue.acked.get(ctag, 0)
            if order.delivered[ctag] - first < prefetch:
                break
            known = requeue.index
    order.delivered[ctag] += 1
    _arriving(s, c, i, queue, known)


def on_get_ok(s: ChannelLifetime, c: Columns, i: int, tag: int, queue: str | None) -> None:
    if queue is None or not _judged(s):
        s.order.arriving = None
        return
    if not s.get_no_ack:
        s.order.queue_of[tag] = queue
    _arriving(s, c, i, queue, s.order.get_known)


def _arriving(s: ChannelLifetime, c: Columns, i: int, queue: str, known: int) -> None:
    if c.priority is not None and (c.priority[i] or 0) > 0:
        s.order.priorities = True  # a message row carrying its properties (harness recordings)
    s.order.arriving = (queue, known, c.redelivered[i] is not True, c.delivery_tag[i] or 0, c.seq[i])


def on_get(s: ChannelLifetime) -> None:
    s.order.get_known = s.order.requeues  # basic.get is handled after every requeue sent before it


def on_priority(s: ChannelLifetime, c: Columns, i: int) -> None:
    s.order.priorities = True


def on_identity(s: ChannelLifetime, c: Columns, i: int, digest: str) -> None:
    """The arriving delivery's message is known: judge its place (RQ-01/RQ-02)."""
    order, arriving = s.order, s.order.arriving
    order.arriving = None
    q = _queue(s, arriving[0], c) if arriving is not None else None
    if arriving is None or q is None or q.unjudged is not None:
        return
    if order.priorities:
        q.unjudged = "a delivered message has a priority above 0 (a priority queue orders by it)"
        return
    _, known, fresh, _, _ = arriving
    _land(q, max(known, q.requeued_in.get(digest, 0)))
    _prove(s, q, digest)
    if digest in q.ready:
        _judge_redelivery(q, arriving, digest)
    elif digest in q.messages:
        q.unjudged = "two messages with one body: their identities are ambiguous"
    else:
        if fresh and q.kinds == ("classic",) and not q.models[0].fresh_may_come():
            _overtook(q, arriving, "a message never delivered before")
        if arriving[3] in order.queue_of:  # it may come back (not no-ack)
            q.messages[digest] = Message(digest.encode(), q.next_seq)
            q.next_seq += 1


def _land(q: QueueOrder, known: int) -> None:
    while q.pending and q.pending[0].index <= known:
        requeue = q.pending.popleft()
        for model in q.models:
            model.requeue([list(g) for g in requeue.groups], requeue.racing)
        for group in requeue.groups:
            for message in group:
                digest = message.body.decode()
                q.requeued_in.pop(digest, None)
                q.ready.add(digest)


def _judge_redelivery(q: QueueOrder, arriving: Arriving, digest: str) -> None:
    message = q.messages[digest]
    allowed = [message in m.candidates() for m in q.models]
    if not any(ok for kind, ok in zip(_KINDS, allowed, strict=True) if kind in q.kinds):
        _overtook(q, arriving, f"requeued message {digest}")
    for model, ok in zip(q.models, allowed, strict=True):
        if ok:
            model.take(message)
        else:
            model.discard(message)
    q.ready.discard(digest)


def _overtook(q: QueueOrder, arriving: Arriving, what: str) -> None:
    expected = {kind: {m.body.decode() for m in model.candidates()}
                for kind, model in zip(_KINDS, q.models, strict=True) if kind in q.kinds}
    _, _, _, tag, seq = arriving
    q.overtakings.append(Overtaking(seq, f"delivery tag {tag}: {what}", expected))


_RULES = {"classic": "a classic queue (RQ-01: back at its original position)",
          "quorum": "a quorum queue (RQ-02: returned messages in the order returned)"}


def _prove(s: ChannelLifetime, q: QueueOrder, digest: str) -> None:
    """A message comes that an earlier delivery overtook: once every queue type the queue may be
    is proven wrong, that earlier delivery broke RQ-01/RQ-02."""
    for overtaking in list(q.overtakings):
        overtaking.proven.update(kind for kind, expected in overtaking.expected.items() if digest in expected)
        if len(overtaking.proven) == len(overtaking.expected):
            q.overtakings.remove(overtaking)
            rules = [_RULES[kind] for kind in overtaking.expected]
            which = f"neither {rules[0]} nor {rules[1]} allows" if len(rules) > 1 else f"{rules[0]} does not allow"
            kind = "requeue-order" if "classic" in overtaking.expected else "returns-order"
            s.find(overtaking.seq, kind, f"{overtaking.what} came before requeued message(s) that came later "
                                         f"({digest} among them), which {which}")


def on_settled(s: ChannelLifetime, c: Columns, i: int, settled: list[tuple[int, str | None]], requeue: bool,
               ack: bool = False) -> None:
    """Consumer deliveries settled by the client (ack/nack/reject/recover, tx.commit); with
    `requeue` they go back to their queues as one operation; `ack`: settled by basic.ack."""
    if not settled or not _judged(s):
        return
    order = s.order
    before, acked = (dict(order.settled), dict(order.acked)) if requeue else ({}, {})
    for tag, ctag in settled:
        if ctag is not None:
            order.settled[ctag] += 1
            if ack:
                order.acked[ctag] += 1
        if not requeue:  # gone for good: forget it
            _forget(order.queues.get(order.queue_of.pop(tag, "")), s.identity.get(tag))
    if not requeue:
        return
    order.requeues += 1
    groups: dict[tuple[str, str | int], list[Message]] = {}
    for tag, ctag in settled:
        queue = order.queue_of.pop(tag, None)
        digest = s.identity.get(tag)
        q = _queue(s, queue, c) if queue is not None else None
        if q is None or q.unjudged is not None:
            if q is not None and q.unjudged:
                s.skip(c.seq[i], "unjudged-requeue-order", f"requeue order not judged: {q.unjudged}")
            continue
        if digest is None or digest not in q.messages:
            continue
        q.requeued_in[digest] = order.requeues
        groups.setdefault((queue or "", ctag if ctag is not None else tag), []).append(q.messages[digest])
    racing = requeue_races_resume(s.channel, s.traits)
    for queue in {key[0] for key in groups}:
        mine = [g for key, g in groups.items() if key[0] == queue]
        order.queues[queue].pending.append(Requeue(order.requeues, mine, racing, before, acked))


def _forget(q: QueueOrder | None, digest: str | None) -> None:
    if q is not None and digest is not None and digest not in q.ready and digest not in q.requeued_in:
        q.messages.pop(digest, None)
