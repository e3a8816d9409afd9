"""A channel's deliveries rebuilt from its recorded frames: tags, unacked messages, consumer credit.

Responsibility: the handlers of `conformance.model.recorded_channel` for deliveries, basic.get, qos, consume and the
client's acks, nacks, rejects, recover and transactions (ACK-01, ACK-03..09, QOS-02/03/05/09,
RQ-04, CCN-04). Each decision is the model's own function: the channel's tag counter, `settle_tags`,
`prefetch.apply_qos` / `consumer_has_credit` / `on_delivery` / `release`, `redelivered_flag`.
"""

from __future__ import annotations

from conformance.model import prefetch, recorded_queue_order
from conformance.model.channel import Consumer, settle_tags
from conformance.model.queues import redelivered_flag
from conformance.model.recorded_frames import ACK_OUT, KINDS, NACK_OUT, REJECT_OUT, Columns, Finding
from conformance.model.recorded_lifetime import ChannelLifetime, ConsumeRequest, nowait, reply, request
from conformance.model.traits import GlobalQos

# --- deliveries (ACK-01, QOS-02, RQ-04, CCN-04) ---------------------------------------------


def deliver(s: ChannelLifetime, c: Columns, i: int) -> None:
    channel = s.channel
    tag = c.delivery_tag[i] or 0
    expected = channel.take_tag()
    if tag != expected:  # ACK-01: after a slip the count resynchronises
        _tag_slip(s, c, i, "delivery tag", tag, expected)
    ctag = c.consumer_tag[i]
    if s.cancelled and ctag in s.cancelled and ctag not in s.cancel_unconfirmed:  # CCN-04
        s.find(c.seq[i], "delivery-after-cancel", f"delivery tag {tag} for consumer {ctag} after its basic.cancel-ok")
    if c.body_digest is not None:  # the identity comes with the first body frame
        s.awaiting_body = tag
        s.identity.pop(tag, None)
    s.awaiting_redelivered = c.redelivered[i] is True
    consumer = channel.consumers.get(ctag) if ctag is not None else None
    if s.order_judged:  # RQ-01/02
        if consumer is None:
            recorded_queue_order.on_deliver(s, c, i, tag, ctag, None, 0, False)
        else:
            recorded_queue_order.on_deliver(s, c, i, tag, ctag, consumer.queue, consumer.prefetch, consumer.no_ack)
    if consumer is not None and consumer.queue is not None:
        s.tag_queue[tag] = consumer.queue
    if consumer is None:
        s.outstanding[tag] = ctag
    elif not consumer.no_ack:
        s.outstanding[tag] = ctag
        classic = consumer.tag in s.global_consumers  # else its queue type is unknown (QOS-06)
        if not prefetch.take_credit(channel, consumer, "classic" if classic else "unknown", s.traits):  # QOS-02
            s.find(c.seq[i], "prefetch-exceeded", f"consumer {ctag} holds {consumer.outstanding} unacked "
                                                  f"deliveries, prefetch {consumer.prefetch}")
        if s.global_bound:
            _judge_channel_limit(s, c, i, classic)
    elif s.global_bound:
        s.skip(c.seq[i], "unjudged-global-qos", "no-ack deliveries under a channel-wide limit (QOS-08): deliveries "
                                                "of several queues may cross on their way to the channel")


def _judge_channel_limit(s: ChannelLifetime, c: Columns, i: int, classic: bool) -> None:
    """QOS-03/04: the channel's unacked consumer deliveries never pass its global limit. The
    limiter counts a delivery when it allows it, and the recorder sees no fewer unacked
    deliveries than it counts (`volume_low`): over the highest limit since it was switched on
    (QOS-09: a lowered limit binds only what was not in flight), the broker broke it."""
    if not classic:
        s.skip(c.seq[i], "unjudged-global-qos", "deliveries to consumers created before the channel-wide limit "
                                                "(their queue may be a quorum queue, which ignores it)")
        return
    if s.context.traits is None:
        s.skip(c.seq[i], "unjudged-global-qos", "the broker was not identified (no connection.start): what "
                                                "global=true means depends on its version")
        return
    if s.channel.volume_low > s.global_bound:
        s.find(c.seq[i], "global-prefetch-exceeded", f"delivery tag {c.delivery_tag[i]}: the channel holds "
                                                     f"{s.channel.volume_low} unacked consumer deliveries, "
                                                     f"global prefetch {s.channel.global_limit}")


def _tag_slip(s: ChannelLifetime, c: Columns, i: int, what: str, tag: int, expected: int) -> None:
    s.find(c.seq[i], "tag-sequence", f"{what} {tag}, expected {expected}")
    s.channel.next_tag = tag + 1


