"""Reply codes through client libraries that hide them
(conformance/suite/through_clients/recorded_replies.py).

The through-client checks of a reply code (ACK-03's channel.close 406, PC-06's basic.return 312,
conformance/suite/through_clients/test_through_clients.py) assert the exact code; where the library does not show
it they read the code the broker sent from the relay's recorded frames. Shown here: each check
fails a broker that sends the wrong code (the proxy deviations codes_404_406_swapped and
return_code_313), naming its rule, through the library's own view and through a view without
codes (aio-pika's basic.return hides its code; `CodeHiding` hides every code of a real library);
the same checks pass the reference broker and RabbitMQ 3.10.8; and a gate run through aio-pika
fails PC-06 on a basic.return that says 313, both the suite test and the confirms machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from codec import BasicReturn
from conformance.catalogue.profiles import Profile
from conformance.drivers.adapter import load_driver
from conformance.drivers.interface import (
    ChannelClosedEvent,
    ClientDriver,
    Closed,
    ConnectionClosedEvent,
    Recorder,
    Returned,
)
from conformance.drivers.raw import BrokerAddress
from conformance.drivers.relay import recording_relay
from conformance.interpose.frames import Frame
from conformance.plugin.session import Names, Target
from conformance.plugin.through_clients import relayed
from conformance.suite.through_clients import test_through_clients as suite
from reference_broker.server import EmbeddedBroker
from tests.conformance.deviant import DeviantProxy, Deviation, Io, encode
from tests.conformance.deviations import Codes404And406Swapped
from tests.conformance.test_cli_rabbitmq import rabbitmq  # noqa: F401  (fixture)
from tests.conformance.test_through_clients import _run

LIBRARIES = ("pika", "amqp", "aio-pika")
HIDDEN = "(read from the recorded frames: the library does not show it)"


class ReturnCode313(Deviation):
    """basic.return of an unroutable mandatory publish says 313 NO_CONSUMERS, not 312 NO_ROUTE."""

    name, area, rules = "return_code_313", "confirms", ("PC-06",)

    def broker(self, frame: Frame, io: Io) -> None:
        m = frame.method
        if isinstance(m, BasicReturn) and m.reply_code == 312:
            io.record(self.name)
            io.to_client(encode(frame.channel, m._replace(reply_code=313)))
            return
        io.to_client(frame.raw)


class CodeHiding:
    """A real library's driver whose application sees no reply code: a close raises with code 0,
    a channel or connection close event and a basic.return carry None."""

    def __init__(self, driver: ClientDriver) -> None:
        self.driver = driver

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.driver, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = attribute(*args, **kwargs)
            except Closed as exc:
                raise dataclasses.replace(exc, code=0) from None
            if isinstance(result, ChannelClosedEvent | ConnectionClosedEvent):
                return dataclasses.replace(result, code=None)
            return dataclasses.replace(result, reply_code=None) if isinstance(result, Returned) else result

        return call


# the suite's checks of a reply code, called as pytest would call them under `--client`
CHECKS: dict[str, Callable[..., None]] = {
    "ACK-03": suite.test_an_unknown_tag_closes_the_channel_406,
    "PC-06": suite.test_an_unroutable_mandatory_publish_is_returned_then_confirmed,
}
WRONG = {"ACK-03": (Codes404And406Swapped, r"^ACK-03: .* closed the channel with 404\b"),
         "PC-06": (ReturnCode313, r"^PC-06: basic\.return reply code 313\b")}


@contextlib.contextmanager
def _fixtures(library: str, url: str, hide: bool) -> Iterator[dict[str, Any]]:
    """The fixtures a through-client check takes (the `client` fixture's relay and recorder)."""
    address, recorder, drivers = BrokerAddress.parse(url), Recorder(), []
    with recording_relay(address.host, address.port, recorder) as relay:
        def client() -> Any:
            driver: ClientDriver = load_driver(library, 5.0)
            driver.connect(relayed(url, relay.port))
            drivers.append(driver)
            return CodeHiding(driver) if hide else driver

        target = Target(url, Profile("rabbitmq-3.10"), 1.0, "none", library)
        try:
            yield {"client": client, "names": Names("amqpc.replies"), "target": target, "recorder": recorder}
        finally:
            for driver in drivers:
                driver.close()


def _check(rule: str, library: str, url: str, hide: bool) -> None:
    with _fixtures(library, url, hide) as fixtures:
        CHECKS[rule](**fixtures)


@pytest.mark.parametrize("hide", [False, True], ids=["shown", "hidden"])
@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("rule", sorted(CHECKS))
def test_a_wrong_reply_code_fails_its_check_even_when_the_library_hides_it(rule: str, library: str,
                                                                           hide: bool) -> None:
    deviation, message = WRONG[rule]
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), deviation) as proxy, \
            pytest.raises(AssertionError) as failed:
        _check(rule, library, proxy.url, hide)
    text = str(failed.value)
    assert re.search(message, text), text
    hidden = hide or (rule == "PC-06" and library == "aio-pika")  # aio-pika shows no basic.return code
    assert (HIDDEN in text) == hidden, text
    assert deviation.name in proxy.actions


@pytest.mark.parametrize("hide", [False, True], ids=["shown", "hidden"])
@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("rule", sorted(CHECKS))
def test_the_reply_code_checks_pass_the_reference_broker(rule: str, library: str, hide: bool) -> None:
    with EmbeddedBroker() as broker:
        _check(rule, library, broker.url, hide)


@pytest.mark.rabbitmq
@pytest.mark.parametrize("hide", [False, True], ids=["shown", "hidden"])
@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("rule", sorted(CHECKS))
def test_the_reply_code_checks_pass_rabbitmq(rule: str, library: str, hide: bool, rabbitmq: str) -> None:  # noqa: F811
    _check(rule, library, rabbitmq, hide)


@pytest.mark.end_to_end  # a whole run as a subprocess: `make test-end-to-end`
def test_a_gate_run_through_aio_pika_fails_pc06_on_a_return_code_it_does_not_show(tmp_path: Path) -> None:
    with EmbeddedBroker() as broker, DeviantProxy((broker.host, broker.port), ReturnCode313) as proxy:
        status, output, tests = _run(tmp_path, "--client", "aio-pika", "--select", "PC-06",
                                     "--broker-url", proxy.url)
    assert status == 1, output[-3000:]
    check = tests["test_an_unroutable_mandatory_publish_is_returned_then_confirmed"]
    assert check[0] == "failed" and f"PC-06: basic.return reply code 313 {HIDDEN}" in check[1], check
    machine = tests["test_confirms_through_the_client_match_the_model"]  # its returns are read the same way
    assert machine[0] == "failed" and re.search(r"Return\(reply_code=313\b.*\(PC-06\)", machine[1]), machine
    assert ReturnCode313.name in proxy.actions
