"""Vhost access and the configure / write / read permissions over the wire: ACC-01..04 (the Java
client's server/Permissions tests).

Rules:
- Each test makes its own user (and vhost) through --broker-admin (`needs-admin` without it),
  deleted at teardown; the resources it is refused on are declared by the run's own user, and
  named so the user's regexes match them or not (".cfg.", ".wr.", ".rd.", ".none.").
- A refusal is channel.close 403 with the method's class/method id and RabbitMQ's exact text
  (`refusal`), awaited with a basic.qos round trip; an allowed operation is answered.
- A refused channel is replaced by a new one for the next case.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from codec import (
    BasicConsume,
    BasicConsumeOk,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicPublish,
    ExchangeBind,
    ExchangeBindOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
    QueueUnbind,
    QueueUnbindOk,
    ReplyCode,
)
from conformance.drivers.raw import BrokerAddress, ChannelClosed, ConnectionClosed, RawClient
from conformance.plugin.session import Names, Target
from conformance.run.restoring import RestoringAdmin
from conformance.suite.steps.access import (
    NONE,
    Connect,
    account,
    allowed,
    new_vhost,
    published,
    refusal,
    refused_403,
    unique,
    url_for,
)

# the permissions most tests give: configure, write and read each on its own label
CFG, WR, RD = r"\.cfg\.", r"\.wr\.", r"\.rd\."


def declared(connect: Connect, names: Names, *labels: str, exchange_type: str = "fanout") -> dict[str, str]:
    """Queues (labels without "x") and exchanges (labels starting "x") the run's user declares."""
    client = connect()
    ch = client.channel()
    made = {}
    for label in labels:
        if label.startswith("x"):
            name = made[label] = names.exchange(label[1:])
            client.rpc(ch, ExchangeDeclare(exchange=name, exchange_type=exchange_type, auto_delete=False), ExchangeDeclareOk)
        else:
            name = made[label] = names.queue(label)
            client.rpc(ch, QueueDeclare(queue=name), QueueDeclareOk)
    return made


# -- ACC-01: vhost access ---------------------------------------------------------------------------
def _refused_open(connect: Connect, url: str, text: str, what: str) -> None:
    with pytest.raises(ConnectionClosed) as closed:
        connect(url=url)
    got = closed.value
    assert (got.code, got.class_id, got.method_id) == (ReplyCode.NOT_ALLOWED, 10, 40), (
        f"{what}: want connection.close 530 (10/40) at connection.open, the broker sent {got}")
    assert got.text == text, f"{what}: want the text {text!r}, the broker sent {got.text!r}"


@pytest.mark.rules("ACC-01")
def test_a_vhost_without_permissions_is_refused(admin: RestoringAdmin, connect: Connect, target: Target) -> None:
    vhost = new_vhost(admin)
    user = account(admin, target, "vhost", vhost=vhost)
    connect(url=user.url)  # its own vhost opens
    _refused_open(connect, url_for(target.url, user.user, user.password, target.vhost),
                  f"NOT_ALLOWED - access to vhost '{target.vhost}' refused for user '{user.user}'",
                  f"connection.open of {target.vhost!r}, where {user.user} has no permissions")


@pytest.mark.rules("ACC-01")
def test_a_user_without_any_permissions_opens_no_vhost(admin: RestoringAdmin, connect: Connect,
                                                       target: Target) -> None:
    user = account(admin, target, "noperm", configure=None)
    _refused_open(connect, user.url, f"NOT_ALLOWED - access to vhost '{target.vhost}' refused for user '{user.user}'",
                  f"connection.open by {user.user}, a user with no permissions at all")


@pytest.mark.rules("ACC-01")
def test_an_unknown_vhost_is_refused(connect: Connect, target: Target) -> None:
    address = BrokerAddress.parse(target.url)
    vhost = unique("missing")
    _refused_open(connect, url_for(target.url, address.user, address.password, vhost),
                  f"NOT_ALLOWED - vhost {vhost} not found", f"connection.open of the vhost {vhost!r}, which does not exist")


# -- ACC-02: configure ----------------------------------------------------------------------------------
def _user_client(connect: Connect, admin: RestoringAdmin, target: Target, label: str, **regexes: str) -> tuple[RawClient, str]:
    user = account(admin, target, label, **regexes)
    return connect(url=user.url), user.user


