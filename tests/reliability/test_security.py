"""Security of the reference broker over real sockets: credentials (plaintext and
RabbitMQ password hashes, PLAIN and AMQPLAIN), refusals that leak nothing, vhost permissions,
the management API's access rules, and loopback-only listeners by default.

RabbitMQ behaviour these follow (3.10.8, checked live on 127.0.0.1:5672): a failed login with
the `authentication_failure_close` capability gets connection.close 403 with class/method 0/0
and the same text for an unknown user and a wrong password; without the capability the socket
just ends. The management API answers every refusal with 401 `not_authorised` and a reason
(rabbit_mgmt_util: "Login failed", "Not management user", "Not administrator user", "User not
authorised to access virtual host", "User not authorised to access object").
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from codec import (
    BasicGet,
    BasicProperties,
    BasicPublish,
    ChannelClose,
    ConnectionClose,
    ConnectionStartOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    QueueDeclare,
    QueueDeclareOk,
)
from codec.fast_tables import RABBITMQ_TABLES
from conformance.drivers.raw import ConnectionClosed, ConnectionLost, RawClient, Recorder
from conformance.suite.steps.wire import Handshake, handshake
from reference_broker import auth
from reference_broker.config import SHA512, BrokerConfig, ConfigError, load_config
from reference_broker.server import EmbeddedBroker
from tests.conftest import require
from tests.reliability.conftest import Connect, StartBroker, amqp_url

WAIT = 10.0
REFUSED = "ACCESS_REFUSED - Login was refused using authentication mechanism {}. For details see the broker logfile."
# rabbitmqctl add_user amqpc-hash-check 's3cr3t-é' on RabbitMQ 3.10.8, then export_definitions
RABBITMQ_HASH = "JOI62BIhZcTy7UKsGbfNIUP3KhcV5XM4re5Y91ZUpZlDwGbr"
RABBITMQ_PASSWORD = "s3cr3t-é"
ADMIN = {"password": "guest", "tags": ["administrator"]}


def start_ok(mechanism: str, user: str, password: str) -> ConnectionStartOk:
    if mechanism == "PLAIN":
        response = f"\x00{user}\x00{password}".encode()
    else:
        response = RABBITMQ_TABLES.encode_table({"LOGIN": user, "PASSWORD": password})[4:]
    caps = {"authentication_failure_close": True}
    return ConnectionStartOk({"product": "amqp-conformance", "capabilities": caps}, mechanism, response, "en_US")


def login(broker: EmbeddedBroker, mechanism: str, user: str, password: str, vhost: str = "/") -> Handshake:
    return handshake(amqp_url(broker, vhost=vhost), Recorder(), WAIT, start_ok=start_ok(mechanism, user, password))


# -- credentials ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_security_hashed_and_plaintext_passwords_log_in(start_broker: StartBroker, mechanism: str) -> None:
    """A RabbitMQ 3.10.8 hash, a sha512 hash from our CLI's function and the plaintext guest
    all open a connection; a wrong password for each does not."""
    sha512 = auth.hash_password("another pass", SHA512)
    broker = start_broker(users={
        "guest": "guest", "rabbit": {"password_hash": RABBITMQ_HASH},
        "long": {"password_hash": sha512, "hashing_algorithm": SHA512}})
    for user, password in (("guest", "guest"), ("rabbit", RABBITMQ_PASSWORD), ("long", "another pass")):
        assert login(broker, mechanism, user, password).open_ok, user
        refused = login(broker, mechanism, user, password + "x").close
        assert refused is not None and refused.reply_code == 403, user


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_security_refusals_say_nothing_about_which_part_was_wrong(start_broker: StartBroker, mechanism: str) -> None:
    """authentication_failure_close: connection.close 403 (0/0) with RabbitMQ's text, the same
    for a wrong password and an unknown user, and no connection.tune."""
    broker = start_broker()
    wrong, unknown = login(broker, mechanism, "guest", "nope"), login(broker, mechanism, "nobody", "guest")
    for result in (wrong, unknown):
        assert result.tune is None and result.close is not None
        close = result.close
        assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
            403, REFUSED.format(mechanism), 0, 0)


def test_security_without_the_capability_a_refused_login_just_ends(start_broker: StartBroker) -> None:
    broker = start_broker()
    client = RawClient(amqp_url(broker, "guest", "nope"), capabilities={"authentication_failure_close": False},
                       timeout=WAIT)
    with pytest.raises(ConnectionLost):
        client.connect()
    client.close()
    assert client.connection_closed is None


def test_security_hash_cli_prints_rabbitmq_hashes() -> None:
    """`python -m reference_broker.auth hash`: from stdin (kept out of `ps` and shell history)
    or an argument; each run salts anew; the output logs in."""
    run = [sys.executable, "-m", "reference_broker.auth", "hash"]
    from_stdin = subprocess.run(run, input="pw é\n", capture_output=True, text=True, timeout=WAIT, check=True)
    from_arg = subprocess.run([*run, "pw é"], capture_output=True, text=True, timeout=WAIT, check=True)
    hashes = [from_stdin.stdout.strip(), from_arg.stdout.strip()]
    assert hashes[0] != hashes[1]
    for digest in hashes:
        config = BrokerConfig(users={"u": {"password_hash": digest}}).validate()
        assert auth.check_password(config, "u", "pw é") and not auth.check_password(config, "u", "pw")


@pytest.mark.parametrize("entry,problem", [
    ({"password_hash": "not base64!"}, "not base64"),
    ({"password_hash": "AAAA"}, "4-byte salt"),
    ({"password_hash": RABBITMQ_HASH, "hashing_algorithm": "rabbit_password_hashing_md5"}, "hashing_algorithm"),
    ({"password": "a", "password_hash": RABBITMQ_HASH}, "exactly one"),
    ({"tags": ["administrator"]}, "exactly one"),
    ({"password": "a", "limits": {}}, "unknown key"),
])
def test_security_bad_user_entries_are_config_errors(entry: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_config(None, users={"u": entry})


# -- vhost permissions ---------------------------------------------------------------------------
PERMS = {"c": ["^app\\.", ".*", ".*"], "w": [".*", "^app\\.", ".*"], "r": [".*", ".*", "^app\\."]}


@pytest.fixture(scope="module")
def restricted() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(vhosts=["/", "c", "w", "r"], users={"guest": ADMIN, "app": "pw"},
                        permissions={"app": PERMS}) as broker:
        yield broker


@pytest.mark.parametrize("kind", ["configure", "write", "read"])
def test_security_each_permission_is_enforced_with_403(restricted: EmbeddedBroker, connect: Connect,
                                                      kind: str) -> None:
    """configure (declare), write (publish), read (get): in the vhost where only that regex is
    ^app\\., a matching name works and another is channel.close 403 with RabbitMQ's text."""
    vhost = kind[0]
    client = connect(restricted, "app", "pw", vhost, timeout=WAIT)
    ch = client.channel()
    if kind == "configure":
        client.rpc(ch, QueueDeclare(queue="app.q"), QueueDeclareOk)
        client.send(ch, QueueDeclare(queue="other.q"))
        resource, name, ids = "queue", "other.q", (50, 10)
    elif kind == "write":
        client.rpc(ch, ExchangeDeclare(exchange="other.x", exchange_type="fanout"), ExchangeDeclareOk)
        client.send(ch, BasicPublish(exchange="other.x"), BasicProperties(), b"x")
        resource, name, ids = "exchange", "other.x", (60, 40)
    else:
        client.rpc(ch, QueueDeclare(queue="other.q"), QueueDeclareOk)
        client.send(ch, BasicGet(queue="other.q"))
        resource, name, ids = "queue", "other.q", (60, 70)
    close = client.expect(ch, ChannelClose, timeout=WAIT).method
    assert isinstance(close, ChannelClose)
    assert (close.reply_code, close.class_id, close.method_id) == (403, *ids)
    assert close.reply_text == f"ACCESS_REFUSED - {kind} access to {resource} '{name}' in vhost '{vhost}' refused for user 'app'"
    client.channel()  # a channel error: the connection goes on


