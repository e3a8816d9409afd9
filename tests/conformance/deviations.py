"""The deviations `DeviantProxy` can apply: each a small, realistic rewrite of one AMQP behaviour.

Each names its area (the area whose tests, and whose machine, must find it) and the rules it
breaks. Client-side rewrites make the broker mis-hear the client (the client believes it sent
the original); broker-side ones change what the client hears. Per connection state lives on
the instance (`DeviantProxy` makes one per connection).
"""

from __future__ import annotations

from collections import defaultdict

from codec import (
    BasicAck,
    BasicCancel,
    BasicDeliver,
    BasicGetOk,
    BasicNack,
    BasicPublish,
    BasicQos,
    BasicReject,
    BasicReturn,
    ChannelClose,
    ChannelCloseOk,
    ConnectionStartOk,
)
from conformance.interpose.frames import Frame
from tests.conformance.deviant import Deviation, Io, Message, encode
from tests.conformance.deviations_access import AccessRefusedAsNotFound, BlockedSwallowed, UserIdUnheard
from tests.conformance.deviations_lifecycle import DeadLetterKeyRewritten, ExpirationStripped, XDeathDropped
from tests.conformance.deviations_routing import (
    DeclareOkCountsZero,
    ExchangeBindReversed,
    IfUnusedDropped,
    MandatoryIgnored,
    RoutingKeyCaseFolded,
)


class AckMultipleAsSingle(Deviation):
    name, area, rules = "ack_multiple_as_single", "ack", ("ACK-05",)
    description = "basic.ack multiple=true settles only the named tag"

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicAck) and m.multiple and m.delivery_tag:
            io.record(self.name)
            io.to_broker(encode(frame.channel, m._replace(multiple=False)))
            return
        io.to_broker(frame.raw)


class NackRequeueFlipped(Deviation):
    name, area, rules = "nack_requeue_flipped", "ack", ("ACK-07",)
    description = "basic.nack's requeue bit is read inverted"

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicNack):
            io.record(self.name)
            io.to_broker(encode(frame.channel, m._replace(requeue=not m.requeue)))
            return
        io.to_broker(frame.raw)


class DoubleSettleIgnored(Deviation):
    name, area, rules = "double_settle_ignored", "ack", ("ACK-04",)
    description = "a second ack/nack/reject of a settled tag is accepted silently (no 406)"

    def __init__(self) -> None:
        super().__init__()
        self.settled: dict[int, set[int]] = defaultdict(set)

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicAck | BasicNack | BasicReject) and m.delivery_tag:
            seen = self.settled[frame.channel]
            if m.delivery_tag in seen:
                io.record(self.name)
                return  # dropped: the broker never hears the second settle
            seen.add(m.delivery_tag)
        elif isinstance(m, ChannelClose | ChannelCloseOk):
            self.settled.pop(frame.channel, None)  # a reopened channel counts from 1 again
        io.to_broker(frame.raw)

    def broker(self, frame: Frame, io: Io) -> None:
        if isinstance(frame.method, ChannelClose | ChannelCloseOk):
            self.settled.pop(frame.channel, None)
        io.to_client(frame.raw)


class DeliveryTagReused(Deviation):
    name, area, rules = "delivery_tag_reused", "ack", ("ACK-01",)
    description = "the 3rd delivery on a channel carries the 2nd one's tag"

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[int, list[int]] = defaultdict(list)

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicDeliver | BasicGetOk):
            tags = self.tags[frame.channel]
            tags.append(m.delivery_tag)
            if len(tags) == 3:
                io.record(self.name)
                io.to_client(encode(frame.channel, m._replace(delivery_tag=tags[1])))
                return
        elif isinstance(m, ChannelCloseOk | ChannelClose):
            self.tags.pop(frame.channel, None)
        io.to_client(frame.raw)


class TagsRestartPerConsumer(Deviation):
    name, area, rules = "tags_restart_per_consumer", "ack", ("ACK-01",)
    description = "delivery tags count per consumer from 1, not per channel"

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[tuple[int, str], int] = defaultdict(int)

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicDeliver):
            key = (frame.channel, m.consumer_tag)
            self.counts[key] += 1
            if self.counts[key] != m.delivery_tag:
                io.record(self.name)
            io.to_client(encode(frame.channel, m._replace(delivery_tag=self.counts[key])))
            return
        io.to_client(frame.raw)


