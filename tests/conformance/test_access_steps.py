"""The access area's pure steps: another user's URL and RabbitMQ's refusal texts per profile."""

from __future__ import annotations

from codec.fast_tables import RABBITMQ_TABLES
from conformance.catalogue.profiles import resolve
from conformance.drivers.raw import BrokerAddress
from conformance.plugin.session import Target
from conformance.suite.access.test_access_sasl import amqplain, plain
from conformance.suite.steps.access import refusal, url_for


def test_url_for_quotes_user_password_and_vhost() -> None:
    url = url_for("amqp://guest:guest@127.0.0.1:5743/", "amqpc.acc.u", "p@ss/w:rd", "/")
    assert url == "amqp://amqpc.acc.u:p%40ss%2Fw%3Ard@127.0.0.1:5743/%2F"
    address = BrokerAddress.parse(url)
    assert (address.user, address.password, address.vhost, address.port) == ("amqpc.acc.u", "p@ss/w:rd", "/", 5743)
    assert BrokerAddress.parse(url_for(url, "u", "p", "made.v")).vhost == "made.v"


def _target(profile: str) -> Target:
    return Target("amqp://guest:guest@127.0.0.1:5672/", resolve(profile, {}), 1.0, "none", "raw", None)


def test_refusal_names_the_permission_from_3_12() -> None:
    assert refusal(_target("rabbitmq-4.3"), "ACC-02", "configure", "queue", "q", "u") == (
        "configure access to queue 'q' in vhost '/' refused for user 'u'")
    assert refusal(_target("rabbitmq-3.12"), "ACC-04", "read", "queue", "q", "u") == (
        "read access to queue 'q' in vhost '/' refused for user 'u'")
    assert refusal(_target("rabbitmq-3.10"), "ACC-03", "write", "exchange", "x", "u") == (
        "access to exchange 'x' in vhost '/' refused for user 'u'")


def test_sasl_responses() -> None:
    assert plain("u", "p") == b"\x00u\x00p"
    table, _end = RABBITMQ_TABLES.decode_table(len(amqplain("u", "p")).to_bytes(4, "big") + amqplain("u", "p"), 0)
    assert table == {"LOGIN": "u", "PASSWORD": "p"}