def refused_at_open(broker: EmbeddedBroker, user: str, password: str, vhost: str) -> ConnectionClosed:
    client = RawClient(amqp_url(broker, user, password, vhost), timeout=WAIT)
    try:
        with pytest.raises(ConnectionClosed) as closed:
            client.connect()
    finally:
        client.close()
    assert (closed.value.code, closed.value.class_id, closed.value.method_id) == (530, 10, 40)
    return closed.value


def test_security_a_vhost_without_permissions_is_530_at_open(restricted: EmbeddedBroker) -> None:
    """RabbitMQ's text and ids (rabbit_access_control:check_vhost_access)."""
    assert refused_at_open(restricted, "app", "pw", "/").text == "NOT_ALLOWED - access to vhost '/' refused for user 'app'"


# -- management API --------------------------------------------------------------------------------
MANAGED_USERS = {"guest": ADMIN, "viewer": {"password": "pw", "tags": ["management"]},
                 "maker": {"password": "pw", "tags": "policymaker"}, "plain": "pw",
                 "watcher": {"password": "pw", "tags": ["monitoring"]}}
OTHER_ONLY = {"viewer": {"other": [".*", ".*", ".*"]}, "maker": {"other": [".*", ".*", ".*"]},
              "plain": {"other": [".*", ".*", ".*"]}, "watcher": {"other": [".*", ".*", ".*"]}}