class ChannelCloseHidden(Deviation):
    name, area, rules = "channel_close_hidden", "ack", ("ACK-03",)
    description = "a broker channel.close never reaches the client (the proxy answers close-ok)"

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, ChannelClose):
            io.record(self.name)
            io.to_broker(encode(frame.channel, ChannelCloseOk()))
            return
        io.to_client(frame.raw)


class RequeueToTail(Deviation):
    name, area, rules = "requeue_to_tail", "requeue", ("RQ-01",)
    description = "a requeued message goes behind newer ones (requeue done as ack + republish)"

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[tuple[int, int], Message] = {}

    def message(self, message: Message, io: Io) -> None:
        m = message.method
        if isinstance(m, BasicDeliver | BasicGetOk):
            self.held[(message.channel, m.delivery_tag)] = message

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        single = isinstance(m, BasicReject) or (isinstance(m, BasicNack) and not m.multiple)
        if isinstance(m, BasicReject | BasicNack) and single and m.requeue:
            held = self.held.pop((frame.channel, m.delivery_tag), None)
            if held is not None:
                io.record(self.name)
                original = held.method
                assert isinstance(original, BasicDeliver | BasicGetOk)
                io.to_broker(encode(frame.channel, BasicAck(delivery_tag=m.delivery_tag)))
                io.to_broker(encode(frame.channel, BasicPublish(exchange=original.exchange,
                                                               routing_key=original.routing_key)))
                io.to_broker(b"".join(held.frames))
                return
        if isinstance(m, ChannelClose):
            self.held = {k: v for k, v in self.held.items() if k[0] != frame.channel}
        io.to_broker(frame.raw)


class RedeliveredDropped(Deviation):
    name, area, rules = "redelivered_dropped", "requeue", ("RQ-04",)
    description = "redeliveries carry redelivered=false"
    value = False

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicDeliver | BasicGetOk) and m.redelivered != self.value:
            io.record(self.name)
            io.to_client(encode(frame.channel, m._replace(redelivered=self.value)))
            return
        io.to_client(frame.raw)


class RedeliveredAlways(RedeliveredDropped):
    name, area, rules = "redelivered_always", "requeue", ("RQ-04",)
    description = "every delivery carries redelivered=true"
    value = True


class CloseDropsUnacked(Deviation):
    name, area, rules = "close_drops_unacked", "requeue", ("RQ-03",)
    description = "a client channel.close drops the channel's unacked messages instead of requeueing them"

    def client(self, frame: Frame, io: Io) -> None:
        if isinstance(frame.method, ChannelClose):
            io.record(self.name)
            io.to_broker(encode(frame.channel, BasicAck(delivery_tag=0, multiple=True)))  # ACK-06: all of them
        io.to_broker(frame.raw)


class PrefetchPlusOne(Deviation):
    name, area, rules = "prefetch_plus_one", "qos", ("QOS-02",)
    description = ("one delivery over the prefetch limit (prefetch_count n is applied as n + 1; 65535, whose n + 1 "
                   "does not fit the short field, as no limit)")

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicQos) and m.prefetch_count:
            io.record(self.name)
            over = m.prefetch_count + 1 if m.prefetch_count < 0xFFFF else 0  # 0: no limit, over 65535 too
            io.to_broker(encode(frame.channel, m._replace(prefetch_count=over)))
            return
        io.to_broker(frame.raw)


class PrefetchZeroAsOne(Deviation):
    name, area, rules = "prefetch_zero_as_one", "qos", ("QOS-02",)
    description = "prefetch_count=0 (no limit) is applied as a limit of 1"

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicQos) and not m.prefetch_count:
            io.record(self.name)
            io.to_broker(encode(frame.channel, m._replace(prefetch_count=1)))
            return
        io.to_broker(frame.raw)


