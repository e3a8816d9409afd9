"""The management HTTP API subset the harness needs, on RabbitMQ's paths and JSON shapes.

Rules:
- aiohttp on the broker's event loop; handlers read and change the core directly (same
  thread), and route connection closes through the server so effects are executed.
- Access as rabbit_mgmt_util decides it, every refusal a 401 `not_authorised` with
  RabbitMQ's reason: bad or unknown credentials "Login failed" (the same for both); a user
  without a management tag "Not management user"; per-vhost paths need the administrator
  tag or access to that vhost; policies need administrator, or policymaker plus the vhost;
  users, permissions and definitions need administrator; connections are listed and closed
  for their own user unless monitoring/administrator. Lists show only the vhosts a user may
  see. Tags and permissions: reference_broker.auth.
- Paths: GET /api/overview, /api/whoami, /api/definitions, GET /api/queues[/{vhost}[/{name}]],
  GET /api/exchanges[/{vhost}], GET /api/policies[/{vhost}[/{name}]], PUT/DELETE
  /api/policies/{vhost}/{name}, GET /api/connections, DELETE /api/connections/{name} (320
  CONNECTION_FORCED), GET /api/users, GET/PUT/DELETE /api/users/{name}, GET /api/permissions,
  GET/PUT/DELETE /api/permissions/{vhost}/{user}. User and permission changes act on the
  live broker (BrokerConfig.users / .permissions) at once and are stored with a data_dir.
- Extension (not in RabbitMQ): GET/PUT /api/global-parameters/consumer_timeout changes the
  global consumer timeout at runtime (value in ms); legacy-mode channels read it at open.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from aiohttp import web

from reference_broker import auth
from reference_broker.config import BrokerConfig
from reference_broker.core import BrokerCore
from reference_broker.core.state import Queue

POLICY_KEYS = {"consumer-timeout", "max-length", "message-ttl", "dead-letter-exchange",
               "dead-letter-routing-key", "delivery-limit", "overflow", "expires",
               # accepted, no effect on a single node (TMO-4.3-6)
               "consumer-disconnected-timeout"}
APPLY_TO = {"all", "queues", "exchanges", "classic_queues", "quorum_queues"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SERVER_KEY: web.AppKey[Any] = web.AppKey("server")
USER_KEY: web.RequestKey[str] = web.RequestKey("user", str)
TAGS_KEY: web.RequestKey[list[str]] = web.RequestKey("tags", list)
REALM = {"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'}
NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}
OBJECT = "User not authorised to access object"


class BrokerServer(Protocol):
    """What the API needs of the server (server.py's BrokerServer), which builds the app."""

    config: BrokerConfig
    core: BrokerCore

    def execute(self, outputs: Sequence[Any]) -> None: ...

    def connection_name(self, conn_id: int) -> str: ...

    def force_close(self, conn_id: int, reason: str) -> None: ...

    def apply_policies(self, vhost: str, policies: dict[str, dict[str, Any]]) -> None: ...


def _server(request: web.Request) -> BrokerServer:
    server: BrokerServer = request.app[SERVER_KEY]
    return server


def _refused(reason: str, ask: bool = False) -> web.Response:
    """401 not_authorised; `ask` (no credentials given) adds the Basic challenge."""
    return web.json_response({"error": "not_authorised", "reason": reason}, status=401,
                             headers=REALM if ask else None)


def _bad_request(reason: str) -> web.Response:
    return web.json_response({"error": "bad_request", "reason": reason}, status=400)


def _credentials(request: web.Request) -> tuple[str, str] | None:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Basic "):
        return None
    try:
        name, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    return name, password


@web.middleware
async def _access(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authenticate, then authorise the route's access kind (rabbit_mgmt_util:is_authorized*)."""
    server = _server(request)
    given = _credentials(request)
    if given is None or not auth.check_password(server.config, *given):
        return _refused("Login failed", ask=given is None)
    user, tags = given[0], auth.tags_of(server.config, given[0])
    if not auth.is_management_user(tags):
        return _refused("Not management user")
    request[USER_KEY], request[TAGS_KEY] = user, tags
    route = request.match_info.route.resource
    kind = ACCESS.get((request.method, route.canonical if route else ""), "login")
    vhost = request.match_info.get("vhost")
    in_vhost = vhost is None or vhost not in server.core.vhosts or auth.may_open(server.config, user, vhost)
    if kind == "admin" and not auth.is_admin(tags):
        return _refused("Not administrator user")
    if kind == "vhost" and not (auth.is_admin(tags) or in_vhost):
        return _refused("User not authorised to access virtual host")
    if kind == "policies" and not (auth.is_admin(tags) or (auth.is_policymaker(tags) and in_vhost)):
        return _refused(OBJECT)
    if kind == "policymaker" and not auth.is_policymaker(tags):
        return _refused(OBJECT)
    response = await handler(request)
    if kind == "admin" and request.method != "GET" and response.status < 300:
        _definitions_changed(server)
    return response


def _definitions_changed(server: BrokerServer) -> None:
    """Users and permissions are durable definitions: with a data_dir they are journalled at
    the next flush (as BrokerCore.set_policies does for policies)."""
    server.core.defs_dirty = server.core.journal is not None
    server.execute(server.core.flush())


def _visible(request: web.Request) -> list[str]:
    """rabbit_mgmt_util:list_visible_vhosts: every vhost for monitors, else the login vhosts."""
    server, tags = _server(request), request[TAGS_KEY]
    return [v for v in server.core.vhosts
            if auth.is_monitor(tags) or auth.may_open(server.config, request[USER_KEY], v)]


def queue_json(server: BrokerServer, q: Queue) -> dict[str, Any]:
    core = server.core
    consumers = []
    for c in q.consumers.values():
        conn = core.connections.get(c.conn)
        consumers.append({"consumer_tag": c.tag, "ack_required": not c.no_ack, "exclusive": c.exclusive,
                          "prefetch_count": c.prefetch, "arguments": c.arguments, "active": not c.timed_out,
                          "channel_details": {"number": c.channel, "connection_name": conn.name if conn else "",
                                              "user": conn.user if conn else ""}})
    policy = next((name for name, p in core.policies.get(q.vhost, {}).items()
                   if p.get("definition") == core.policy_definition(q) and core.policy_definition(q)), None)
    return {"name": q.name, "vhost": q.vhost, "type": q.kind, "durable": q.durable, "auto_delete": q.auto_delete,
            "exclusive": q.exclusive_owner is not None, "arguments": q.arguments, "state": "running",
            "messages": q.ready_count() + q.checked_out, "messages_ready": q.ready_count(),
            "messages_unacknowledged": q.checked_out, "consumers": len(q.consumers),
            "consumer_details": consumers, "policy": policy,
            "effective_policy_definition": core.policy_definition(q), "node": "reference@localhost"}


async def overview(request: web.Request) -> web.Response:
    server = _server(request)
    core = server.core
    queues = [q for v in core.vhosts.values() for q in v.queues.values()]
    return web.json_response({
        "management_version": server.config.version, "product_name": server.config.product,
        "product_version": server.config.version, "rabbitmq_version": server.config.emulates,
        "cluster_name": "reference@localhost", "node": "reference@localhost",
        "object_totals": {"connections": len(core.connections), "queues": len(queues),
                          "exchanges": sum(len(v.exchanges) for v in core.vhosts.values()),
                          "consumers": sum(len(q.consumers) for q in queues),
                          "channels": sum(len(c.channels) for c in core.connections.values())},
        "queue_totals": {"messages_ready": sum(q.ready_count() for q in queues),
                         "messages_unacknowledged": sum(q.checked_out for q in queues)},
        "consumer_timeout": server.config.consumer_timeout})


async def whoami(request: web.Request) -> web.Response:
    return web.json_response({"name": request[USER_KEY], "tags": request[TAGS_KEY]})


async def queues(request: web.Request) -> web.Response:
    server = _server(request)
    vhost = request.match_info.get("vhost")
    if vhost is not None and vhost not in server.core.vhosts:
        return web.json_response(NOT_FOUND, status=404)
    names = [vhost] if vhost is not None else _visible(request)
    found = [queue_json(server, q) for v in names for q in server.core.vhosts[v].queues.values()]
    return web.json_response(sorted(found, key=lambda q: (q["vhost"], q["name"])))


async def queue(request: web.Request) -> web.Response:
    server = _server(request)
    q = server.core.find_queue(request.match_info["vhost"], request.match_info["name"])
    if q is None:
        return web.json_response(NOT_FOUND, status=404)
    return web.json_response(queue_json(server, q))


def _policies(server: BrokerServer, vhost: str) -> list[dict[str, Any]]:
    return [{"vhost": vhost, "name": name, **p} for name, p in sorted(server.core.policies.get(vhost, {}).items())]


async def policies(request: web.Request) -> web.Response:
    server = _server(request)
    vhost = request.match_info.get("vhost")
    names = [vhost] if vhost is not None else _visible(request)
    return web.json_response([p for v in names for p in _policies(server, v)])


async def policy(request: web.Request) -> web.Response:
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    found = _server(request).core.policies.get(vhost, {}).get(name)
    if found is None:
        return web.json_response(NOT_FOUND, status=404)
    return web.json_response({"vhost": vhost, "name": name, **found})


async def _json_body(request: web.Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        return None


async def put_policy(request: web.Request) -> web.Response:
    server = _server(request)
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    if vhost not in server.core.vhosts:
        return _bad_request(f"vhost {vhost} not found")
    body = await _json_body(request)
    problem = _check_policy(body, server.config.emulates)
    if problem:
        return _bad_request(problem)
    table = dict(server.core.policies.get(vhost, {}))
    created = name not in table
    table[name] = {"pattern": body["pattern"], "apply-to": body.get("apply-to", "all"),
                   "definition": dict(body["definition"]), "priority": int(body.get("priority", 0))}
    server.apply_policies(vhost, table)
    return web.Response(status=201 if created else 204)


def _check_policy(body: Any, emulates: str) -> str:
    if not isinstance(body, dict) or not isinstance(body.get("pattern"), str):
        return "pattern is required"
    try:
        re.compile(body["pattern"])
    except re.error as exc:
        return f"Validation failed\n\n{body['pattern']} is not a valid regular expression ({exc})"
    definition = body.get("definition")
    if not isinstance(definition, dict) or not definition:
        return "definition must be a non-empty object"
    keys = POLICY_KEYS - ({"consumer-timeout"} if emulates == "3.10" else set())  # TMO-03: 3.12+
    unknown = sorted(set(definition) - keys)
    if unknown:
        return f"Validation failed\n\n[{{<<\"{unknown[0]}\">>,...}}] are not recognised policy settings"
    if body.get("apply-to", "all") not in APPLY_TO:
        return f"apply-to must be one of {sorted(APPLY_TO)}"
    priority = body.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        return "priority must be an integer"
    return ""


async def delete_policy(request: web.Request) -> web.Response:
    server = _server(request)
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    table = dict(server.core.policies.get(vhost, {}))
    if table.pop(name, None) is None:
        return web.json_response(NOT_FOUND, status=404)
    server.apply_policies(vhost, table)
    return web.Response(status=204)


def _connection_json(server: BrokerServer, conn_id: int) -> dict[str, Any] | None:
    conn = server.core.connections.get(conn_id)
    if conn is None:
        return None
    host, _, port = conn.name.partition(":")
    return {"name": server.connection_name(conn_id), "user": conn.user, "vhost": conn.vhost,
            "peer_host": host, "peer_port": int(port or 0), "channels": len(conn.channels),
            "client_properties": conn.client_properties, "state": "running" if conn.writable else "flow"}


def _sees_connection(request: web.Request, row: dict[str, Any], deleting: bool = False) -> bool:
    """rabbit_mgmt_util:is_authorized_user: own connections, others for monitors (list) or
    administrators (close)."""
    tags = request[TAGS_KEY]
    return row["user"] == request[USER_KEY] or (auth.is_admin(tags) if deleting else auth.is_monitor(tags))


async def connections(request: web.Request) -> web.Response:
    server = _server(request)
    rows = [c for conn_id in sorted(server.core.connections) if (c := _connection_json(server, conn_id))]
    return web.json_response([c for c in rows if _sees_connection(request, c)])


async def close_connection(request: web.Request) -> web.Response:
    server = _server(request)
    name = request.match_info["name"]
    conn_id = next((i for i in server.core.connections if server.connection_name(i) == name), None)
    row = None if conn_id is None else _connection_json(server, conn_id)
    if conn_id is None or row is None:
        return web.json_response(NOT_FOUND, status=404)
    if not _sees_connection(request, row, deleting=True):
        return _refused(OBJECT)
    server.force_close(conn_id, request.headers.get("X-Reason", "Closed via management plugin"))
    return web.Response(status=204)


async def exchanges(request: web.Request) -> web.Response:
    server = _server(request)
    vhost = request.match_info.get("vhost")
    if vhost is not None and vhost not in server.core.vhosts:
        return web.json_response(NOT_FOUND, status=404)
    names = [vhost] if vhost is not None else _visible(request)
    return web.json_response([
        {"name": x.name, "vhost": v, "type": x.kind, "durable": x.durable, "auto_delete": x.auto_delete,
         "internal": x.internal, "arguments": x.arguments}
        for v in names for x in sorted(server.core.vhosts[v].exchanges.values(), key=lambda e: e.name)])


async def users(request: web.Request) -> web.Response:
    server = _server(request)
    return web.json_response([auth.user_definition(server.config, name) for name in sorted(server.config.users)])


async def user(request: web.Request) -> web.Response:
    server, name = _server(request), request.match_info["name"]
    if name not in server.config.users:
        return web.json_response(NOT_FOUND, status=404)
    return web.json_response(auth.user_definition(server.config, name))


async def put_user(request: web.Request) -> web.Response:
    server, name = _server(request), request.match_info["name"]
    body = await _json_body(request)
    if not isinstance(body, dict):
        return _bad_request("body must be a JSON object")
    created = name not in server.config.users
    problem = auth.put_user(server.config, name, body)
    return _bad_request(problem) if problem else web.Response(status=201 if created else 204)


async def delete_user(request: web.Request) -> web.Response:
    if not auth.delete_user(_server(request).config, request.match_info["name"]):
        return web.json_response(NOT_FOUND, status=404)
    return web.Response(status=204)


async def permissions(request: web.Request) -> web.Response:
    server = _server(request)
    return web.json_response(auth.permission_rows(server.config, server.config.users, server.core.vhosts))


async def permission(request: web.Request) -> web.Response:
    server, vhost, name = _server(request), request.match_info["vhost"], request.match_info["user"]
    rows = auth.permission_rows(server.config, [name], [vhost]) if name in server.config.users else []
    return web.json_response(rows[0]) if rows else web.json_response(NOT_FOUND, status=404)


async def put_permission(request: web.Request) -> web.Response:
    server, vhost, name = _server(request), request.match_info["vhost"], request.match_info["user"]
    if vhost not in server.core.vhosts:
        return web.json_response(NOT_FOUND, status=404)
    if name not in server.config.users:
        return _bad_request(f"no_such_user: {name}")
    body = await _json_body(request)
    created = auth.permissions_of(server.config, name, vhost) is None
    problem = auth.set_permissions(server.config, name, vhost, body if isinstance(body, dict) else {},
                                   server.core.vhosts)
    return _bad_request(problem) if problem else web.Response(status=201 if created else 204)


async def delete_permission(request: web.Request) -> web.Response:
    server, vhost, name = _server(request), request.match_info["vhost"], request.match_info["user"]
    if name not in server.config.users or not auth.clear_permissions(server.config, name, vhost, server.core.vhosts):
        return web.json_response(NOT_FOUND, status=404)
    return web.Response(status=204)


async def definitions(request: web.Request) -> web.Response:
    server = _server(request)
    core = server.core
    vhosts = list(core.vhosts)
    return web.json_response({
        "rabbit_version": server.config.emulates, "product_name": server.config.product,
        "users": [auth.user_definition(server.config, u) for u in sorted(server.config.users)],
        "vhosts": [{"name": v} for v in vhosts],
        "permissions": auth.permission_rows(server.config, server.config.users, vhosts),
        "policies": [p for v in vhosts for p in _policies(server, v)],
        "queues": [{"name": q.name, "vhost": v, "durable": q.durable, "auto_delete": q.auto_delete,
                    "arguments": q.arguments} for v in vhosts for q in core.vhosts[v].queues.values()],
        "exchanges": [{"name": x.name, "vhost": v, "type": x.kind, "durable": x.durable,
                       "auto_delete": x.auto_delete, "internal": x.internal, "arguments": x.arguments}
                      for v in vhosts for x in core.vhosts[v].exchanges.values()
                      if x.name and not x.name.startswith("amq.")],
        "bindings": [{"source": x.name, "vhost": v, "destination": b.destination,
                      "destination_type": "exchange" if b.is_exchange else "queue",
                      "routing_key": b.routing_key, "arguments": b.arguments}
                     for v in vhosts for x in core.vhosts[v].exchanges.values() for b in x.bindings]})


async def get_global(request: web.Request) -> web.Response:
    return web.json_response({"name": "consumer_timeout", "value": _server(request).config.consumer_timeout})


async def put_global(request: web.Request) -> web.Response:
    body = await _json_body(request)
    value = body.get("value") if isinstance(body, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return _bad_request("value must be a positive integer (ms)")
    _server(request).config.consumer_timeout = value
    return web.Response(status=204)


# (method, path, handler, access): "login" any management user, "vhost" the path's vhost,
# "policies", "policymaker" (global parameters), "admin"
ROUTES: list[tuple[str, str, Handler, str]] = [
    ("GET", "/api/overview", overview, "login"),
    ("GET", "/api/whoami", whoami, "login"),
    ("GET", "/api/definitions", definitions, "admin"),
    ("GET", "/api/queues", queues, "login"),
    ("GET", "/api/queues/{vhost}", queues, "vhost"),
    ("GET", "/api/queues/{vhost}/{name}", queue, "vhost"),
    ("GET", "/api/exchanges", exchanges, "login"),
    ("GET", "/api/exchanges/{vhost}", exchanges, "vhost"),
    ("GET", "/api/policies", policies, "policies"),
    ("GET", "/api/policies/{vhost}", policies, "policies"),
    ("GET", "/api/policies/{vhost}/{name}", policy, "policies"),
    ("PUT", "/api/policies/{vhost}/{name}", put_policy, "policies"),
    ("DELETE", "/api/policies/{vhost}/{name}", delete_policy, "policies"),
    ("GET", "/api/connections", connections, "login"),
    ("DELETE", "/api/connections/{name}", close_connection, "login"),
    ("GET", "/api/users", users, "admin"),
    ("GET", "/api/users/{name}", user, "admin"),
    ("PUT", "/api/users/{name}", put_user, "admin"),
    ("DELETE", "/api/users/{name}", delete_user, "admin"),
    ("GET", "/api/permissions", permissions, "admin"),
    ("GET", "/api/permissions/{vhost}/{user}", permission, "admin"),
    ("PUT", "/api/permissions/{vhost}/{user}", put_permission, "admin"),
    ("DELETE", "/api/permissions/{vhost}/{user}", delete_permission, "admin"),
    ("GET", "/api/global-parameters/consumer_timeout", get_global, "policymaker"),
    ("PUT", "/api/global-parameters/consumer_timeout", put_global, "policymaker"),
]
ACCESS = {(method, path): access for method, path, _handler, access in ROUTES}


def build_app(server: BrokerServer) -> web.Application:
    app = web.Application(middlewares=[_access])
    app[SERVER_KEY] = server
    for method, path, handler, _access_kind in ROUTES:
        app.router.add_route(method, path, handler)
    return app