@pytest.fixture(scope="module")
def managed() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(management_port=0, vhosts=["/", "other"], users=dict(MANAGED_USERS),
                        permissions={k: dict(v) for k, v in OTHER_ONLY.items()}) as broker:
        yield broker


def api(broker: EmbeddedBroker, user: str | None = "guest", password: str = "guest") -> httpx.Client:
    return httpx.Client(base_url=f"http://{broker.host}:{broker.server.management_port}",
                        auth=None if user is None else (user, password), timeout=WAIT)


def refusal(response: httpx.Response) -> str:
    assert response.status_code == 401, (response.status_code, response.text)
    body = response.json()
    assert body["error"] == "not_authorised"
    return str(body["reason"])


def test_security_management_needs_valid_credentials(managed: EmbeddedBroker) -> None:
    """401 without credentials, with a wrong password and for an unknown user: one answer."""
    anonymous = api(managed, None).get("/api/overview")
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"].startswith("Basic")
    wrong, unknown = api(managed, "guest", "nope").get("/api/overview"), api(managed, "nobody").get("/api/overview")
    assert refusal(wrong) == refusal(unknown) == "Login failed"
    assert wrong.content == unknown.content
    assert refusal(api(managed, "plain", "pw").get("/api/overview")) == "Not management user"
    assert api(managed).get("/api/whoami").json() == {"name": "guest", "tags": ["administrator"]}


def test_security_management_refuses_other_vhosts(managed: EmbeddedBroker) -> None:
    """A management user with permissions on `other` only: that vhost's queues and exchanges
    are served; `/`'s are 401, and the lists leave `/` out."""
    viewer = api(managed, "viewer", "pw")
    for path in ("/api/queues/%2F", "/api/exchanges/%2F", "/api/queues/%2F/any"):
        assert refusal(viewer.get(path)) == "User not authorised to access virtual host", path
    assert viewer.get("/api/queues/other").status_code == 200
    assert {x["vhost"] for x in viewer.get("/api/exchanges").json()} == {"other"}
    assert refusal(viewer.get("/api/policies/other")) == "User not authorised to access object"


def test_security_management_policies_need_policymaker_and_the_vhost(managed: EmbeddedBroker) -> None:
    maker = api(managed, "maker", "pw")
    body = {"pattern": "^sec\\.", "definition": {"max-length": 1}}
    assert refusal(maker.put("/api/policies/%2F/sec", json=body)) == "User not authorised to access object"
    assert refusal(maker.get("/api/policies/%2F")) == "User not authorised to access object"
    assert maker.put("/api/policies/other/sec", json=body).status_code == 201
    assert [p["name"] for p in maker.get("/api/policies").json()] == ["sec"]
    assert maker.delete("/api/policies/other/sec").status_code == 204


@pytest.mark.parametrize("method,path", [
    ("GET", "/api/users"), ("GET", "/api/users/guest"), ("PUT", "/api/users/x"), ("DELETE", "/api/users/guest"),
    ("GET", "/api/permissions"), ("PUT", "/api/permissions/other/viewer"), ("GET", "/api/definitions")])
def test_security_management_global_endpoints_need_administrator(managed: EmbeddedBroker, method: str,
                                                                 path: str) -> None:
    for user in ("viewer", "maker", "watcher"):
        response = api(managed, user, "pw").request(method, path, json={"password": "x", "read": ".*"})
        assert refusal(response) == "Not administrator user", (user, method, path)
    if method == "GET":
        assert api(managed).get(path).status_code == 200


def test_security_management_global_parameters_need_policymaker(managed: EmbeddedBroker) -> None:
    path = "/api/global-parameters/consumer_timeout"
    assert refusal(api(managed, "viewer", "pw").put(path, json={"value": 5})) == "User not authorised to access object"
    assert api(managed, "maker", "pw").get(path).status_code == 200