class _ConfirmRewrite(Deviation):
    """Acts on the confirm of one seqno per channel, whatever batching the broker chose: a
    confirm covering it (multiple=true included) is re-sent as single confirms, rewritten; so is
    every later multiple=true confirm reaching past it, so that none settles the rewritten seqno
    again (a broker may coalesce a confirm already sent into a later multiple one: the deviation
    must not depend on how the broker batches)."""

    seqno = 1

    def __init__(self) -> None:
        super().__init__()
        self.confirmed: dict[int, set[int]] = defaultdict(set)

    def client(self, frame: Frame, io: Io) -> None:
        if isinstance(frame.method, ChannelClose | ChannelCloseOk):
            self.confirmed.pop(frame.channel, None)  # a reopened channel numbers from 1 again
        io.to_broker(frame.raw)

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, ChannelClose | ChannelCloseOk):
            self.confirmed.pop(frame.channel, None)
        if not isinstance(m, BasicAck | BasicNack):
            io.to_client(frame.raw)
            return
        done = self.confirmed[frame.channel]
        seqnos = [s for s in range(1, m.delivery_tag + 1) if s not in done] if m.multiple else [m.delivery_tag]
        done.update(seqnos)
        if self.seqno not in seqnos and not (m.multiple and m.delivery_tag > self.seqno):
            io.to_client(frame.raw)
            return
        if self.seqno in seqnos:
            io.record(self.name)
        for seqno in seqnos:
            single = m._replace(delivery_tag=seqno, multiple=False)
            rewritten = self.rewrite(single) if seqno == self.seqno else single
            if rewritten is not None:
                io.to_client(encode(frame.channel, rewritten))

    def rewrite(self, confirm: BasicAck | BasicNack) -> BasicAck | BasicNack | None:
        raise NotImplementedError


class FirstConfirmNacked(_ConfirmRewrite):
    name, area, rules = "first_confirm_nacked", "confirms", ("PC-08",)
    description = "the first publish on each channel is confirmed with basic.nack"

    def rewrite(self, confirm: BasicAck | BasicNack) -> BasicAck | BasicNack | None:
        return BasicNack(delivery_tag=confirm.delivery_tag, multiple=False, requeue=False)


class ConfirmDropped(_ConfirmRewrite):
    name, area, rules = "confirm_dropped", "confirms", ("PC-05",)
    description = "the second publish on each channel is never confirmed"
    seqno = 2

    def rewrite(self, confirm: BasicAck | BasicNack) -> BasicAck | BasicNack | None:
        return None


class ConfirmNackAsAck(Deviation):
    name, area, rules = "confirm_nack_as_ack", "confirms", ("PC-08",)
    description = "a publish a queue refused (basic.nack) is confirmed with basic.ack"

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicNack):
            io.record(self.name)
            io.to_client(encode(frame.channel, BasicAck(delivery_tag=m.delivery_tag, multiple=m.multiple)))
            return
        io.to_client(frame.raw)


class ReturnDropped(Deviation):
    name, area, rules = "return_dropped", "confirms", ("PC-06",)
    description = "basic.return of an unroutable mandatory publish is never sent"

    def broker(self, frame: Frame, io: Io) -> None:
        if isinstance(frame.method, BasicReturn):
            io.record(self.name)
            self.drop_content("broker", frame.channel)
            return
        io.to_client(frame.raw)


class CancelNotificationDropped(Deviation):
    name, area, rules = "cancel_notification_dropped", "cancel", ("CCN-02",)
    description = "the broker's basic.cancel (queue deleted) never reaches the client"

    def broker(self, frame: Frame, io: Io) -> None:
        if isinstance(frame.method, BasicCancel):
            io.record(self.name)
            return
        io.to_client(frame.raw)


class CancelCapabilityForced(Deviation):
    name, area, rules = "cancel_capability_forced", "cancel", ("CCN-01", "CCN-02")
    description = "the broker sends basic.cancel to clients that did not ask for it (capability ignored)"

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, ConnectionStartOk):
            capabilities = dict(m.client_properties.get("capabilities") or {})
            if not capabilities.get("consumer_cancel_notify"):
                io.record(self.name)
                properties = {**m.client_properties, "capabilities": {**capabilities, "consumer_cancel_notify": True}}
                io.to_broker(encode(frame.channel, m._replace(client_properties=properties)))
                return
        io.to_broker(frame.raw)


