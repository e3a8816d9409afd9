"""The management API subset over real HTTP (httpx), against an embedded broker."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pika
import pytest

from reference_broker.server import EmbeddedBroker


@pytest.fixture(scope="module")
def managed() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(management_port=0, users={"guest": "guest", "app": "pw"},
                        vhosts=["/", "other"], permissions={"app": {"other": [".*", ".*", ".*"]}}) as b:
        yield b


def api(b: EmbeddedBroker, user: str = "guest", password: str = "guest") -> httpx.Client:
    return httpx.Client(base_url=f"http://{b.host}:{b.server.management_port}", auth=(user, password), timeout=5)


def test_management_requires_auth(managed: EmbeddedBroker) -> None:
    assert api(managed, "guest", "wrong").get("/api/overview").status_code == 401
    assert api(managed).get("/api/overview").json()["rabbitmq_version"] == "4.3"


def test_management_refuses_cross_vhost_access(managed: EmbeddedBroker) -> None:
    assert api(managed, "app", "pw").get("/api/queues/%2F").status_code == 403
    assert api(managed, "app", "pw").get("/api/queues/other").status_code == 200


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
    assert {"rabbit_version", "users", "vhosts", "policies", "queues", "exchanges", "bindings"} <= set(data)


def test_management_refuses_bad_policy_patterns_and_3_10_keys(managed: EmbeddedBroker) -> None:
    client = api(managed)
    bad = client.put("/api/policies/%2F/bad", json={"pattern": "[", "definition": {"max-length": 5}})
    assert bad.status_code == 400 and "not a valid regular expression" in bad.json()["reason"]
    with EmbeddedBroker(management_port=0, timeout_mode="legacy", legacy_ruleset="3.10") as legacy:
        refused = api(legacy).put("/api/policies/%2F/t", json={"pattern": ".*", "definition": {"consumer-timeout": 5}})
        assert refused.status_code == 400 and "not recognised policy settings" in refused.json()["reason"]