def test_security_management_connections_are_private(managed: EmbeddedBroker, connect: Connect) -> None:
    """A management user lists and closes its own connections only; monitoring lists all,
    only an administrator closes another user's."""
    connect(managed, "viewer", "pw", "other", timeout=WAIT)
    mine = connect(managed, "maker", "pw", "other", timeout=WAIT)
    rows = api(managed, "maker", "pw").get("/api/connections").json()
    assert [r["user"] for r in rows] == ["maker"]
    assert {r["user"] for r in api(managed, "watcher", "pw").get("/api/connections").json()} >= {"viewer", "maker"}
    theirs = next(r["name"] for r in api(managed).get("/api/connections").json() if r["user"] == "viewer")
    path = f"/api/connections/{quote(theirs, safe='')}"
    assert refusal(api(managed, "maker", "pw").delete(path)) == "User not authorised to access object"
    assert refusal(api(managed, "watcher", "pw").delete(path)) == "User not authorised to access object"
    assert api(managed, "maker", "pw").delete(f"/api/connections/{quote(rows[0]['name'], safe='')}").status_code == 204
    forced = mine.expect(0, ConnectionClose, timeout=WAIT).method
    assert isinstance(forced, ConnectionClose) and forced.reply_code == 320


def test_security_user_and_permission_changes_act_on_the_live_broker(start_broker: StartBroker,
                                                                     connect: Connect) -> None:
    """An administrator creates a user (stored hashed; no vhost until granted), grants it
    permissions, then deletes it: its open connection is refused from then on and it can no
    longer log in."""
    broker = start_broker(management_port=0)
    admin = api(broker)
    assert admin.put("/api/users/bob", json={"password": "bobpw", "tags": "management"}).status_code == 201
    stored = admin.get("/api/users/bob").json()
    assert stored["tags"] == ["management"] and "bobpw" not in str(broker.server.config.users["bob"])
    assert auth.check_password(BrokerConfig(users={"bob": {"password_hash": stored["password_hash"]}}), "bob", "bobpw")
    assert refused_at_open(broker, "bob", "bobpw", "/").text == "NOT_ALLOWED - access to vhost '/' refused for user 'bob'"
    grant = {"configure": "^bob\\.", "write": ".*", "read": ".*"}
    assert admin.put("/api/permissions/%2F/bob", json=grant).status_code == 201
    bob = connect(broker, "bob", "bobpw", timeout=WAIT)
    ch = bob.channel()
    bob.rpc(ch, QueueDeclare(queue="bob.q"), QueueDeclareOk)
    assert admin.delete("/api/users/bob").status_code == 204
    bob.send(ch, QueueDeclare(queue="bob.q2"))
    refused = bob.expect(ch, ChannelClose, timeout=WAIT).method
    assert isinstance(refused, ChannelClose) and refused.reply_code == 403
    gone = login(broker, "PLAIN", "bob", "bobpw")
    assert gone.close is not None and gone.close.reply_code == 403


# -- listeners ---------------------------------------------------------------------------------------
def outside_address() -> str | None:
    """This host's address on its default route (no packet is sent), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_security_listeners_are_loopback_unless_configured() -> None:
    """Nothing binds beyond 127.0.0.1 by default, neither AMQP nor the management API: their
    sockets say so, and this host's other address is refused on both ports."""
    assert BrokerConfig().host == "127.0.0.1"
    assert load_config(None, host=None).host == "127.0.0.1"  # the CLI passes None without --host
    outside = outside_address()
    with EmbeddedBroker(management_port=0) as broker:
        ports = (broker.port, broker.server.management_port)
        management = [address[0] for address in broker.server._management.addresses]  # aiohttp's runner
        assert broker.server.address[0] == "127.0.0.1" and management == ["127.0.0.1"]
        for port in ports if outside is not None else ():
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((outside, port), timeout=WAIT).close()


def test_security_guest_logs_in_only_from_loopback() -> None:
    """RabbitMQ's `loopback_users` (guest by default): from this host's outside address guest
    gets the same 403 as a wrong password, another user logs in; `loopback_users = []` lifts it."""
    outside = outside_address()
    require(outside is not None, "this host has no non-loopback address")
    assert outside is not None
    users = {"guest": "guest", "app": "app"}
    with EmbeddedBroker(host="0.0.0.0", users=users) as broker:
        for user, refused in (("guest", True), ("app", False)):
            client = RawClient(f"amqp://{user}:{user}@{outside}:{broker.port}/", timeout=WAIT)
            if refused:
                with pytest.raises(ConnectionClosed) as closed:  # the raw driver asks for the close
                    client.connect()
                assert closed.value.code == 403 and closed.value.text == (
                    "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
                    "For details see the broker logfile.")
            else:
                client.connect()
                client.close()
        local = RawClient(f"amqp://guest:guest@127.0.0.1:{broker.port}/", timeout=WAIT)
        local.connect()
        local.close()
    with EmbeddedBroker(host="0.0.0.0", loopback_users=[]) as broker:
        client = RawClient(f"amqp://guest:guest@{outside}:{broker.port}/", timeout=WAIT)
        client.connect()
        client.close()
