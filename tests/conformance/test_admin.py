"""Tests of the admin adapters (conformance/run/admin.py).

ManagementApi runs against an in-memory fake of the management API (httpx.MockTransport) and,
marked `rabbitmq43`, against RabbitMQ 4.3.6's real one: scripts/rabbitmq4.sh starts that node with
its management plugin (AMQPC_RMQ43_URL / AMQPC_RMQ43_ADMIN; the local 3.10.8's Debian package
leaves the plugin disabled). Rabbitmqctl runs against the local RabbitMQ (marked `rabbitmq`). Each
skips when its broker does not answer and fails under AMQPC_STRICT=1. Every change made here is
undone before the test ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from codec import ConnectionClose, QueueDeclare, QueueDeclareOk, QueueDelete, QueueDeleteOk
from conformance.drivers.raw import RawClient
from conformance.results.records import redact_url
from conformance.run.admin import (
    AdminError,
    ManagementApi,
    NoAdmin,
    Policy,
    Rabbitmqctl,
    Unavailable,
    parse_admin,
)
from conformance.run.restoring import RestoringAdmin
from tests.conformance.admin_fakes import CannedRabbitmqctl, MemoryAdmin
from tests.conftest import require

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
ROOT = Path(__file__).resolve().parents[2]
RMQ43_URL = os.environ.get("AMQPC_RMQ43_URL", "amqp://guest:guest@127.0.0.1:5743/")
RMQ43_MANAGEMENT = os.environ.get("AMQPC_RMQ43_ADMIN", "http://guest:guest@127.0.0.1:15743")


# -- parsing and NoAdmin ------------------------------------------------------------------------
def test_parse_admin_picks_the_adapter() -> None:
    assert isinstance(parse_admin("none", RABBITMQ_URL), NoAdmin)
    assert isinstance(parse_admin("rabbitmqctl", RABBITMQ_URL), Rabbitmqctl)
    api = parse_admin("http://admin:pw@h:15672/", RABBITMQ_URL)
    assert isinstance(api, ManagementApi) and api.describe() == "http://h:15672"
    with pytest.raises(ValueError, match="--broker-admin must be"):
        parse_admin("ftp://h", RABBITMQ_URL)


def test_no_admin_makes_every_call_unavailable() -> None:
    admin = NoAdmin()
    with pytest.raises(Unavailable, match="needs --broker-admin"):
        admin.list_queues("/")
    with pytest.raises(Unavailable, match="needs --broker-admin"):
        admin.put_policy("/", "p", ".*", {})
    with pytest.raises(Unavailable, match="needs --broker-admin"):
        admin.set_global("consumer_timeout", 5)


# -- ManagementApi against a fake -----------------------------------------------------------------
class FakeManagement:
    """Just enough of RabbitMQ's management API for the adapter's paths."""

    def __init__(self) -> None:
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[httpx.Request] = []
        self.closed: list[tuple[str, str | None]] = []
        self.node_alarms = {"mem_alarm": False, "disk_free_alarm": False}  # what /api/nodes says
        self.health: list[dict[str, str]] | None = []  # the health check's alarms; None: no health check (404)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("authorization") != httpx.BasicAuth("admin", "pw")._auth_header:
            return httpx.Response(401, json={"error": "not_authorised"})
        parts = request.url.raw_path.decode().split("/")[2:]  # after /api/
        if parts[0] == "queues":
            return httpx.Response(200, json=[{"name": "amqpc.q", "vhost": "/", "messages": 2, "consumers": 0,
                                              "type": "classic", "arguments": {"x-max-length": 5}}])
        if parts[0] == "exchanges":
            return httpx.Response(200, json=[{"name": "amq.direct"}, {"name": "amqpc.x"}])
        if parts[0] == "connections" and len(parts) == 1:
            return httpx.Response(200, json=[{"name": "127.0.0.1:1 -> 127.0.0.1:5672", "user": "guest",
                                              "vhost": "/", "peer_port": 1, "client_properties": {"product": "p"}}])
        if parts[0] == "nodes":
            return httpx.Response(200, json=[{"name": "rabbit@a", **self.node_alarms}])
        if parts[:3] == ["health", "checks", "alarms"] and self.health is not None:
            if not self.health:
                return httpx.Response(200, json={"status": "ok"})
            return httpx.Response(503, json={"status": "failed", "reason": "There are alarms in effect in the cluster",
                                             "alarms": self.health})
        if parts[0] == "connections":
            self.closed.append((parts[1], request.headers.get("x-reason")))
            return httpx.Response(204)
        if parts[0] != "policies":
            return httpx.Response(404, json={"error": "Object Not Found", "reason": "Not Found"})
        return self._policy(request, parts[1], parts[2])

    def _policy(self, request: httpx.Request, vhost: str, name: str) -> httpx.Response:
        key = (vhost, name)
        if request.method == "PUT":
            self.policies[key] = {"vhost": vhost, "name": name, **json.loads(request.content)}
            return httpx.Response(201)
        if key not in self.policies:
            return httpx.Response(404, json={"error": "Object Not Found"})
        if request.method == "DELETE":
            del self.policies[key]
            return httpx.Response(204)
        return httpx.Response(200, json=self.policies[key])


@pytest.fixture
def fake() -> FakeManagement:
    return FakeManagement()


@pytest.fixture
def api(fake: FakeManagement) -> Iterator[ManagementApi]:
    adapter = ManagementApi("http://admin:pw@mgmt:15672", transport=httpx.MockTransport(fake))
    yield adapter
    adapter.close()


def test_management_api_policy_round_trip_uses_encoded_vhost_paths(api: ManagementApi, fake: FakeManagement) -> None:
    api.put_policy("/", "amqpc.p", "^amqpc\\.", {"max-length": 3}, "queues", 7)
    assert fake.requests[-1].url.raw_path == b"/api/policies/%2F/amqpc.p"
    assert json.loads(fake.requests[-1].content) == {"pattern": "^amqpc\\.", "definition": {"max-length": 3},
                                                     "apply-to": "queues", "priority": 7}
    assert api.get_policy("/", "amqpc.p") == Policy("/", "amqpc.p", "^amqpc\\.", {"max-length": 3}, "queues", 7)
    api.delete_policy("/", "amqpc.p")
    assert api.get_policy("/", "amqpc.p") is None
    api.delete_policy("/", "amqpc.p")  # deleting a missing policy is not an error


def test_management_api_lists_and_closes(api: ManagementApi, fake: FakeManagement) -> None:
    (queue,) = api.list_queues("/")
    assert (queue.name, queue.messages, queue.arguments) == ("amqpc.q", 2, {"x-max-length": 5})
    assert api.list_exchanges("/") == ["amq.direct", "amqpc.x"]
    (conn,) = api.list_connections()
    assert (conn.peer_port, conn.client_properties) == (1, {"product": "p"})
    api.close_connection(conn.name, "test over")
    assert fake.closed == [("127.0.0.1%3A1%20-%3E%20127.0.0.1%3A5672", "test over")]


def test_management_api_reads_alarms_from_the_health_check_not_the_stale_node_statistics(
        api: ManagementApi, fake: FakeManagement) -> None:
    """/api/nodes' mem_alarm is the statistics emitted last (every 5 s): an alarm cleared just before
    still shows there. The health check reads rabbit_alarm when asked, and is what counts."""
    fake.node_alarms["mem_alarm"] = True  # cleared less than a statistics interval ago
    assert api.alarms() == frozenset()
    fake.health = [{"resource": "memory", "node": "rabbit@a"}, {"resource": "disk space", "node": "rabbit@b"}]
    assert api.alarms() == {"memory", "disk"}
    fake.health = None  # RabbitMQ 3.8.0 to 3.8.9: no health check, the node statistics are all there is
    assert api.alarms() == {"memory"}
    assert [r.url.path for r in fake.requests[-2:]] == ["/api/health/checks/alarms", "/api/nodes"]


def test_management_api_errors_are_admin_errors_and_globals_unavailable(fake: FakeManagement) -> None:
    wrong = ManagementApi("http://admin:nope@mgmt:15672", transport=httpx.MockTransport(fake))
    with pytest.raises(AdminError, match="HTTP 401"):
        wrong.list_queues("/")

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    down = ManagementApi("http://mgmt:15672", transport=httpx.MockTransport(refuse))
    with pytest.raises(AdminError, match="connection refused"):
        down.list_connections()
    with pytest.raises(AdminError, match="connection refused"):
        down.set_global("consumer_timeout", 1000)
    # RabbitMQ's API has no consumer_timeout (404): Unavailable; the reference broker's has it
    rabbit = ManagementApi("http://admin:pw@mgmt:15672", transport=httpx.MockTransport(fake))
    with pytest.raises(Unavailable, match="rabbitmqctl"):
        rabbit.set_global("consumer_timeout", 1000)


# -- RestoringAdmin -----------------------------------------------------------------------------
def test_restoring_admin_undoes_every_change_newest_first() -> None:
    memory = MemoryAdmin()
    memory.put_policy("/", "kept", "^a$", {"max-length": 1})
    view = RestoringAdmin(memory, "/")
    view.put_policy("/", "kept", "^b$", {"max-length": 2})
    view.put_policy("/", "new", "^c$", {"message-ttl": 5})
    view.set_global("consumer_timeout", 5000)
    view.set_global("consumer_timeout", 6000)
    view.set_global("channel_tick_interval", 1000)
    assert memory.settings["consumer_timeout"] == 6000
    view.restore()
    assert memory.policies == {("/", "kept"): Policy("/", "kept", "^a$", {"max-length": 1}, "queues", 0)}
    assert memory.settings == {"consumer_timeout": 1_800_000, "channel_tick_interval": None}


def test_restoring_admin_reports_what_it_could_not_undo() -> None:
    memory = MemoryAdmin()
    view = RestoringAdmin(memory)
    view.put_policy("/", "p", ".*", {})
    view.set_global("consumer_timeout", 10)
    memory.fail_undo = True
    with pytest.raises(AdminError, match="could not restore the broker: policy 'p'"):
        view.restore()
    assert memory.settings["consumer_timeout"] == 1_800_000  # the other undo still ran


# -- Rabbitmqctl's command lines and parsing (canned output) -------------------------------------
def test_rabbitmqctl_command_lines_and_parsing() -> None:
    ctl = CannedRabbitmqctl({
        "list_queues": '[\n{"name":"amqpc.q","messages":1,"consumers":0,"type":"classic",'
                       '"arguments":[["x-max-length","byte",5],["x-dead","table",[["k","longstr","v"]]]]}\n]',
        "list_policies": '[{"vhost":"/","name":"p","pattern":"^q$","apply-to":"queues",'
                         '"definition":"{\\"max-length\\":3}","priority":1}]',
        "list_connections -q": "<rabbit@h.1.2.0>\t127.0.0.1:1 -> 127.0.0.1:5672\n",
        "eval application:get_env(rabbit, consumer_timeout).": "{ok,1800000}\n",
        "eval application:get_env(rabbit, channel_tick_interval).": "undefined\n",
    })
    (queue,) = ctl.list_queues("/")
    assert queue.arguments == {"x-max-length": 5, "x-dead": {"k": "v"}}
    assert ctl.get_policy("/", "p") == Policy("/", "p", "^q$", {"max-length": 3}, "queues", 1)
    assert ctl.get_policy("/", "other") is None
    ctl.put_policy("/v", "p", "^q$", {"message-ttl": 5}, "queues", 2)
    assert ctl.calls[-1] == ["set_policy", "-p", "/v", "--priority", "2", "--apply-to", "queues", "p", "^q$",
                             '{"message-ttl": 5}']
    ctl.close_connection("127.0.0.1:1 -> 127.0.0.1:5672", "bye")
    assert ctl.calls[-1] == ["close_connection", "<rabbit@h.1.2.0>", "bye"]
    assert ctl.get_global("consumer_timeout") == 1_800_000
    assert ctl.get_global("channel_tick_interval") is None
    ctl.set_global("consumer_timeout", 5000)
    ctl.set_global("global_qos", True)
    ctl.set_global("channel_tick_interval", None)
    assert [c[1] for c in ctl.calls[-3:]] == ["application:set_env(rabbit, consumer_timeout, 5000).",
                                             "application:set_env(rabbit, global_qos, true).",
                                             "application:unset_env(rabbit, channel_tick_interval)."]
    with pytest.raises(ValueError, match="not a setting name"):
        ctl.get_global("consumer_timeout). halt(")


def test_rabbitmqctl_failures_are_admin_errors() -> None:
    missing = Rabbitmqctl("no-such-rabbitmqctl-here")
    with pytest.raises(AdminError, match="not found"):
        missing.list_exchanges("/")
    failing = Rabbitmqctl("sh -c 'echo Error: >&2; echo Parameter does not exist >&2; exit 69' --")
    failing.delete_policy("/", "gone")  # a missing policy is not an error
    with pytest.raises(AdminError, match="exited 69: Parameter does not exist"):
        failing.list_exchanges("/")


# -- the real RabbitMQ --------------------------------------------------------------------------
def _management_up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/overview", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def queue_with_arguments(url: str) -> Iterator[str]:
    """A queue with arguments on a live RabbitMQ (deleted afterwards)."""
    queue = f"amqpc.admin.{uuid.uuid4().hex[:8]}"
    try:
        client = RawClient(url, timeout=5.0).connect()
    except OSError as exc:
        require(False, f"RabbitMQ at {url} ({exc})")
    try:
        ch = client.channel()
        client.rpc(ch, QueueDeclare(queue=queue, arguments={"x-max-length": 5}), QueueDeclareOk)
        yield queue
        client.rpc(ch, QueueDelete(queue=queue), QueueDeleteOk)
    finally:
        client.close()


@pytest.fixture
def rabbitmq_queue() -> Iterator[str]:
    """A queue with arguments on the local RabbitMQ 3.10.8."""
    with queue_with_arguments(RABBITMQ_URL) as queue:
        yield queue


@pytest.fixture
def rabbitmq43_queue() -> Iterator[str]:
    """A queue with arguments on RabbitMQ 4.3.6 (scripts/rabbitmq4.sh up 4.3)."""
    with queue_with_arguments(RMQ43_URL) as queue:
        yield queue


@pytest.mark.rabbitmq43
def test_management_api_against_rabbitmq_4_3_6(rabbitmq43_queue: str) -> None:
    queue = rabbitmq43_queue
    require(_management_up(RMQ43_MANAGEMENT), f"RabbitMQ 4.3.6's management API at {redact_url(RMQ43_MANAGEMENT)}")
    admin = ManagementApi(RMQ43_MANAGEMENT)
    policy = f"amqpc.admin.{uuid.uuid4().hex[:8]}"
    try:
        listed = {q.name: q for q in admin.list_queues("/")}
        arguments = dict(listed[queue].arguments)
        assert arguments.pop("x-queue-type", "classic") == "classic"  # 4.x records the default type there
        assert (arguments, listed[queue].type) == ({"x-max-length": 5}, "classic")
        assert "amq.direct" in admin.list_exchanges("/")
        view = RestoringAdmin(admin)
        view.put_policy("/", policy, f"^{queue}$", {"max-length": 3}, "queues", 3)
        assert admin.get_policy("/", policy) == Policy("/", policy, f"^{queue}$", {"max-length": 3},
                                                       "queues", 3)
        view.restore()
        assert admin.get_policy("/", policy) is None
    finally:
        admin.delete_policy("/", policy)
        admin.close()


@pytest.mark.rabbitmq43
def test_management_api_reads_an_alarm_cleared_just_now_as_cleared_on_rabbitmq_4_3_6() -> None:
    """An alarm raised then cleared through rabbitmqctl: the management API adapter reads each at once,
    though /api/nodes may still show it for up to a statistics interval (collect_statistics_interval)."""
    require(_management_up(RMQ43_MANAGEMENT), f"RabbitMQ 4.3.6's management API at {redact_url(RMQ43_MANAGEMENT)}")
    ctl, api = Rabbitmqctl(f"{ROOT}/scripts/rabbitmq4.sh ctl 4.3"), ManagementApi(RMQ43_MANAGEMENT)
    view = RestoringAdmin(ctl)
    try:
        assert api.alarms() == frozenset(), "RabbitMQ 4.3.6 is in alarm before the test"
        view.set_alarm("memory", True)
        assert api.alarms() == {"memory"}
        view.set_alarm("memory", False)
        stale = any(n.get("mem_alarm") for n in httpx.get(f"{RMQ43_MANAGEMENT}/api/nodes").json())
        assert api.alarms() == frozenset(), f"read as in alarm just after clearing (/api/nodes stale: {stale})"
    finally:
        view.restore()
        api.close()


@pytest.mark.rabbitmq
def test_rabbitmqctl_against_rabbitmq(rabbitmq_queue: str) -> None:
    """Few calls: every rabbitmqctl call boots an Erlang VM (~0.5 s)."""
    ctl = Rabbitmqctl()
    try:
        before = ctl.get_global("consumer_timeout")
    except AdminError as exc:
        require(False, f"rabbitmqctl and a running RabbitMQ ({exc})")
    view = RestoringAdmin(ctl)
    # a value one millisecond longer than the broker's: the round trip is shown, and the other tests
    # running on this RabbitMQ at the same time (make test runs pytest-xdist workers) see no change
    changed = (before if isinstance(before, int) else 1_800_000) + 1
    try:
        view.set_global("consumer_timeout", changed)
        assert ctl.get_global("consumer_timeout") == changed
    finally:
        view.restore()
    assert ctl.get_global("consumer_timeout") == before
    assert {q.name: q for q in ctl.list_queues("/")}[rabbitmq_queue].arguments == {"x-max-length": 5}
    client = RawClient(RABBITMQ_URL).connect()
    try:
        port = client.sock.getsockname()[1] if client.sock else 0
        (mine,) = [c for c in ctl.list_connections() if c.peer_port == port]
        assert mine.client_properties["product"] == "amqp-conformance"
        ctl.close_connection(mine.name, "closed by the admin test")
        close = client.expect(0, ConnectionClose, timeout=5.0).method
        assert isinstance(close, ConnectionClose) and close.reply_code == 320  # CONNECTION_FORCED
    finally:
        client.close()
