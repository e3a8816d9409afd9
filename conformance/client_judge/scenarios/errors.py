"""Scenarios: the broker closes a channel or the connection (CL-ERR).

Channel closes come from the engine itself (passive declare of a missing queue: 404; ack of an
unknown tag: 406; declaring an "amq." exchange: 403); connection closes are sent the way an
operator's close is (320) or a framing error's would be (501). Each checks the client's
close-ok on the wire, what the application was told, and what is usable afterwards. A refused
login (CL-AUTH-01) is the engine's own (a wrong password, ACC-06).
"""

from __future__ import annotations

from collections.abc import Callable

from codec import ChannelCloseOk, ChannelOpen, ConnectionCloseOk, ConnectionStartOk
from codec.constants import ReplyCode
from conformance.client_judge.scenario import Play, ScenarioFailed, scenario
from conformance.drivers import interface as di


def _reported_code(p: Play, run: Callable[[], object], scope: type[di.Closed], event: type) -> int | None:
    """The reply code the application learnt: from the operation's outcome, else from an event."""
    try:
        run()
    except scope as exc:
        return exc.code
    except di.NoReply:
        raise
    except di.DriverError as exc:  # refused as closed: the application learnt the code from a callback, if at all
        kind = getattr(exc, "library_error", type(exc).__name__)
        try:
            return p.event(event, timeout=0.5, what=f"{event.KIND} notice").code  # type: ignore[attr-defined,no-any-return]
        except ScenarioFailed:
            raise ScenarioFailed(f"the operation failed with {kind} ({exc}) and the application was never told "
                                 "the broker's reply code") from None
    found = p.event(event, what=f"{event.KIND} notice")  # type: ignore[attr-defined]
    return found.code  # type: ignore[no-any-return]


def _channel_closed(p: Play, code: int, provoke: Callable[[int], object]) -> None:
    p.connect()
    ch, other = p.client.open_channel(), p.client.open_channel()
    reported = _reported_code(p, lambda: provoke(ch), di.ChannelClosed, di.ChannelClosedEvent)
    close_ok_at = p.sent_at(ChannelCloseOk)
    p.expect(reported == code, f"the application was told {reported}, the broker closed the channel with {code}")
    try:
        p.client.publish(ch, "", "q", b"on a closed channel")
        p.client.declare_queue(ch, "q")
    except di.NoReply:
        raise
    except di.DriverError:
        pass  # refused by the client: right
    after = [f.frame for f in p.broker.frames[close_ok_at:] if f.direction == "in" and f.channel == ch]
    reopened = bool(after) and isinstance(getattr(after[0], "method", None), ChannelOpen)
    p.expect(not after or reopened, f"the client sent {len(after)} frame(s) on channel {ch} after its close-ok, "
                                    "without opening it again")
    p.expect(p.client.declare_queue(other, "q2") == "q2", "another channel was unusable after the close")
    p.alive("a channel.close")


@scenario("channel-close-404", ("CL-ERR-01",), "channel.close 404 (passive declare of a missing queue)",
          smoke=True)
def channel_close_404(p: Play) -> None:
    _channel_closed(p, ReplyCode.NOT_FOUND, lambda ch: p.client.declare_queue(ch, "missing", passive=True))


@scenario("channel-close-406", ("CL-ERR-01",), "channel.close 406 (ack of an unknown delivery tag)")
def channel_close_406(p: Play) -> None:
    def ack_unknown(ch: int) -> None:
        p.client.ack(ch, 99)
        p.client.declare_queue(ch, "probe")  # the close reaches a synchronous operation, if no callback

    _channel_closed(p, ReplyCode.PRECONDITION_FAILED, ack_unknown)


@scenario("channel-close-403", ("CL-ERR-01",), "channel.close 403 (declaring a reserved amq. exchange)")
def channel_close_403(p: Play) -> None:
    _channel_closed(p, ReplyCode.ACCESS_REFUSED,
                    lambda ch: p.client.declare_exchange(ch, "amq.reserved", "direct"))


def _connection_closed(p: Play, code: int, text: str) -> None:
    conn = p.connect()
    ch = p.client.open_channel()
    p.broker.close_connection(conn, code, text)
    close_ok_at = p.sent_at(ConnectionCloseOk)
    try:  # a close callback, else the next operation's outcome
        reported = p.event(di.ConnectionClosedEvent, what="connection close notice").code
    except ScenarioFailed:
        reported = _reported_code(p, lambda: p.client.declare_queue(ch, "q"), di.ConnectionClosed,
                                  di.ConnectionClosedEvent)
    p.expect(reported == code, f"the application was told {reported}, the broker closed the connection with {code}")
    p.expect(p.client.state().get("connection") != "open", "the client still calls the closed connection open")
    after = [f for f in p.broker.frames[close_ok_at:] if f.direction == "in"]
    p.expect(not after, f"the client sent {len(after)} frame(s) after connection.close-ok")


@scenario("connection-close-320", ("CL-ERR-02",), "connection.close 320 CONNECTION_FORCED", smoke=True)
def connection_close_320(p: Play) -> None:
    _connection_closed(p, ReplyCode.CONNECTION_FORCED,
                       "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")


@scenario("connection-close-501", ("CL-ERR-02",), "connection.close 501 FRAME_ERROR")
def connection_close_501(p: Play) -> None:
    _connection_closed(p, ReplyCode.FRAME_ERROR,
                       "FRAME_ERROR - type 206, all octets = <<>>: {frame_too_large,200000,131064}")


@scenario("login-refused", ("CL-AUTH-01",), "a refused login is a failed connection attempt, with the 403 when asked for")
def login_refused(p: Play) -> None:
    """The password is wrong: the broker refuses the login with connection.close 403 (0/0) to a
    client advertising authentication_failure_close, and ends the socket otherwise (ACC-06)."""
    url = p.broker.url.replace("guest:guest@", "guest:not-the-password@", 1)
    try:
        p.client.connect(url, di.ConnectOptions())
    except di.NoReply:
        raise ScenarioFailed("the client did not report the refused login: connect() got no outcome within its "
                             "bound") from None
    except di.DriverError as exc:
        failure: di.DriverError | None = exc
    else:
        failure = None
    start_ok = p.sent(ConnectionStartOk)
    caps = dict(start_ok.client_properties).get("capabilities") or {}
    asked = caps.get("authentication_failure_close") is True
    p.expect(failure is not None, "the broker refused the login "
             f"({'connection.close 403' if asked else 'the socket ended'}); connect() succeeded")
    if asked:
        told = [repr(failure), *(f"{e.code} {e.text}" for e in p.settle() if isinstance(e, di.ConnectionClosedEvent))]
        p.expect(getattr(failure, "code", None) == ReplyCode.ACCESS_REFUSED or any(_names_auth(t) for t in told),
                 "the client advertised authentication_failure_close and the broker refused the login with "
                 f"connection.close 403; the application was told {'; '.join(told)}: neither the reply code nor "
                 "an authentication failure")
    p.expect(p.client.state().get("connection") != "open", "the client calls the refused connection open")


def _names_auth(told: str) -> bool:
    """The library's report says the login was refused (its 403, ACCESS_REFUSED or an authentication error)."""
    lowered = told.lower()
    return "403" in told or "access_refused" in lowered or "access-refused" in lowered or "authentication" in lowered
