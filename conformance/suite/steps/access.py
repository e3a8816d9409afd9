"""Steps of the access area (ACC-*): the test's own users and vhosts, connecting as them, and
the 403 a refused operation gets.

Rules:
- A user (and a vhost) is made through the `admin` fixture (`RestoringAdmin`), which deletes it
  at teardown even when the test fails; its name is the test's own, so no other test sees it and
  the test runs beside the others (not `broker_wide`). Without --broker-admin the test is
  `needs-admin`.
- Names are "amqpc.acc.<label>.<hex>" (users and vhosts), passwords random: unique per test.
- Permission regexes are set explicitly; a resource is named with a label ("cfg", "wr", "rd",
  "none", ...) that the user's regexes match or do not (`Names.queue(label)` puts ".<label>."
  in the name).
- A refusal is awaited with a round trip that needs no permission (basic.qos), so a publish's
  asynchronous channel.close surfaces within the wait.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from codec import BasicProperties, BasicQos, BasicQosOk, Method, ReplyCode
from conformance.drivers.raw import BrokerAddress, ChannelClosed, RawClient
from conformance.plugin.session import Target
from conformance.run.restoring import RestoringAdmin

Connect = Callable[..., RawClient]
NONE = "^$"  # a regex that grants nothing RabbitMQ names (RabbitMQ treats "" the same)


@dataclass(frozen=True)
class Account:
    user: str
    password: str
    vhost: str
    url: str


def url_for(target_url: str, user: str, password: str, vhost: str) -> str:
    address = BrokerAddress.parse(target_url)
    host = f"[{address.host}]" if ":" in address.host else address.host
    return f"amqp://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{address.port}/{quote(vhost, safe='')}"


def unique(label: str) -> str:
    return f"amqpc.acc.{label}.{uuid.uuid4().hex[:8]}"


def account(admin: RestoringAdmin, target: Target, label: str, *, configure: str | None = ".*",
            write: str = ".*", read: str = ".*", vhost: str | None = None, tags: str = "") -> Account:
    """A new user with these permissions in `vhost` (the target's by default); configure=None:
    no permissions at all."""
    name, password = unique(label), secrets.token_hex(8)
    vhost = target.vhost if vhost is None else vhost
    admin.put_user(name, password, tags)
    if configure is not None:
        admin.set_permissions(vhost, name, configure, write, read)
    return Account(name, password, vhost, url_for(target.url, name, password, vhost))


def new_vhost(admin: RestoringAdmin) -> str:
    name = unique("vhost")
    admin.put_vhost(name)
    return name


def sync(client: RawClient, ch: int) -> None:
    """A round trip no permission governs."""
    client.rpc(ch, BasicQos(0, 0, False), BasicQosOk)


def refused_403(client: RawClient, ch: int, method: Method, text: str, what: str, *,
                reply: type | tuple[type, ...] | None = None, props: BasicProperties | None = None) -> None:
    """`method` on `ch` is channel.close 403 with RabbitMQ's `text` (after "ACCESS_REFUSED - ")
    and the method's class/method id."""
    expect_closed(client, ch, method, ReplyCode.ACCESS_REFUSED, f"ACCESS_REFUSED - {text}", what, reply=reply, props=props)


def expect_closed(client: RawClient, ch: int, method: Method, code: int, text: str, what: str, *,
                  reply: type | tuple[type, ...] | None = None, props: BasicProperties | None = None) -> None:
    """`method` (answered by `reply`, or none) closes `ch` with `code` and exactly `text`."""
    try:
        if method.HAS_CONTENT:
            client.send(ch, method, props or BasicProperties(), b"m")
        elif reply is not None:
            client.rpc(ch, method, *(reply if isinstance(reply, tuple) else (reply,)))
        else:
            client.send(ch, method)
        sync(client, ch)
    except ChannelClosed as closed:
        got = closed
    else:
        raise AssertionError(f"{what}: want channel.close {code} ({method.CLASS_ID}/{method.METHOD_ID}); "
                             f"the broker accepted {method.NAME}")
    assert (got.code, got.class_id, got.method_id) == (code, method.CLASS_ID, method.METHOD_ID), (
        f"{what}: want channel.close {code} ({method.CLASS_ID}/{method.METHOD_ID}), the broker sent {got}")
    assert got.text == text, f"{what}: want the text {text!r}, the broker sent {got.text!r}"


def allowed(client: RawClient, ch: int, method: Method, reply: type, what: str) -> None:
    try:
        client.rpc(ch, method, reply)
    except ChannelClosed as closed:
        raise AssertionError(f"{what}: the user has the permission it needs; the broker closed the channel: "
                             f"{closed}") from None


def published(client: RawClient, ch: int, method: Method, what: str, props: BasicProperties | None = None) -> None:
    """A publish the user may make: no channel.close within a round trip."""
    client.send(ch, method, props or BasicProperties(), b"m")
    try:
        sync(client, ch)
    except ChannelClosed as closed:
        raise AssertionError(f"{what}: the user has the permission it needs; the broker closed the channel: "
                             f"{closed}") from None


UNNAMED = "the 403 text does not name the permission"  # the variant of 3.10 (3.12.0 added the name)


def refusal(target: Target, rule: str, kind: str, resource: str, name: str, user: str) -> str:
    """rabbit_access_control check_resource_access's text (rabbit_misc:rs): "<kind> access to
    <resource> '<name>' in vhost '<v>' refused for user '<u>'", without "<kind> " where the
    rule's variant says so (3.10)."""
    named = "" if UNNAMED in target.profile.expect(rule) else f"{kind} "
    return f"{named}access to {resource} '{name}' in vhost '{target.vhost}' refused for user '{user}'"
