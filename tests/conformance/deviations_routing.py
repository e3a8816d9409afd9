"""The topology deviations `DeviantProxy` can apply (`deviations.DEVIATIONS` lists them with the others).

The routing ones are client-side rewrites: of basic.publish (the broker mis-hears the publish, so
the client, which believes it sent the original, sees the routing of another message) or of
exchange.bind and exchange.unbind (the broker binds the other way round). The
exchanges and queues ones mis-hear an exchange.delete's if-unused, or mis-report a queue's counts.
"""

from __future__ import annotations

from codec import BasicPublish, ExchangeBind, ExchangeDelete, ExchangeUnbind, QueueDeclareOk
from conformance.interpose.frames import Frame
from tests.conformance.deviant import Deviation, Io, encode


class RoutingKeyCaseFolded(Deviation):
    name, area, rules = "routing_key_case_folded", "routing", ("ROUTE-01", "ROUTE-03")
    description = "a publish's routing key is compared lower-cased (a broker folding case), so 'A' routes as 'a'"

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicPublish) and m.routing_key != m.routing_key.lower():
            io.record(self.name)
            io.to_broker(encode(frame.channel, m._replace(routing_key=m.routing_key.lower())))
            return
        io.to_broker(frame.raw)


class MandatoryIgnored(Deviation):
    name, area, rules = "mandatory_ignored", "routing", ("ROUTE-11", "ROUTE-12")
    description = "the mandatory flag is ignored: an unroutable mandatory publish is dropped, never returned"

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicPublish) and m.mandatory:
            io.record(self.name)
            io.to_broker(encode(frame.channel, m._replace(mandatory=False)))
            return
        io.to_broker(frame.raw)


class ExchangeBindReversed(Deviation):
    name, area, rules = "exchange_bind_reversed", "routing", ("ROUTE-09",)
    description = ("exchange.bind's source and destination are read the other way round (exchange.unbind's too): "
                   "an exchange-to-exchange binding routes from its destination to its source")

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, ExchangeBind | ExchangeUnbind) and m.source != m.destination:
            io.record(self.name)
            io.to_broker(encode(frame.channel, m._replace(source=m.destination, destination=m.source)))
            return
        io.to_broker(frame.raw)


class IfUnusedDropped(Deviation):
    name, area, rules = "if_unused_dropped", "exchanges", ("EXCH-06",)
    description = "exchange.delete's if-unused bit is not heard: an exchange in use is deleted"

    def client(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, ExchangeDelete) and m.if_unused:
            io.record(self.name)
            io.to_broker(encode(frame.channel, m._replace(if_unused=False)))
            return
        io.to_broker(frame.raw)


class DeclareOkCountsZero(Deviation):
    name, area, rules = "declare_ok_counts_zero", "queues", ("QUEUE-01", "QUEUE-03", "QUEUE-06")
    description = "queue.declare-ok always says 0 messages and 0 consumers"

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, QueueDeclareOk) and (m.message_count or m.consumer_count):
            io.record(self.name)
            io.to_client(encode(frame.channel, m._replace(message_count=0, consumer_count=0)))
            return
        io.to_client(frame.raw)
