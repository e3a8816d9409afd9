"""The management API of the nodes: the nodes and their alarms, where a queue lives, and
extensions to stop and start a node and to raise and clear resource alarms.

Rules:
- GET /api/nodes: RabbitMQ's list of nodes, each {"name", "running", "type": "disc",
  "mem_alarm", "disk_free_alarm"}, plus the extension "amqp_port" (a single node lists itself
  as running). Alarms are the broker's (cluster-wide, as RabbitMQ's block every node's publishers).
- PUT and DELETE /api/alarms/{resource} (extension, administrator; resource "memory" or
  "disk"): raise or clear that resource's alarm, as RabbitMQ's rabbit_alarm:set_alarm and
  clear_alarm do (204; 404 for another resource); GET /api/alarms lists the resources in alarm.
- GET /api/health/checks/alarms: RabbitMQ's health check, 200 {"status": "ok"} with no alarm,
  503 {"status": "failed", "reason", "alarms": [{"resource": "memory" | "disk space", "node"}]}
  (rabbit_alarm:format_as_map's names; the broker's alarms are cluster-wide, named on node 1).
- PUT /api/nodes/{node} {"running": false|true} (extension, administrator): stops or starts
  node 1..N of `reference-broker --nodes N`; it answers 204 once the node has stopped (its
  listener closed, its connections ended, the core told) or listens again; 400 on a bad body,
  404 for no such node, 409 when the node already is in that state. {"running": false,
  "crashed": true} kills it: the same, but the other nodes lose its connections as unreachable.
- A queue's JSON names its node as RabbitMQ does: "node" (a classic queue's node, a quorum
  queue's leader), and for quorum queues "leader", "members" and "online".
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aiohttp import web

from reference_broker.core.state import QUORUM, Queue
from reference_broker.core.texts import DISK, MEMORY, RESOURCES
from reference_broker.management_http import NOT_FOUND, BrokerServer, bad_request, json_body, server_of

SINGLE = "reference@localhost"
HEALTH_NAMES = {MEMORY: "memory", DISK: "disk space"}  # a resource -> its name in RabbitMQ's health check


def placement(server: BrokerServer, queue: Queue) -> dict[str, Any]:
    cluster = server.core.cluster
    if cluster is None:
        return {"node": SINGLE}
    found: dict[str, Any] = {"node": cluster.name(queue.node)}
    if queue.kind == QUORUM:
        found.update(leader=cluster.name(queue.node), members=[cluster.name(n) for n in queue.members],
                     online=[cluster.name(n) for n in queue.members if cluster.running(n)])
    return found


async def nodes(request: web.Request) -> web.Response:
    server = server_of(request)
    cluster = server.core.cluster
    alarms = {"mem_alarm": MEMORY in server.core.alarms, "disk_free_alarm": DISK in server.core.alarms}
    if cluster is None:
        return web.json_response([{"name": SINGLE, "running": True, "type": "disc",
                                   "amqp_port": server.node_ports.get(1), **alarms}])
    return web.json_response([{"name": cluster.name(n), "running": cluster.running(n), "type": "disc",
                               "amqp_port": server.node_ports.get(n), **alarms} for n in range(1, cluster.size + 1)])


async def alarms(request: web.Request) -> web.Response:
    return web.json_response(sorted(server_of(request).core.alarms))


async def health_alarms(request: web.Request) -> web.Response:
    server = server_of(request)
    raised = sorted(server.core.alarms)
    if not raised:
        return web.json_response({"status": "ok"})
    node = SINGLE if server.core.cluster is None else server.core.cluster.name(1)
    return web.json_response({"status": "failed", "reason": "There are alarms in effect in the cluster",
                              "alarms": [{"resource": HEALTH_NAMES[r], "node": node} for r in raised]},
                             status=HTTPStatus.SERVICE_UNAVAILABLE)


async def change_alarm(request: web.Request) -> web.Response:
    server, resource = server_of(request), request.match_info["resource"]
    if resource not in RESOURCES:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    server.execute([*server.core.set_alarm(resource, request.method == "PUT"), *server.core.flush()])
    return web.Response(status=204)


async def put_node(request: web.Request) -> web.Response:
    server = server_of(request)
    body = await json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("running"), bool) \
            or not isinstance(body.get("crashed", False), bool) or (body["running"] and body.get("crashed")):
        return bad_request('want {"running": true|false} or {"running": false, "crashed": true}')
    try:
        node = int(request.match_info["node"])
    except ValueError:
        node = 0
    cluster = server.core.cluster
    if cluster is None or not 1 <= node <= cluster.size:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    done = await (server.start_node(node) if body["running"] else server.stop_node(node, crash=body.get("crashed", False)))
    if not done:
        state = "running" if body["running"] else "stopped"
        return web.json_response({"error": "conflict", "reason": f"node {node} is {state} already"}, status=409)
    return web.Response(status=204)


CLUSTER_ROUTES: list[tuple[str, str, Any, str]] = [
    ("GET", "/api/nodes", nodes, "login"),
    ("PUT", "/api/nodes/{node}", put_node, "admin"),
    ("GET", "/api/alarms", alarms, "admin"),
    ("GET", "/api/health/checks/alarms", health_alarms, "login"),
    ("PUT", "/api/alarms/{resource}", change_alarm, "admin"),
    ("DELETE", "/api/alarms/{resource}", change_alarm, "admin"),
]
