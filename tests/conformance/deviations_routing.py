"""The routing deviations `DeviantProxy` can apply (`deviations.DEVIATIONS` lists them with the others).

Both are client-side rewrites of basic.publish: the broker mis-hears the publish, so the client,
which believes it sent the original, sees the routing of another message.
"""

from __future__ import annotations

from codec import BasicPublish
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