@pytest.mark.rules("ACC-02")
def test_queue_declare_and_delete_need_configure(admin: RestoringAdmin, connect: Connect, names: Names,
                                                 target: Target) -> None:
    theirs = declared(connect, names, "rd")
    client, user = _user_client(connect, admin, target, "qcfg", configure=CFG, write=WR, read=RD)
    ch = client.channel()
    own = names.queue("cfg")
    allowed(client, ch, QueueDeclare(queue=own), QueueDeclareOk, f"queue.declare of {own} (configure matches)")
    for label in ("wr", "rd", "none"):
        name = names.queue(label)
        refused_403(client, ch, QueueDeclare(queue=name), refusal(target, "ACC-02", "configure", "queue", name, user),
                    f"queue.declare of {name}: {user} may configure only {CFG}", reply=QueueDeclareOk)
        ch = client.channel()
    refused_403(client, ch, QueueDelete(queue=theirs["rd"]), refusal(target, "ACC-02", "configure", "queue", theirs["rd"], user),
                f"queue.delete of {theirs['rd']}: {user} may configure only {CFG}", reply=QueueDeleteOk)
    ch = client.channel()
    allowed(client, ch, QueueDelete(queue=own), QueueDeleteOk, f"queue.delete of {own} (configure matches)")


@pytest.mark.rules("ACC-02")
def test_a_server_named_queue_needs_configure_on_its_generated_name(admin: RestoringAdmin, connect: Connect,
                                                                    target: Target) -> None:
    client, user = _user_client(connect, admin, target, "gen", configure=CFG, write=WR, read=RD)
    ch = client.channel()
    with pytest.raises(ChannelClosed) as closed:
        client.rpc(ch, QueueDeclare(queue="", exclusive=True), QueueDeclareOk)
    got = closed.value
    text = "ACCESS_REFUSED - " + refusal(target, "ACC-02", "configure", "queue", "\0", user)
    before, after = text.split("\0")
    pattern = re.escape(before + "amq.gen-") + r"[A-Za-z0-9_-]+" + re.escape(after)
    assert (got.code, got.class_id, got.method_id) == (ReplyCode.ACCESS_REFUSED, 50, 10) and re.fullmatch(pattern, got.text), (
        f"queue.declare of a server-named queue by {user} (configure {CFG}): want 403 (50/10) naming the "
        f"generated amq.gen- queue, the broker sent {got}")
    everyone, _user = _user_client(connect, admin, target, "genall")
    ok = everyone.rpc(everyone.channel(), QueueDeclare(queue="", exclusive=True), QueueDeclareOk).method
    assert isinstance(ok, QueueDeclareOk) and ok.queue.startswith("amq.gen-"), ok


@pytest.mark.rules("ACC-02")
def test_exchange_declare_and_delete_need_configure(admin: RestoringAdmin, connect: Connect, names: Names,
                                                    target: Target) -> None:
    theirs = declared(connect, names, "xrd")
    client, user = _user_client(connect, admin, target, "xcfg", configure=CFG, write=WR, read=RD)
    ch = client.channel()
    own = names.exchange("cfg")
    allowed(client, ch, ExchangeDeclare(exchange=own, exchange_type="fanout"), ExchangeDeclareOk,
            f"exchange.declare of {own} (configure matches)")
    for label in ("wr", "rd", "none"):
        name = names.exchange(label)
        refused_403(client, ch, ExchangeDeclare(exchange=name, exchange_type="fanout"),
                    refusal(target, "ACC-02", "configure", "exchange", name, user),
                    f"exchange.declare of {name}: {user} may configure only {CFG}", reply=ExchangeDeclareOk)
        ch = client.channel()
    refused_403(client, ch, ExchangeDelete(exchange=theirs["xrd"]),
                refusal(target, "ACC-02", "configure", "exchange", theirs["xrd"], user),
                f"exchange.delete of {theirs['xrd']}: {user} may configure only {CFG}", reply=ExchangeDeleteOk)
    ch = client.channel()
    allowed(client, ch, ExchangeDelete(exchange=own), ExchangeDeleteOk, f"exchange.delete of {own} (configure matches)")


