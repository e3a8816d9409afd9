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
  GET/PUT/DELETE /api/permissions/{vhost}/{user}, GET /api/vhosts, GET/PUT/DELETE
  /api/vhosts/{name}, GET /api/topic-permissions, GET/PUT/DELETE
  /api/topic-permissions/{vhost}/{user}. User and permission changes act on the live broker
  (BrokerConfig.users / .permissions / .topic_permissions) at once and are stored with a
  data_dir. Deleting a vhost closes its connections (320) and drops its permissions.
- Extension (not in RabbitMQ): GET/PUT /api/global-parameters/consumer_timeout changes the
  global consumer timeout at runtime (value in ms); legacy-mode channels read it at open.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any

from aiohttp import web

from reference_broker import auth
from reference_broker.core.state import Queue
from reference_broker.management_cluster import CLUSTER_ROUTES, placement
from reference_broker.management_http import (
    NOT_FOUND,
    OBJECT,
    SERVER_KEY,
    TAGS_KEY,
    USER_KEY,
    BrokerServer,
    Handler,
    bad_request,
    credentials,
    definitions_changed,
    json_body,
    refused,
    server_of,
    visible,
)
from reference_broker.management_policies import delete_policy, policies, policy, policy_rows, put_policy


@web.middleware
async def _access(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authenticate, then authorise the route's access kind (rabbit_mgmt_util:is_authorized*)."""
    server = server_of(request)
    given = credentials(request)
    if given is None or not auth.check_password(server.config, *given):
        return refused("Login failed", ask=given is None)
    user, tags = given[0], auth.tags_of(server.config, given[0])
    if not auth.is_management_user(tags):
        return refused("Not management user")
    request[USER_KEY], request[TAGS_KEY] = user, tags
    route = request.match_info.route.resource
    kind = ACCESS.get((request.method, route.canonical if route else ""), "login")
    vhost = request.match_info.get("vhost")
    in_vhost = vhost is None or vhost not in server.core.vhosts or auth.may_open(server.config, user, vhost)
    if kind == "admin" and not auth.is_admin(tags):
        return refused("Not administrator user")
    if kind == "vhost" and not (auth.is_admin(tags) or in_vhost):
        return refused("User not authorised to access virtual host")
    if kind == "policies" and not (auth.is_admin(tags) or (auth.is_policymaker(tags) and in_vhost)):
        return refused(OBJECT)
    if kind == "policymaker" and not auth.is_policymaker(tags):
        return refused(OBJECT)
    response = await handler(request)
    if kind == "admin" and request.method != "GET" and response.status < 300:
        definitions_changed(server)
    return response


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
            "effective_policy_definition": core.policy_definition(q), **placement(server, q)}


async def overview(request: web.Request) -> web.Response:
    server = server_of(request)
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
    server = server_of(request)
    vhost = request.match_info.get("vhost")
    if vhost is not None and vhost not in server.core.vhosts:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    names = [vhost] if vhost is not None else visible(request)
    found = [queue_json(server, q) for v in names for q in server.core.vhosts[v].queues.values()]
    return web.json_response(sorted(found, key=lambda q: (q["vhost"], q["name"])))


async def queue(request: web.Request) -> web.Response:
    server = server_of(request)
    q = server.core.find_queue(request.match_info["vhost"], request.match_info["name"])
    if q is None:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    return web.json_response(queue_json(server, q))


def _connection_json(server: BrokerServer, conn_id: int) -> dict[str, Any] | None:
    conn = server.core.connections.get(conn_id)
    if conn is None:
        return None
    host, _, port = conn.name.partition(":")
    return {"name": server.connection_name(conn_id), "user": conn.user, "vhost": conn.vhost,
            "peer_host": host, "peer_port": int(port or 0), "channels": len(conn.channels),
            "client_properties": conn.client_properties, "state": "running" if conn.writable else "flow",
            "timeout": server.heartbeat_of(conn_id)}  # the negotiated heartbeat, as RabbitMQ's API names it


def _sees_connection(request: web.Request, row: dict[str, Any], deleting: bool = False) -> bool:
    """rabbit_mgmt_util:is_authorized_user: own connections, others for monitors (list) or
    administrators (close)."""
    tags = request[TAGS_KEY]
    return row["user"] == request[USER_KEY] or (auth.is_admin(tags) if deleting else auth.is_monitor(tags))


