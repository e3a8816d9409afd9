"""The client-library drivers in-process (no adapter): each is a `ClientDriver` and round-trips a message.

These are the drivers the broker-side suite can run through and the Python adapter
serves; here each one publishes with properties, consumes, settles, gets and confirms against
the scripted broker, and reports a broker channel close with its code.
"""

from __future__ import annotations

import pytest

from codec import BasicProperties
from conformance.client_judge.broker import ScriptedBroker
from conformance.drivers import interface as di
from conformance.drivers.adapter import load_driver
from conformance.drivers.library import library_version
from conformance.drivers.registry import REGISTRY, python_drivers
from tests.conftest import require


@pytest.mark.parametrize("client", sorted(python_drivers()))
def test_driver_round_trip_in_process(client: str) -> None:
    require(library_version(REGISTRY[client].package) != "not installed", f"{client} is not installed")
    driver = load_driver(client, timeout=5.0)
    assert isinstance(driver, di.ClientDriver)
    assert driver.info().client == client and driver.info().version == library_version(REGISTRY[client].package)
    with ScriptedBroker() as broker:
        try:
            driver.connect(broker.url)
            ch = driver.open_channel()
            assert driver.declare_queue(ch, "rt") == "rt"
            tag = driver.consume(ch, "rt")
            driver.publish(ch, "", "rt", b"hello", properties=BasicProperties(headers={"k": "v"}, priority=3))
            event = di.wait_event(driver, (di.Delivered,), 5.0)
            assert isinstance(event, di.Delivered)
            got = event.delivery
            assert (got.body, got.consumer_tag, got.properties.headers, got.properties.priority) == (
                b"hello", tag, {"k": "v"}, 3)
            driver.ack(ch, got.delivery_tag)
            driver.cancel(ch, tag)
            assert driver.get(ch, "rt") is None
            driver.confirm_select(ch)
            seq = driver.publish(ch, "", "rt", b"confirmed")
            confirm = di.wait_event(driver, (di.Confirmed,), 5.0)
            assert isinstance(confirm, di.Confirmed) and (confirm.seq, confirm.ack) == (seq, True)
            got_back = driver.get(ch, "rt", no_ack=True)
            assert got_back is not None and got_back.body == b"confirmed"
            other = driver.open_channel()
            code = None
            try:
                driver.declare_queue(other, "missing", passive=True)
            except di.ChannelClosed as exc:
                code = exc.code
            assert code == 404
            assert driver.state()["connection"] == "open"
        finally:
            driver.close()