def get_ok(s: ChannelLifetime, c: Columns, i: int) -> None:
    tag = c.delivery_tag[i] or 0
    expected = s.channel.take_tag()
    if tag != expected:  # ACK-01: basic.get-ok shares the channel's counter
        _tag_slip(s, c, i, "basic.get-ok tag", tag, expected)
    _expect_identity(s, c, i, tag)
    if s.get_queue is not None:
        s.tag_queue[tag] = s.get_queue
    recorded_queue_order.on_get_ok(s, c, i, tag, s.get_queue)
    if not s.get_no_ack:
        s.outstanding[tag] = None
    reply(s, c, i)


def _expect_identity(s: ChannelLifetime, c: Columns, i: int, tag: int) -> None:
    s.awaiting_body = tag if c.body_digest is not None else 0
    if s.awaiting_body:
        s.identity.pop(tag, None)
    s.awaiting_redelivered = c.redelivered[i] is True


def body(s: ChannelLifetime, c: Columns, i: int) -> None:
    tag, s.awaiting_body = s.awaiting_body, 0
    digest = c.body_digest[i] if c.body_digest is not None else None
    if not tag or digest is None:
        return
    if tag in s.outstanding:
        s.identity[tag] = digest
    if s.order_judged:
        recorded_queue_order.on_identity(s, c, i, digest)  # RQ-01/02
    # the same message from the queue it was requeued to (a dead-lettered copy in another queue is a
    # new message there: DLX-02, its redelivered flag not RQ-04's); "" when the recording does not say
    queue = s.tag_queue.get(tag, "") if tag in s.outstanding else s.tag_queue.pop(tag, "")  # no-ack: done with it
    if s.requeued.get((digest, queue), 0) > 0:  # (a Counter's missing key costs a call)
        s.requeued[(digest, queue)] -= 1
        # delivered and returned once at least (here): the flag every queue type must set
        if redelivered_flag(None, 1, 1, s.traits.quorum_redelivered_on_return) and not s.awaiting_redelivered:
            s.find(c.seq[i], "redelivered-missing",  # RQ-04
                   f"delivery tag {tag} repeats a message requeued on this channel without redelivered=true")


def get(s: ChannelLifetime, c: Columns, i: int) -> None:
    s.get_no_ack = bool(c.no_ack[i]) if c.no_ack is not None else False
    s.get_queue = c.queue[i] if c.queue is not None else None
    recorded_queue_order.on_get(s)
    request(s, c, i)


def qos(s: ChannelLifetime, c: Columns, i: int) -> None:
    if c.prefetch_count is not None:  # applied when the broker answers (qos_ok)
        s.qos_requests.append((c.prefetch_count[i] or 0, bool(c.global_qos[i]) if c.global_qos is not None else False))
    request(s, c, i)


def qos_ok(s: ChannelLifetime, c: Columns, i: int) -> None:
    """basic.qos takes effect when the broker handles it, before its qos-ok: what the client
    then holds unacked is what the new channel limit counts (QOS-05)."""
    if s.qos_requests:
        count, glob = s.qos_requests.popleft()
        channel, traits = s.channel, s.traits
        was_limited = channel.global_limit != 0
        prefetch.apply_qos(channel, count, glob, traits, len(s.outstanding) + len(s.tx_settled))  # QOS-02/03
        if traits.global_qos is GlobalQos.CONNECTION and count:
            s.skip(c.seq[i], "unjudged-global-qos", "a 0-9-1 limit shared by all consumers of the connection "
                                                    "(global=true) or of the channel (global=false): not judged")
        if traits.global_qos is GlobalQos.CHANNEL:
            _track_channel_limit(s, was_limited)
    reply(s, c, i)


def _track_channel_limit(s: ChannelLifetime, was_limited: bool) -> None:
    limit = s.channel.global_limit
    if not limit or not was_limited:  # off, or switched on: earlier consumers' queue types are unknown (QOS-06)
        s.global_consumers.clear()
    s.global_bound = max(s.global_bound, limit) if limit and was_limited else limit  # QOS-09: a lowered limit


def consume(s: ChannelLifetime, c: Columns, i: int) -> None:
    no_ack = bool(c.no_ack[i]) if c.no_ack is not None else False
    queue = c.queue[i] if c.queue is not None else None
    limit = s.channel.consumer_prefetch if c.prefetch_count is not None else 0
    ctag = c.consumer_tag[i] or None
    limited = s.global_bound != 0  # QOS-06: under a channel limit only a classic queue takes it
    if nowait(c, i):  # no consume-ok comes: the consumer exists from the request on
        if ctag is not None:  # (an empty tag with nowait: the broker's tag is never seen)
            _consumer_created(s, c, i, ctag, (ctag, queue, no_ack, limit, limited))
    else:
        s.consume_requests.append((ctag, queue, no_ack, limit, limited))
    request(s, c, i)


