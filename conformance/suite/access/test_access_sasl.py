"""SASL login and loopback users over the wire: ACC-06 (the Java client's functional/SaslMechanisms
and server/Permissions.auth) and ACC-08 (server/LoopbackUsers).

Rules:
- They log in as the run's own user (the URL's); none needs --broker-admin.
- Refused handshakes are driven by hand (`handshakes`, all at once: RabbitMQ ends a refused one
  only after 3 s, so they cost that once: ?NORMAL_TIMEOUT for a login refused in `starting`, as a
  wrong PLAIN password is, ?SILENT_CLOSE_DELAY in `securing` and for other handshake errors;
  rabbit_reader v3.10.8 l. 55/61, v4.3.5 l. 60/66); each waits up to the scaled client timeout
  (6 s), longer than that delay.
- "Ends the socket with no connection.close": the handshake saw neither connection.tune nor
  connection.close, and the socket ended (EOF or reset) within the wait.
- ACC-08 judges the refused side only where the broker answers on a non-loopback address of
  this machine (found with a UDP socket's source address, no packet sent); else only the
  accepted side, and the test says so in its output.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from codec import ConnectionStartOk, ReplyCode
from codec.fast_tables import RABBITMQ_TABLES
from conformance.drivers.raw import BrokerAddress, RawClient, Recorder
from conformance.plugin.session import Target
from conformance.plugin.verdicts import not_applicable
from conformance.suite.steps.access import url_for
from conformance.suite.steps.beside import NEVER_PUBLISHES
from conformance.suite.steps.wire import Handshake, handshakes

REFUSED = "ACCESS_REFUSED - Login was refused using authentication mechanism {}. For details see the broker logfile."
WAIT = 6.0  # s (scaled): above RabbitMQ's 3 s before it ends a refused handshake


def amqplain(user: str, password: str) -> bytes:
    """An AMQPLAIN response: a field table without its length prefix."""
    return RABBITMQ_TABLES.encode_table({"LOGIN": user, "PASSWORD": password})[4:]


def start_ok(mechanism: str, response: bytes, *, capability: bool = True) -> ConnectionStartOk:
    caps: dict[str, Any] = {"authentication_failure_close": True} if capability else {}
    return ConnectionStartOk({"product": "amqp-conformance", "capabilities": caps}, mechanism, response, "en_US")


def plain(user: str, password: str) -> bytes:
    return f"\x00{user}\x00{password}".encode()


def offered(target: Target, recorder: Recorder) -> list[str]:
    """The mechanisms connection.start offers."""
    with RawClient(target.url, recorder=recorder, timeout=target.timeout(5.0)) as client:
        return client.mechanisms


def assert_silent_end(result: Handshake, what: str) -> None:
    assert result.close is None and result.tune is None and not result.open_ok, (
        f"ACC-06: {what}: the broker ends the socket with no connection.close; it sent "
        f"{result.close or result.tune or 'connection.open-ok'}")
    assert result.ended is not None, f"ACC-06: {what}: the socket did not end within the wait"


def assert_refused(result: Handshake, mechanism: str, what: str, rule: str = "ACC-06") -> None:
    close = result.close
    assert close is not None, (f"{rule}: {what}: want connection.close 403 (0/0) for a client with "
                               "authentication_failure_close; the broker "
                               f"{'ended the socket' if result.ended else 'sent ' + str(result.tune)}")
    assert (close.reply_code, close.class_id, close.method_id) == (ReplyCode.ACCESS_REFUSED, 0, 0), (
        f"{rule}: {what}: want connection.close 403 (0/0), got {close}")
    want = REFUSED.format(mechanism)
    assert close.reply_text == want, f"{rule}: {what}: want the text {want!r}, got {close.reply_text!r}"


@pytest.mark.rules("ACC-06")
def test_plain_and_amqplain_log_in(target: Target, recorder: Recorder) -> None:
    address = BrokerAddress.parse(target.url)
    mechanisms = offered(target, recorder)
    assert {"PLAIN", "AMQPLAIN"} <= set(mechanisms), f"ACC-06: connection.start offers PLAIN and AMQPLAIN; it offered {mechanisms}"
    anonymous = target.profile.expect("ACC-06") == "required"  # 4.0+
    assert ("ANONYMOUS" in mechanisms) == anonymous, (
        f"ACC-06: ANONYMOUS is offered {'from 4.0' if anonymous else 'only from 4.0'}; the broker offered {mechanisms}")
    results = handshakes(target.url, recorder, target.timeout(WAIT), [
        {"start_ok": start_ok("PLAIN", plain(address.user, address.password))},
        {"start_ok": start_ok("AMQPLAIN", amqplain(address.user, address.password))},
        *([{"start_ok": start_ok("ANONYMOUS", b"")}] if anonymous else [])])
    for result, mechanism in zip(results, ["PLAIN", "AMQPLAIN", "ANONYMOUS"], strict=False):
        assert result.open_ok, f"ACC-06: a {mechanism} login with the right credentials opens the connection; got {result}"


@pytest.mark.beside_broker_wide(NEVER_PUBLISHES)
@pytest.mark.long_wait(3)  # RabbitMQ's 3 s before it ends a refused login, once (the handshakes run at once)
@pytest.mark.rules("ACC-06")
def test_refused_logins(target: Target, recorder: Recorder) -> None:
    """A wrong password or an unknown user: 403 with the capability, a silent end without it;
    an unknown mechanism and an unparsable response: a silent end."""
    address = BrokerAddress.parse(target.url)
    cases = {
        "PLAIN, wrong password": (start_ok("PLAIN", plain(address.user, address.password + "x")), "PLAIN"),
        "AMQPLAIN, wrong password": (start_ok("AMQPLAIN", amqplain(address.user, address.password + "x")), "AMQPLAIN"),
        "PLAIN, unknown user": (start_ok("PLAIN", plain("amqpc.nobody", "x")), "PLAIN"),
        "PLAIN, wrong password, no authentication_failure_close": (
            start_ok("PLAIN", plain(address.user, address.password + "x"), capability=False), None),
        "PLAIN, unknown user, no authentication_failure_close": (
            start_ok("PLAIN", plain("amqpc.nobody", "x"), capability=False), None),
        "mechanism FOO": (start_ok("FOO", plain(address.user, address.password)), None),
        "PLAIN, unparsable response": (start_ok("PLAIN", b"garbage"), None),
    }
    results = handshakes(target.url, recorder, target.timeout(WAIT), [{"start_ok": case} for case, _ in cases.values()])
    for (what, (_case, mechanism)), result in zip(cases.items(), results, strict=True):
        if mechanism is None:
            assert_silent_end(result, what)
        else:
            assert_refused(result, mechanism, what)


# -- ACC-08: loopback users ----------------------------------------------------------------------
def non_loopback_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))  # TEST-NET-2: routed, never sent to
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.mark.long_wait(3)
@pytest.mark.rules("ACC-08")
def test_guest_logs_in_from_loopback_only(target: Target, recorder: Recorder) -> None:
    address = BrokerAddress.parse(target.url)
    if address.user != "guest" or address.host not in ("127.0.0.1", "localhost", "::1"):
        not_applicable("ACC-08 is judged with guest over a loopback address (the run's URL names "
                       f"{address.user!r} at {address.host})")
    [local] = handshakes(target.url, recorder, target.timeout(WAIT), [{}])
    assert local.open_ok, f"ACC-08: guest logs in over the loopback address {address.host}; got {local}"
    remote = non_loopback_address()
    reachable = False
    if remote is not None:
        try:
            socket.create_connection((remote, address.port), timeout=target.timeout(2.0)).close()
            reachable = True
        except OSError:
            pass
    if not reachable:
        print(f"ACC-08: the broker does not answer on a non-loopback address ({remote}): only the accepted side is judged")
        return
    [refused] = handshakes(url_for(target.url.replace(address.host, str(remote), 1), address.user, address.password,
                                   address.vhost), recorder, target.timeout(WAIT), [{}])
    assert_refused(refused, "PLAIN", f"guest over the non-loopback address {remote}", "ACC-08")