class _ChannelClosedInstead(Deviation):
    """Closes a channel as if the broker had: the client gets `close`, the broker a client-side
    close; until the broker's close-ok, what the client sends on that channel is held (its
    close-ok, answering a close the broker never sent, is dropped), then passed on."""

    def __init__(self) -> None:
        super().__init__()
        self.closing: dict[int, list[bytes]] = {}  # channel -> what the client sent meanwhile

    def close_instead(self, channel: int, close: ChannelClose, io: Io) -> None:
        io.record(self.name)
        self.closing[channel] = []
        io.to_client(encode(channel, close))
        io.to_broker(encode(channel, ChannelClose(200, "closed by the client", 0, 0)))

    def held(self, frame: Frame) -> bool:
        """Whether the proxy keeps a client frame back (the channel is closing)."""
        held = self.closing.get(frame.channel) if frame.type else None
        if held is not None and not isinstance(frame.method, ChannelCloseOk):
            held.append(frame.raw)
        return held is not None

    def closing_answer(self, frame: Frame, io: Io) -> bool:
        """Whether a broker frame belongs to a closing channel (its close-ok releases what was held)."""
        if frame.channel not in self.closing:
            return False
        if isinstance(frame.method, ChannelCloseOk):  # the broker's side is closed: the client's reopen may pass
            for data in self.closing.pop(frame.channel):
                io.to_broker(data)
        return True

    def client(self, frame: Frame, io: Io) -> None:
        if not self.held(frame):
            io.to_broker(frame.raw)

    def broker(self, frame: Frame, io: Io) -> None:
        if not self.closing_answer(frame, io):
            io.to_client(frame.raw)


class TimeoutAsChannelClose(_ChannelClosedInstead):
    name, area, rules = "timeout_as_channel_close", "timeout", ("TMO-4.3-3",)
    description = "a consumer timeout with the capability is answered with channel.close 406, not basic.cancel"

    def broker(self, frame: Frame, io: Io) -> None:
        if self.closing_answer(frame, io):
            return
        if isinstance(frame.method, BasicCancel):
            text = f"PRECONDITION_FAILED - delivery acknowledgement on channel {frame.channel} timed out"
            self.close_instead(frame.channel, ChannelClose(406, text, 0, 0), io)
            return
        io.to_client(frame.raw)


class QosNotImplemented(_ChannelClosedInstead):
    name, area, rules = "qos_not_implemented", "qos", ("QOS-02",)
    description = "basic.qos (prefetch_size 0) is answered with channel.close 540 NOT_IMPLEMENTED"

    def client(self, frame: Frame, io: Io) -> None:
        if self.held(frame):
            return
        m = frame.method
        if isinstance(m, BasicQos) and m.prefetch_size == 0:
            self.close_instead(frame.channel, ChannelClose(540, "NOT_IMPLEMENTED - basic.qos", 60, 10), io)
            return
        io.to_broker(frame.raw)


class Codes404And406Swapped(Deviation):
    name, area, rules = "codes_404_406_swapped", "errors", ("ERR-04",)
    description = "channel.close says 404 NOT_FOUND where it means 406 PRECONDITION_FAILED, and back"

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, ChannelClose) and m.reply_code in (404, 406):
            io.record(self.name)
            io.to_client(encode(frame.channel, m._replace(reply_code=810 - m.reply_code)))
            return
        io.to_client(frame.raw)


DEVIATIONS: tuple[type[Deviation], ...] = (
    AckMultipleAsSingle, NackRequeueFlipped, DoubleSettleIgnored, DeliveryTagReused, TagsRestartPerConsumer,
    ChannelCloseHidden, RequeueToTail, RedeliveredDropped, RedeliveredAlways, CloseDropsUnacked, PrefetchPlusOne,
    PrefetchZeroAsOne, FirstConfirmNacked, ConfirmDropped, ConfirmNackAsAck, ReturnDropped,
    CancelNotificationDropped, CancelCapabilityForced, TimeoutAsChannelClose, Codes404And406Swapped,
    QosNotImplemented, RoutingKeyCaseFolded, MandatoryIgnored, ExchangeBindReversed, IfUnusedDropped, DeclareOkCountsZero,
    ExpirationStripped, XDeathDropped, DeadLetterKeyRewritten, AccessRefusedAsNotFound, UserIdUnheard, BlockedSwallowed,
)
BY_NAME = {d.name: d for d in DEVIATIONS}