@pytest.mark.rules("ACC-02")
def test_a_dead_letter_exchange_needs_read_on_the_queue_and_write_on_it(admin: RestoringAdmin, connect: Connect,
                                                                        names: Names, target: Target) -> None:
    dlx_ok, dlx_no = names.exchange("dlxw"), names.exchange("dlxn")
    client, user = _user_client(connect, admin, target, "dlx", configure=r"\.(q|qnr)\.", write=r"\.dlxw\.",
                                read=r"\.q\.")
    ch = client.channel()
    good = names.queue("q")
    allowed(client, ch, QueueDeclare(queue=good, arguments={"x-dead-letter-exchange": dlx_ok}), QueueDeclareOk,
            f"queue.declare of {good} with x-dead-letter-exchange {dlx_ok} (configure and read on it, write on the DLX)")
    unread = names.queue("qnr")
    refused_403(client, ch, QueueDeclare(queue=unread, arguments={"x-dead-letter-exchange": dlx_ok}),
                refusal(target, "ACC-02", "read", "queue", unread, user),
                f"queue.declare of {unread} with a DLX: {user} may not read the queue", reply=QueueDeclareOk)
    ch = client.channel()
    other = names.queue("q")
    refused_403(client, ch, QueueDeclare(queue=other, arguments={"x-dead-letter-exchange": dlx_no}),
                refusal(target, "ACC-02", "write", "exchange", dlx_no, user),
                f"queue.declare of {other} with x-dead-letter-exchange {dlx_no}: {user} may not write it",
                reply=QueueDeclareOk)


@pytest.mark.rules("ACC-02")
def test_an_alternate_exchange_needs_read_on_the_exchange_and_write_on_it(admin: RestoringAdmin, connect: Connect,
                                                                          names: Names, target: Target) -> None:
    ae_ok, ae_no = names.exchange("aew"), names.exchange("aen")
    client, user = _user_client(connect, admin, target, "ae", configure=r"\.(x|xnr)\.", write=r"\.aew\.",
                                read=r"\.x\.")
    ch = client.channel()
    good = names.exchange("x")
    allowed(client, ch, ExchangeDeclare(exchange=good, exchange_type="fanout", arguments={"alternate-exchange": ae_ok}),
            ExchangeDeclareOk, f"exchange.declare of {good} with alternate-exchange {ae_ok} (configure and read on "
            "it, write on the AE)")
    unread = names.exchange("xnr")
    refused_403(client, ch, ExchangeDeclare(exchange=unread, exchange_type="fanout",
                                            arguments={"alternate-exchange": ae_ok}),
                refusal(target, "ACC-02", "read", "exchange", unread, user),
                f"exchange.declare of {unread} with an AE: {user} may not read the exchange", reply=ExchangeDeclareOk)
    ch = client.channel()
    other = names.exchange("x")
    refused_403(client, ch, ExchangeDeclare(exchange=other, exchange_type="fanout",
                                            arguments={"alternate-exchange": ae_no}),
                refusal(target, "ACC-02", "write", "exchange", ae_no, user),
                f"exchange.declare of {other} with alternate-exchange {ae_no}: {user} may not write it",
                reply=ExchangeDeclareOk)


@pytest.mark.rules("ACC-02")
def test_a_passive_declare_needs_any_permission_from_4_3(admin: RestoringAdmin, connect: Connect, names: Names,
                                                        target: Target) -> None:
    """4.3.1+: any one of configure, write or read on the resource; none is 403 with configure's
    text. Before 4.3 a passive declare checks no permission."""
    theirs = declared(connect, names, "pq", "xpx")
    queue, exchange = theirs["pq"], theirs["xpx"]
    for label, regexes in (("read", {"configure": NONE, "write": NONE, "read": r"\.(pq|px)\."}),
                           ("write", {"configure": NONE, "write": r"\.(pq|px)\.", "read": NONE})):
        client, user = _user_client(connect, admin, target, f"pas{label}", **regexes)
        ch = client.channel()
        allowed(client, ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk,
                f"passive queue.declare of {queue} by {user}, who may {label} it")
        allowed(client, ch, ExchangeDeclare(exchange=exchange, exchange_type="fanout", passive=True), ExchangeDeclareOk,
                f"passive exchange.declare of {exchange} by {user}, who may {label} it")
    client, user = _user_client(connect, admin, target, "pasnone", configure=NONE, write=NONE, read=NONE)
    ch = client.channel()
    if target.profile.expect("ACC-02") != "required":  # before 4.3: no check
        allowed(client, ch, QueueDeclare(queue=queue, passive=True), QueueDeclareOk,
                f"passive queue.declare of {queue} by {user}, who has no permission on it (none is checked before 4.3)")
        allowed(client, ch, ExchangeDeclare(exchange=exchange, exchange_type="fanout", passive=True), ExchangeDeclareOk,
                f"passive exchange.declare of {exchange} by {user} (no permission is checked before 4.3)")
        return
    refused_403(client, ch, QueueDeclare(queue=queue, passive=True), refusal(target, "ACC-02", "configure", "queue", queue, user),
                f"passive queue.declare of {queue} by {user}, who has no permission on it", reply=QueueDeclareOk)
    ch = client.channel()
    refused_403(client, ch, ExchangeDeclare(exchange=exchange, exchange_type="fanout", passive=True),
                refusal(target, "ACC-02", "configure", "exchange", exchange, user),
                f"passive exchange.declare of {exchange} by {user}, who has no permission on it", reply=ExchangeDeclareOk)


