"""The deviations of connections and access that `DeviantProxy` can apply (`deviations.DEVIATIONS`
lists them with the others): a broker that reports a refused permission as something else, one
that never hears the user-id a publisher set (so never checks it), and one whose connection.blocked
and connection.unblocked never reach the client."""

from __future__ import annotations

from codec import ChannelClose, ConnectionBlocked, ConnectionUnblocked, ReplyCode
from conformance.interpose.frames import Frame
from tests.conformance.deviant import Deviation, Io, encode
from tests.conformance.deviations_lifecycle import header_of, rewritten


class AccessRefusedAsNotFound(Deviation):
    name, area, rules = "access_refused_as_not_found", "access", ("ACC-02", "ACC-03", "ACC-04", "ACC-05")
    description = "a refused permission closes the channel with 404 NOT_FOUND instead of 403 ACCESS_REFUSED"

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, ChannelClose) and m.reply_code == ReplyCode.ACCESS_REFUSED:
            io.record(self.name)
            text = m.reply_text.replace("ACCESS_REFUSED", "NOT_FOUND", 1)
            io.to_client(encode(frame.channel, m._replace(reply_code=ReplyCode.NOT_FOUND, reply_text=text)))
            return
        io.to_client(frame.raw)


class UserIdUnheard(Deviation):
    name, area, rules = "user_id_unheard", "access", ("ACC-07",)
    description = "a publish's user-id property is removed on the way: the broker never checks it"

    def client(self, frame: Frame, io: Io) -> None:
        header = header_of(frame)
        if header is not None and header.properties is not None and header.properties.user_id is not None:
            io.record(self.name)
            io.to_broker(rewritten(header, user_id=None))
            return
        io.to_broker(frame.raw)


class BlockedSwallowed(Deviation):
    name, area, rules = "blocked_swallowed", "alarms", ("ALM-01", "ALM-03")
    description = "connection.blocked and connection.unblocked never reach the client"

    def broker(self, frame: Frame, io: Io) -> None:
        if isinstance(frame.method, ConnectionBlocked | ConnectionUnblocked):
            io.record(self.name)
            return  # dropped: the client never learns it is blocked
        io.to_client(frame.raw)