async def connections(request: web.Request) -> web.Response:
    server = server_of(request)
    rows = [c for conn_id in sorted(server.core.connections) if (c := _connection_json(server, conn_id))]
    return web.json_response([c for c in rows if _sees_connection(request, c)])


async def close_connection(request: web.Request) -> web.Response:
    server = server_of(request)
    name = request.match_info["name"]
    conn_id = next((i for i in server.core.connections if server.connection_name(i) == name), None)
    row = None if conn_id is None else _connection_json(server, conn_id)
    if conn_id is None or row is None:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    if not _sees_connection(request, row, deleting=True):
        return refused(OBJECT)
    server.force_close(conn_id, request.headers.get("X-Reason", "Closed via management plugin"))
    return web.Response(status=204)


async def exchanges(request: web.Request) -> web.Response:
    server = server_of(request)
    vhost = request.match_info.get("vhost")
    if vhost is not None and vhost not in server.core.vhosts:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    names = [vhost] if vhost is not None else visible(request)
    return web.json_response([
        {"name": x.name, "vhost": v, "type": x.kind, "durable": x.durable, "auto_delete": x.auto_delete,
         "internal": x.internal, "arguments": x.arguments}
        for v in names for x in sorted(server.core.vhosts[v].exchanges.values(), key=lambda e: e.name)])


async def users(request: web.Request) -> web.Response:
    server = server_of(request)
    return web.json_response([auth.user_definition(server.config, name) for name in sorted(server.config.users)])


async def user(request: web.Request) -> web.Response:
    server, name = server_of(request), request.match_info["name"]
    if name not in server.config.users:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    return web.json_response(auth.user_definition(server.config, name))


async def put_user(request: web.Request) -> web.Response:
    server, name = server_of(request), request.match_info["name"]
    body = await json_body(request)
    if not isinstance(body, dict):
        return bad_request("body must be a JSON object")
    created = name not in server.config.users
    problem = auth.put_user(server.config, name, body)
    return bad_request(problem) if problem else web.Response(status=201 if created else 204)


async def delete_user(request: web.Request) -> web.Response:
    if not auth.delete_user(server_of(request).config, request.match_info["name"]):
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    return web.Response(status=204)


async def permissions(request: web.Request) -> web.Response:
    server = server_of(request)
    return web.json_response(auth.permission_rows(server.config, server.config.users, server.core.vhosts))


async def permission(request: web.Request) -> web.Response:
    server, vhost, name = server_of(request), request.match_info["vhost"], request.match_info["user"]
    rows = auth.permission_rows(server.config, [name], [vhost]) if name in server.config.users else []
    return web.json_response(rows[0]) if rows else web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)


def _unknown_target(server: BrokerServer, vhost: str, name: str) -> web.Response | None:
    """A permission's vhost or user that does not exist: 404 or 400, as RabbitMQ's API."""
    if vhost not in server.core.vhosts:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    return bad_request(f"no_such_user: {name}") if name not in server.config.users else None


async def put_permission(request: web.Request) -> web.Response:
    server, vhost, name = server_of(request), request.match_info["vhost"], request.match_info["user"]
    if (unknown := _unknown_target(server, vhost, name)) is not None:
        return unknown
    body = await json_body(request)
    created = auth.permissions_of(server.config, name, vhost) is None
    problem = auth.set_permissions(server.config, name, vhost, body if isinstance(body, dict) else {},
                                   server.core.vhosts)
    return bad_request(problem) if problem else web.Response(status=201 if created else 204)


async def delete_permission(request: web.Request) -> web.Response:
    server, vhost, name = server_of(request), request.match_info["vhost"], request.match_info["user"]
    if name not in server.config.users or not auth.clear_permissions(server.config, name, vhost, server.core.vhosts):
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    return web.Response(status=204)


async def vhosts(request: web.Request) -> web.Response:
    return web.json_response([{"name": v} for v in visible(request)])