def consume_ok(s: ChannelLifetime, c: Columns, i: int) -> None:
    ctag = c.consumer_tag[i]
    pending = s.consume_requests
    request = next((p for p in pending if p[0] == ctag), None) or (pending[0] if pending else None)
    if request is not None:
        pending.remove(request)
    if ctag is not None:
        _consumer_created(s, c, i, ctag, request or (None, None, False, 0, False))
    reply(s, c, i)


def _consumer_created(s: ChannelLifetime, c: Columns, i: int, ctag: str, request: ConsumeRequest) -> None:
    _, queue, no_ack, limit, limited = request  # QOS-02: the consumer keeps the prefetch in force when created
    s.channel.consumers[ctag] = Consumer(ctag, queue or "", no_ack, limit)
    s.consumed[ctag] = (queue, c.ts[i] if c.ts is not None else 0, c.seq[i])
    s.cancelled.pop(ctag, None)
    s.cancel_unconfirmed.discard(ctag)
    if limited and s.global_bound:  # QOS-06: a classic queue (the limit is still on)
        s.global_consumers.add(ctag)


# --- consumer acknowledgements (ACK-03..09) -------------------------------------------------


def client_ack(s: ChannelLifetime, c: Columns, i: int) -> None:
    if s.pending_error is not None or s.client_closed:
        return  # the broker is about to close the channel anyway
    tag = c.delivery_tag[i] or 0
    code = c.code[i]
    multiple = c.multiple[i] is True and code != REJECT_OUT
    requeue = code != ACK_OUT and c.requeue[i] is True
    tags = settle_tags(s.outstanding, tag, multiple)  # ACK-03..06
    if tags is None:
        kind = "multi-ack-beyond" if multiple else "ack-unknown-tag" if tag == 0 or tag >= s.channel.next_tag \
            else "ack-settled-tag"
        s.pending_error = Finding(c.seq[i], kind, _ack_text(code, tag, multiple), KINDS[kind][1])
        s.requests_after_error = 0
        return
    outstanding = s.outstanding
    if s.tx:
        s.tx_settled.extend((t, outstanding.pop(t), requeue) for t in tags)
        return
    if s.order_judged:  # RQ-01/02
        recorded_queue_order.on_settled(s, c, i, [(t, outstanding[t]) for t in tags], requeue, code == ACK_OUT)
    channel, traits = s.channel, s.traits
    for t in tags:
        ctag = outstanding.pop(t)
        if ctag is not None:
            prefetch.release_one(channel, ctag, traits)  # QOS-05
        if s.identity:
            _requeue_identity(s, t, requeue)


def _ack_text(code: int, tag: int, multiple: bool) -> str:
    name = {ACK_OUT: "basic.ack", NACK_OUT: "basic.nack", REJECT_OUT: "basic.reject"}[code]
    return f"{name} delivery-tag={tag}{' multiple' if multiple else ''}"


def _settle(s: ChannelLifetime, tag: int, ctag: str | None, requeue: bool) -> None:
    if ctag is not None:
        prefetch.release_one(s.channel, ctag, s.traits)  # QOS-05
    if s.identity:
        _requeue_identity(s, tag, requeue)


def _requeue_identity(s: ChannelLifetime, tag: int, requeue: bool) -> None:
    digest = s.identity.pop(tag, None)
    queue = s.tag_queue.pop(tag, "")
    if requeue and digest is not None:  # ACK-07: back to its queue, delivered once more
        s.requeued[(digest, queue)] += 1


def recover(s: ChannelLifetime, c: Columns, i: int) -> None:
    if s.pending_error is None and not s.client_closed:
        recorded_queue_order.on_settled(s, c, i, list(s.outstanding.items()), True)  # RQ-01/02
        for tag, ctag in s.outstanding.items():  # ACK-09: requeue everything unacked
            _settle(s, tag, ctag, True)
        s.outstanding.clear()
    request(s, c, i)


def tx_select(s: ChannelLifetime, c: Columns, i: int) -> None:
    s.tx = True
    request(s, c, i)


def tx_commit(s: ChannelLifetime, c: Columns, i: int) -> None:
    for requeued in (False, True):  # RQ-01/02: the commit's requeues as one operation (the rest: acks)
        recorded_queue_order.on_settled(s, c, i, [(t, ctag) for t, ctag, r in s.tx_settled if r is requeued], requeued,
                                  not requeued)
    for tag, ctag, requeue in s.tx_settled:  # ACK-08: settlements take effect at commit
        _settle(s, tag, ctag, requeue)
    s.tx_settled.clear()
    request(s, c, i)


def tx_rollback(s: ChannelLifetime, c: Columns, i: int) -> None:
    if s.tx_settled:  # ACK-08: rolled-back acks are outstanding again
        merged = {**s.outstanding, **{t: ctag for t, ctag, _ in s.tx_settled}}
        s.outstanding = dict(sorted(merged.items()))
        s.tx_settled.clear()
    request(s, c, i)