# -- ACC-03: write ---------------------------------------------------------------------------------------
@pytest.mark.rules("ACC-03")
def test_basic_publish_needs_write_on_the_exchange(admin: RestoringAdmin, connect: Connect, names: Names,
                                                   target: Target) -> None:
    theirs = declared(connect, names, "xwr", "xrd")
    client, user = _user_client(connect, admin, target, "pub", configure=CFG, write=WR, read=RD)
    ch = client.channel()
    published(client, ch, BasicPublish(exchange=theirs["xwr"]), f"basic.publish to {theirs['xwr']} (write matches)")
    refused_403(client, ch, BasicPublish(exchange=theirs["xrd"]), refusal(target, "ACC-03", "write", "exchange", theirs["xrd"], user),
                f"basic.publish to {theirs['xrd']}: {user} may write only {WR}")
    ch = client.channel()
    refused_403(client, ch, BasicPublish(exchange="", routing_key=names.queue("wr")),
                refusal(target, "ACC-03", "write", "exchange", "amq.default", user),
                f"basic.publish to the default exchange: {user} may not write amq.default")


@pytest.mark.rules("ACC-03")
def test_queue_bind_needs_write_on_the_queue_and_read_on_the_exchange(admin: RestoringAdmin, connect: Connect,
                                                                      names: Names, target: Target) -> None:
    theirs = declared(connect, names, "wr", "rd", "xrd", "xwr")
    queue_w, queue_r, source_r, source_w = theirs["wr"], theirs["rd"], theirs["xrd"], theirs["xwr"]
    client, user = _user_client(connect, admin, target, "bind", configure=NONE, write=WR, read=RD)
    ch = client.channel()
    allowed(client, ch, QueueBind(queue=queue_w, exchange=source_r, routing_key="k"), QueueBindOk,
            f"queue.bind of {queue_w} (write) to {source_r} (read)")
    refused_403(client, ch, QueueBind(queue=queue_r, exchange=source_r, routing_key="k"),
                refusal(target, "ACC-03", "write", "queue", queue_r, user),
                f"queue.bind of {queue_r}: {user} may not write the queue", reply=QueueBindOk)
    ch = client.channel()
    refused_403(client, ch, QueueBind(queue=queue_w, exchange=source_w, routing_key="k"),
                refusal(target, "ACC-03", "read", "exchange", source_w, user),
                f"queue.bind to {source_w}: {user} may not read the exchange", reply=QueueBindOk)
    ch = client.channel()
    refused_403(client, ch, QueueUnbind(queue=queue_r, exchange=source_r, routing_key="k"),
                refusal(target, "ACC-03", "write", "queue", queue_r, user),
                f"queue.unbind of {queue_r}: {user} may not write the queue", reply=QueueUnbindOk)
    ch = client.channel()
    allowed(client, ch, QueueUnbind(queue=queue_w, exchange=source_r, routing_key="k"), QueueUnbindOk,
            f"queue.unbind of {queue_w} (write) from {source_r} (read)")