async def vhost_(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in server_of(request).core.vhosts:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    return web.json_response({"name": name})


async def put_vhost(request: web.Request) -> web.Response:
    server, name = server_of(request), request.match_info["name"]
    if name in server.core.vhosts:
        return web.Response(status=204)
    server.core.add_vhost(name)
    return web.Response(status=201)


async def delete_vhost(request: web.Request) -> web.Response:
    server, name = server_of(request), request.match_info["name"]
    if name not in server.core.vhosts or name in server.config.vhosts:  # a configured vhost stays
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    for conn_id, conn in list(server.core.connections.items()):
        if conn.vhost == name:
            server.force_close(conn_id, f"vhost '{name}' is deleted")
    for _ in range(40):  # their close-ok, 2 s at most (a client that never answers keeps it: 409)
        if not any(conn.vhost == name for conn in server.core.connections.values()):
            break
        await asyncio.sleep(0.05)
    else:
        return web.json_response({"error": "vhost in use", "reason": "connections are closing"},
                                 status=HTTPStatus.CONFLICT)
    del server.core.vhosts[name]
    server.core.policies.pop(name, None)
    for entries in server.config.permissions.values():
        entries.pop(name, None)
    for topic_entries in server.config.topic_permissions.values():
        topic_entries.pop(name, None)
    return web.Response(status=204)


async def topic_permissions(request: web.Request) -> web.Response:
    server = server_of(request)
    return web.json_response(auth.topic_permission_rows(server.config))


async def topic_permission(request: web.Request) -> web.Response:
    server, vhost, name = server_of(request), request.match_info["vhost"], request.match_info["user"]
    rows = [r for r in auth.topic_permission_rows(server.config) if (r["vhost"], r["user"]) == (vhost, name)]
    return web.json_response(rows) if rows else web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)


async def put_topic_permission(request: web.Request) -> web.Response:
    server, vhost, name = server_of(request), request.match_info["vhost"], request.match_info["user"]
    if (unknown := _unknown_target(server, vhost, name)) is not None:
        return unknown
    body = await json_body(request)
    problem = auth.set_topic_permissions(server.config, name, vhost, body if isinstance(body, dict) else {})
    return bad_request(problem) if problem else web.Response(status=201)


async def delete_topic_permission(request: web.Request) -> web.Response:
    server, vhost, name = server_of(request), request.match_info["vhost"], request.match_info["user"]
    if server.config.topic_permissions.get(name, {}).pop(vhost, None) is None:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    return web.Response(status=204)


async def definitions(request: web.Request) -> web.Response:
    server = server_of(request)
    core = server.core
    vhosts = list(core.vhosts)
    return web.json_response({
        "rabbit_version": server.config.emulates, "product_name": server.config.product,
        "users": [auth.user_definition(server.config, u) for u in sorted(server.config.users)],
        "vhosts": [{"name": v} for v in vhosts],
        "permissions": auth.permission_rows(server.config, server.config.users, vhosts),
        "policies": [p for v in vhosts for p in policy_rows(server, v)],
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
    return web.json_response({"name": "consumer_timeout", "value": server_of(request).config.consumer_timeout})


async def put_global(request: web.Request) -> web.Response:
    body = await json_body(request)
    value = body.get("value") if isinstance(body, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return bad_request("value must be a positive integer (ms)")
    server_of(request).config.consumer_timeout = value
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
    ("GET", "/api/operator-policies", policies, "admin"),  # POL-03: administrators only
    ("GET", "/api/operator-policies/{vhost}", policies, "admin"),
    ("GET", "/api/operator-policies/{vhost}/{name}", policy, "admin"),
    ("PUT", "/api/operator-policies/{vhost}/{name}", put_policy, "admin"),
    ("DELETE", "/api/operator-policies/{vhost}/{name}", delete_policy, "admin"),
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
    ("GET", "/api/vhosts", vhosts, "login"),
    ("GET", "/api/vhosts/{name}", vhost_, "admin"),
    ("PUT", "/api/vhosts/{name}", put_vhost, "admin"),
    ("DELETE", "/api/vhosts/{name}", delete_vhost, "admin"),
    ("GET", "/api/topic-permissions", topic_permissions, "admin"),
    ("GET", "/api/topic-permissions/{vhost}/{user}", topic_permission, "admin"),
    ("PUT", "/api/topic-permissions/{vhost}/{user}", put_topic_permission, "admin"),
    ("DELETE", "/api/topic-permissions/{vhost}/{user}", delete_topic_permission, "admin"),
    ("GET", "/api/global-parameters/consumer_timeout", get_global, "policymaker"),
    ("PUT", "/api/global-parameters/consumer_timeout", put_global, "policymaker"),
    *CLUSTER_ROUTES,
]
ACCESS = {(method, path): access for method, path, _handler, access in ROUTES}


def build_app(server: BrokerServer) -> web.Application:
    app = web.Application(middlewares=[_access])
    app[SERVER_KEY] = server
    for method, path, handler, _access_kind in ROUTES:
        app.router.add_route(method, path, handler)
    return app
