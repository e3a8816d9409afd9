"""The management HTTP API subset the harness needs, on RabbitMQ's paths and JSON shapes.

Rules:
- aiohttp on the broker's event loop; handlers read and change the core directly (same
  thread), and route connection closes through the server so effects are executed.
- Basic auth with the broker's users (401 otherwise); a user with vhost permissions sees
  only those vhosts (403 for others).
- Paths: GET /api/overview, GET /api/definitions, GET /api/policies[/{vhost}[/{name}]],
  PUT/DELETE /api/policies/{vhost}/{name}, GET /api/queues[/{vhost}[/{name}]],
  GET /api/exchanges[/{vhost}], GET /api/connections, DELETE /api/connections/{name}
  (320 CONNECTION_FORCED).
- Extension (not in RabbitMQ): GET/PUT /api/global-parameters/consumer_timeout changes the
  global consumer timeout at runtime (value in ms); legacy-mode channels read it at open.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from reference_broker.core.state import Queue

if TYPE_CHECKING:
    from reference_broker.server import BrokerServer

POLICY_KEYS = {"consumer-timeout", "max-length", "message-ttl", "dead-letter-exchange",
               "dead-letter-routing-key", "delivery-limit", "overflow", "expires",
               # accepted, no effect on a single node (TMO-4.3-6)
               "consumer-disconnected-timeout"}
APPLY_TO = {"all", "queues", "exchanges", "classic_queues", "quorum_queues"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SERVER_KEY: web.AppKey[Any] = web.AppKey("server")


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    server: BrokerServer = request.app[SERVER_KEY]
    header = request.headers.get("Authorization", "")
    user = None
    if header.startswith("Basic "):
        try:
            name, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            name, password = "", ""
        expected = server.config.users.get(name)
        if expected is not None and hmac.compare_digest(expected.encode(), password.encode()):
            user = name
    if user is None:
        return web.json_response({"error": "not_authorised", "reason": "Login failed"}, status=401,
                                 headers={"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'})
    request["user"] = user
    vhost = request.match_info.get("vhost")
    if vhost is not None and not _allowed(server, user, vhost):
        return web.json_response({"error": "not_authorised", "reason": "Access refused."}, status=403)
    return await handler(request)


def _allowed(server: BrokerServer, user: str, vhost: str) -> bool:
    entries = server.config.permissions.get(user)
    return entries is None or vhost in entries


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
    server: BrokerServer = request.app[SERVER_KEY]
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


def _visible(request: web.Request) -> list[str]:
    server: BrokerServer = request.app[SERVER_KEY]
    return [v for v in server.core.vhosts if _allowed(server, request["user"], v)]


async def queues(request: web.Request) -> web.Response:
    server: BrokerServer = request.app[SERVER_KEY]
    vhost = request.match_info.get("vhost")
    if vhost is not None and vhost not in server.core.vhosts:
        return web.json_response({"error": "Object Not Found", "reason": "Not Found"}, status=404)
    names = [vhost] if vhost is not None else _visible(request)
    found = [queue_json(server, q) for v in names for q in server.core.vhosts[v].queues.values()]
    return web.json_response(sorted(found, key=lambda q: (q["vhost"], q["name"])))


async def queue(request: web.Request) -> web.Response:
    server: BrokerServer = request.app[SERVER_KEY]
    q = server.core.find_queue(request.match_info["vhost"], request.match_info["name"])
    if q is None:
        return web.json_response({"error": "Object Not Found", "reason": "Not Found"}, status=404)
    return web.json_response(queue_json(server, q))


def _policies(server: BrokerServer, vhost: str) -> list[dict[str, Any]]:
    return [{"vhost": vhost, "name": name, **p} for name, p in sorted(server.core.policies.get(vhost, {}).items())]


async def policies(request: web.Request) -> web.Response:
    server: BrokerServer = request.app[SERVER_KEY]
    vhost = request.match_info.get("vhost")
    names = [vhost] if vhost is not None else _visible(request)
    return web.json_response([p for v in names for p in _policies(server, v)])


async def policy(request: web.Request) -> web.Response:
    server: BrokerServer = request.app[SERVER_KEY]
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    found = server.core.policies.get(vhost, {}).get(name)
    if found is None:
        return web.json_response({"error": "Object Not Found", "reason": "Not Found"}, status=404)
    return web.json_response({"vhost": vhost, "name": name, **found})


async def put_policy(request: web.Request) -> web.Response:
    server: BrokerServer = request.app[SERVER_KEY]
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    if vhost not in server.core.vhosts:
        return web.json_response({"error": "bad_request", "reason": f"vhost {vhost} not found"}, status=400)
    try:
        body = await request.json()
    except ValueError:
        return web.json_response({"error": "bad_request", "reason": "body is not JSON"}, status=400)
    problem = _check_policy(body, server.config.emulates)
    if problem:
        return web.json_response({"error": "bad_request", "reason": problem}, status=400)
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
    server: BrokerServer = request.app[SERVER_KEY]
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    table = dict(server.core.policies.get(vhost, {}))
    if table.pop(name, None) is None:
        return web.json_response({"error": "Object Not Found", "reason": "Not Found"}, status=404)
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


async def connections(request: web.Request) -> web.Response:
    server: BrokerServer = request.app[SERVER_KEY]
    visible = set(_visible(request))
    found = [c for conn_id in sorted(server.core.connections)
             if (c := _connection_json(server, conn_id)) is not None and c["vhost"] in visible]
    return web.json_response(found)


async def close_connection(request: web.Request) -> web.Response:
    server: BrokerServer = request.app[SERVER_KEY]
    name = request.match_info["name"]
    conn_id = next((i for i in server.core.connections if server.connection_name(i) == name), None)
    if conn_id is None:
        return web.json_response({"error": "Object Not Found", "reason": "Not Found"}, status=404)
    reason = request.headers.get("X-Reason", "Closed via management plugin")
    server.force_close(conn_id, reason)
    return web.Response(status=204)


async def exchanges(request: web.Request) -> web.Response:
    server: BrokerServer = request.app[SERVER_KEY]
    vhost = request.match_info.get("vhost")
    if vhost is not None and vhost not in server.core.vhosts:
        return web.json_response({"error": "Object Not Found", "reason": "Not Found"}, status=404)
    names = [vhost] if vhost is not None else _visible(request)
    return web.json_response([
        {"name": x.name, "vhost": v, "type": x.kind, "durable": x.durable, "auto_delete": x.auto_delete,
         "internal": x.internal, "arguments": x.arguments}
        for v in names for x in sorted(server.core.vhosts[v].exchanges.values(), key=lambda e: e.name)])


async def definitions(request: web.Request) -> web.Response:
    server: BrokerServer = request.app[SERVER_KEY]
    core = server.core
    vhosts = _visible(request)
    return web.json_response({
        "rabbit_version": server.config.emulates, "product_name": server.config.product,
        "users": [{"name": u, "tags": ["administrator"]} for u in sorted(server.config.users)],
        "vhosts": [{"name": v} for v in vhosts],
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
    server: BrokerServer = request.app[SERVER_KEY]
    return web.json_response({"name": "consumer_timeout", "value": server.config.consumer_timeout})


async def put_global(request: web.Request) -> web.Response:
    server: BrokerServer = request.app[SERVER_KEY]
    try:
        body = await request.json()
    except ValueError:
        return web.json_response({"error": "bad_request", "reason": "body is not JSON"}, status=400)
    value = body.get("value") if isinstance(body, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return web.json_response({"error": "bad_request", "reason": "value must be a positive integer (ms)"},
                                 status=400)
    server.config.consumer_timeout = value
    return web.Response(status=204)


def build_app(server: BrokerServer) -> web.Application:
    app = web.Application(middlewares=[_auth])
    app[SERVER_KEY] = server
    app.router.add_get("/api/overview", overview)
    app.router.add_get("/api/definitions", definitions)
    app.router.add_get("/api/queues", queues)
    app.router.add_get("/api/queues/{vhost}", queues)
    app.router.add_get("/api/queues/{vhost}/{name}", queue)
    app.router.add_get("/api/exchanges", exchanges)
    app.router.add_get("/api/exchanges/{vhost}", exchanges)
    app.router.add_get("/api/policies", policies)
    app.router.add_get("/api/policies/{vhost}", policies)
    app.router.add_get("/api/policies/{vhost}/{name}", policy)
    app.router.add_put("/api/policies/{vhost}/{name}", put_policy)
    app.router.add_delete("/api/policies/{vhost}/{name}", delete_policy)
    app.router.add_get("/api/connections", connections)
    app.router.add_delete("/api/connections/{name}", close_connection)
    app.router.add_get("/api/global-parameters/consumer_timeout", get_global)
    app.router.add_put("/api/global-parameters/consumer_timeout", put_global)
    return app