@pytest.mark.rules("ACC-03")
def test_exchange_bind_needs_write_on_the_destination_and_read_on_the_source(
        admin: RestoringAdmin, connect: Connect, names: Names, target: Target) -> None:
    theirs = declared(connect, names, "xwr", "xrd")
    dest_w, source_r = theirs["xwr"], theirs["xrd"]
    client, user = _user_client(connect, admin, target, "xbind", configure=NONE, write=WR, read=RD)
    ch = client.channel()
    allowed(client, ch, ExchangeBind(destination=dest_w, source=source_r, routing_key="k"), ExchangeBindOk,
            f"exchange.bind of {dest_w} (write) to {source_r} (read)")
    refused_403(client, ch, ExchangeBind(destination=source_r, source=source_r, routing_key="k"),
                refusal(target, "ACC-03", "write", "exchange", source_r, user),
                f"exchange.bind with destination {source_r}: {user} may not write it", reply=ExchangeBindOk)
    ch = client.channel()
    refused_403(client, ch, ExchangeBind(destination=dest_w, source=dest_w, routing_key="k"),
                refusal(target, "ACC-03", "read", "exchange", dest_w, user),
                f"exchange.bind with source {dest_w}: {user} may not read it", reply=ExchangeBindOk)


# -- ACC-04: read ---------------------------------------------------------------------------------------
@pytest.mark.rules("ACC-04")
@pytest.mark.parametrize("operation", ["basic.get", "basic.consume", "queue.purge"])
def test_reading_a_queue_needs_read(admin: RestoringAdmin, connect: Connect, names: Names, target: Target,
                                    operation: str) -> None:
    theirs = declared(connect, names, "rd", "wr")
    readable, unreadable = theirs["rd"], theirs["wr"]
    client, user = _user_client(connect, admin, target, "read", configure=CFG, write=WR, read=RD)
    ch = client.channel()

    def call(queue: str) -> tuple[BasicGet | BasicConsume | QueuePurge, tuple[type, ...]]:
        if operation == "basic.get":
            return BasicGet(queue=queue, no_ack=True), (BasicGetOk, BasicGetEmpty)
        if operation == "basic.consume":
            return BasicConsume(queue=queue, consumer_tag=f"c.{queue}"), (BasicConsumeOk,)
        return QueuePurge(queue=queue), (QueuePurgeOk,)

    method, replies = call(readable)
    try:
        client.rpc(ch, method, *replies)
    except ChannelClosed as closed:
        raise AssertionError(f"{operation} on {readable}: {user} may read it; the broker closed the channel: "
                             f"{closed}") from None
    method, replies = call(unreadable)
    refused_403(client, ch, method, refusal(target, "ACC-04", "read", "queue", unreadable, user),
                f"{operation} on {unreadable}: {user} may read only {RD}", reply=replies)


@pytest.mark.rules("ACC-02", "ACC-03", "ACC-04")
def test_empty_permissions_open_the_vhost_and_grant_nothing(admin: RestoringAdmin, connect: Connect, names: Names,
                                                           target: Target) -> None:
    """The Java client's Permissions.noAccess: permissions "" "" "" (RabbitMQ reads "" as "^$")
    let the user open the vhost; every declaration, publish and read is refused."""
    theirs = declared(connect, names, "rd", "xrd")
    client, user = _user_client(connect, admin, target, "empty", configure="", write="", read="")
    ch = client.channel()
    own = names.queue("cfg")
    cases: list[tuple[str, str, Any, str, type | tuple[type, ...] | None]] = [
        ("ACC-02", "configure", QueueDeclare(queue=own), own, QueueDeclareOk),
        ("ACC-02", "configure", ExchangeDeclare(exchange=names.exchange("cfg"), exchange_type="fanout"), "", ExchangeDeclareOk),
        ("ACC-03", "write", BasicPublish(exchange=theirs["xrd"]), theirs["xrd"], None),
        ("ACC-03", "write", QueueBind(queue=theirs["rd"], exchange=theirs["xrd"]), theirs["rd"], QueueBindOk),
        ("ACC-04", "read", BasicGet(queue=theirs["rd"]), theirs["rd"], (BasicGetOk, BasicGetEmpty)),
        ("ACC-04", "read", QueuePurge(queue=theirs["rd"]), theirs["rd"], QueuePurgeOk),
    ]
    for rule, kind, method, name, reply in cases:
        resource = "exchange" if isinstance(method, (ExchangeDeclare, BasicPublish)) else "queue"
        name = name or method.exchange
        refused_403(client, ch, method, refusal(target, rule, kind, resource, name, user),
                    f"{rule}: {method.NAME} by {user}, whose permissions are all empty", reply=reply)
        ch = client.channel()
