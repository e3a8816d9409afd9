"""The management API subset over real HTTP (httpx), against an embedded broker. Who may do
what (401s, tags, vhosts) is tested in tests/reliability/test_security.py."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pytest

from reference_broker import auth
from reference_broker.config import SHA256, SHA512
from reference_broker.server import EmbeddedBroker


@pytest.fixture(scope="module")
def managed() -> Iterator[EmbeddedBroker]:
    users: dict[str, str | dict[str, Any]] = {"guest": {"password": "guest", "tags": ["administrator"]},
                                              "app": {"password": "pw", "tags": ["management"]}}
    with EmbeddedBroker(management_port=0, users=users, vhosts=["/", "other"],
                        permissions={"app": {"other": [".*", ".*", ".*"]}}) as b:
        yield b


def api(b: EmbeddedBroker, user: str = "guest", password: str = "guest") -> httpx.Client:
    return httpx.Client(base_url=f"http://{b.host}:{b.server.management_port}", auth=(user, password), timeout=5)


def test_management_overview_and_whoami(managed: EmbeddedBroker) -> None:
    assert api(managed).get("/api/overview").json()["rabbitmq_version"] == "4.3"
    assert api(managed, "app", "pw").get("/api/whoami").json() == {"name": "app", "tags": ["management"]}


def test_management_users_are_rabbitmq_shaped_and_never_plaintext(managed: EmbeddedBroker) -> None:
    client = api(managed)
    rows = {u["name"]: u for u in client.get("/api/users").json()}
    assert set(rows) == {"guest", "app"} and rows["guest"]["tags"] == ["administrator"]
    assert rows["app"]["hashing_algorithm"] == SHA256 and "password" not in rows["app"]
    assert rows["app"]["password_hash"] != "pw" and len(base64.b64decode(rows["app"]["password_hash"])) == 4 + 32
    digest = auth.hash_password("carol pw", SHA512)
    body = {"password_hash": digest, "hashing_algorithm": SHA512, "tags": ["monitoring", "management"]}
    assert client.put("/api/users/carol", json=body).status_code == 201
    assert client.put("/api/users/carol", json={"tags": "policymaker"}).status_code == 204  # keeps the hash
    carol = client.get("/api/users/carol").json()
    assert (carol["password_hash"], carol["tags"]) == (digest, ["policymaker"])
    assert auth.check_password(managed.server.config, "carol", "carol pw")
    assert client.put("/api/users/dave", json={"tags": "management"}).status_code == 400  # no password
    assert client.put("/api/users/dave", json={"password_hash": "short"}).status_code == 400
    assert client.delete("/api/users/carol").status_code == 204
    assert client.get("/api/users/carol").status_code == 404
    assert client.delete("/api/users/carol").status_code == 404


def test_management_permissions_round_trip(managed: EmbeddedBroker) -> None:
    client = api(managed)
    assert client.get("/api/permissions/other/app").json() == {
        "user": "app", "vhost": "other", "configure": ".*", "write": ".*", "read": ".*"}
    assert client.get("/api/permissions/%2F/app").status_code == 404
    assert client.get("/api/permissions/%2F/guest").json()["configure"] == ".*"  # no entry: every vhost
    grant = {"configure": "^app\\.", "write": "", "read": ".*"}
    assert client.put("/api/permissions/%2F/app", json=grant).status_code == 201
    assert managed.server.config.permissions["app"]["/"] == ["^app\\.", "", ".*"]
    assert client.put("/api/permissions/%2F/app", json={"configure": "["}).status_code == 400
    assert client.put("/api/permissions/nowhere/app", json=grant).status_code == 404
    assert client.put("/api/permissions/%2F/nobody", json=grant).status_code == 400
    assert {(r["user"], r["vhost"]) for r in client.get("/api/permissions").json()} >= {("app", "/"), ("app", "other")}
    assert client.delete("/api/permissions/%2F/app").status_code == 204
    assert client.delete("/api/permissions/%2F/app").status_code == 404


def test_management_permissions_of_an_unrestricted_user_are_spelled_out_first(managed: EmbeddedBroker) -> None:
    """guest has no entry (every vhost): changing or clearing one vhost keeps the others."""
    client = api(managed)
    assert client.put("/api/permissions/other/guest", json={"configure": "", "write": ".*", "read": ".*"}
                      ).status_code == 204
    assert managed.server.config.permissions["guest"] == {"/": [".*", ".*", ".*"], "other": ["", ".*", ".*"]}
    assert client.delete("/api/permissions/other/guest").status_code == 204
    assert client.get("/api/permissions/other/guest").status_code == 404
    assert client.get("/api/permissions/%2F/guest").json()["read"] == ".*"
    del managed.server.config.permissions["guest"]  # back to every vhost for the other tests


def test_management_policies_apply_to_existing_queues(managed: EmbeddedBroker) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(managed.url))
    ch = conn.channel()
    ch.queue_declare("mq.limited")
    for i in range(5):
        ch.basic_publish("", "mq.limited", str(i).encode())
    client = api(managed)
    body = {"pattern": "^mq\\.limited$", "apply-to": "queues", "priority": 1, "definition": {"max-length": 2}}
    assert client.put("/api/policies/%2F/cap", json=body).status_code == 201
    assert client.get("/api/policies/%2F/cap").json()["definition"] == {"max-length": 2}
    ch.basic_publish("", "mq.limited", b"5")  # the policy is in force: drop-head to 2
    info = client.get("/api/queues/%2F/mq.limited").json()
    assert info["messages_ready"] == 2 and info["effective_policy_definition"] == {"max-length": 2}
    assert info["policy"] == "cap"
    bad = client.put("/api/policies/%2F/bad", json={"pattern": ".*", "definition": {"nope": 1}})
    assert bad.status_code == 400
    assert client.delete("/api/policies/%2F/cap").status_code == 204
    assert client.get("/api/policies/%2F/cap").status_code == 404
    ch.queue_delete("mq.limited")
    conn.close()


def test_management_lists_queue_consumers_and_closes_connections(managed: EmbeddedBroker) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(managed.url))
    ch = conn.channel()
    ch.queue_declare("mq.consumed", exclusive=True)
    ch.basic_consume("mq.consumed", lambda *a: None)
    client = api(managed)
    info = client.get("/api/queues/%2F/mq.consumed").json()
    assert info["consumers"] == 1 and info["consumer_details"][0]["ack_required"] is True
    names = [c["name"] for c in client.get("/api/connections").json()]
    assert len(names) == 1
    assert client.delete(f"/api/connections/{quote(names[0], safe='')}").status_code == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        conn.process_data_events(time_limit=5)
        conn.process_data_events(time_limit=5)
    assert closed.value.reply_code == 320
    assert client.get("/api/queues/%2F/mq.consumed").status_code == 404  # exclusive queue went with it


def test_management_global_consumer_timeout_extension(managed: EmbeddedBroker) -> None:
    client = api(managed)
    before = client.get("/api/global-parameters/consumer_timeout").json()["value"]
    assert client.put("/api/global-parameters/consumer_timeout", json={"value": 1234}).status_code == 204
    assert managed.server.config.consumer_timeout == 1234
    assert client.put("/api/global-parameters/consumer_timeout", json={"value": -1}).status_code == 400
    client.put("/api/global-parameters/consumer_timeout", json={"value": before})


def test_management_definitions_shape(managed: EmbeddedBroker) -> None:
    data = api(managed).get("/api/definitions").json()
    assert {"rabbit_version", "users", "vhosts", "permissions", "policies", "queues", "exchanges",
            "bindings"} <= set(data)
    assert {"name", "password_hash", "hashing_algorithm", "tags"} <= set(data["users"][0])


def test_management_refuses_bad_policy_patterns_and_3_10_keys(managed: EmbeddedBroker) -> None:
    client = api(managed)
    bad = client.put("/api/policies/%2F/bad", json={"pattern": "[", "definition": {"max-length": 5}})
    assert bad.status_code == 400 and "not a valid regular expression" in bad.json()["reason"]
    with EmbeddedBroker(management_port=0, timeout_mode="legacy", legacy_ruleset="3.10") as legacy:
        refused = api(legacy).put("/api/policies/%2F/t", json={"pattern": ".*", "definition": {"consumer-timeout": 5}})
        assert refused.status_code == 400 and "not recognised policy settings" in refused.json()["reason"]


def test_management_user_changes_survive_a_restart_with_a_data_dir(tmp_path: Path) -> None:
    """Users and permissions are durable definitions (reference_broker/storage.py)."""
    with EmbeddedBroker(management_port=0, data_dir=str(tmp_path)) as first:
        client = api(first)
        assert client.put("/api/users/erin", json={"password": "erin pw", "tags": "management"}).status_code == 201
        grant = {"configure": "^erin\\.", "write": ".*", "read": ".*"}
        assert client.put("/api/permissions/%2F/erin", json=grant).status_code == 201
    with EmbeddedBroker(management_port=0, data_dir=str(tmp_path)) as second:
        assert auth.check_password(second.server.config, "erin", "erin pw")
        assert api(second).get("/api/permissions/%2F/erin").json()["configure"] == "^erin\\."
        assert api(second, "erin", "erin pw").get("/api/whoami").json()["tags"] == ["management"]


def test_management_vhosts_and_topic_permissions_round_trip(managed: EmbeddedBroker) -> None:
    """ACC-01 and ACC-05 setup: PUT/DELETE /api/vhosts/{name}, /api/topic-permissions/{vhost}/{user}."""
    client = api(managed)
    assert client.put("/api/vhosts/made", json={}).status_code == 201
    assert client.put("/api/vhosts/made", json={}).status_code == 204
    assert "made" in managed.server.core.vhosts and client.get("/api/vhosts/made").json() == {"name": "made"}
    assert client.put("/api/users/topical", json={"password": "pw"}).status_code == 201
    grant = {"exchange": "amq.topic", "write": "^{username}\\.", "read": ""}
    assert client.put("/api/topic-permissions/made/topical", json=grant).status_code == 201
    assert client.get("/api/topic-permissions/made/topical").json() == [
        {"user": "topical", "vhost": "made", "exchange": "amq.topic", "write": "^{username}\\.", "read": ""}]
    assert client.put("/api/topic-permissions/made/topical", json={"exchange": "x", "write": "["}).status_code == 400
    assert client.put("/api/topic-permissions/made/nobody", json=grant).status_code == 400
    assert client.put("/api/topic-permissions/nowhere/topical", json=grant).status_code == 404
    assert client.delete("/api/vhosts/made").status_code == 204  # its topic permissions go with it
    assert "made" not in managed.server.core.vhosts
    assert client.get("/api/topic-permissions/made/topical").status_code == 404
    assert client.delete("/api/vhosts/made").status_code == 404
    assert client.delete("/api/vhosts/%2F").status_code == 404  # a configured vhost stays
    assert client.delete("/api/users/topical").status_code == 204


def test_management_deleting_a_vhost_closes_its_connections(managed: EmbeddedBroker) -> None:
    """RabbitMQ closes a deleted vhost's connections (320 CONNECTION_FORCED); the DELETE answers once they went."""
    from concurrent.futures import ThreadPoolExecutor

    from codec import ConnectionClose
    from conformance.drivers.raw import RawClient

    client = api(managed)
    assert client.put("/api/vhosts/doomed", json={}).status_code == 201
    amqp = RawClient(f"amqp://guest:guest@{managed.host}:{managed.port}/doomed", timeout=5).connect()
    try:
        with ThreadPoolExecutor(1) as pool:
            deleting = pool.submit(client.delete, "/api/vhosts/doomed")
            close = amqp.expect(0, ConnectionClose).method  # answered with close-ok
            assert isinstance(close, ConnectionClose) and close.reply_code == 320
            assert deleting.result(timeout=5).status_code == 204
    finally:
        amqp.close()
    assert "doomed" not in managed.server.core.vhosts
