"""The management API's policies: GET/PUT/DELETE /api/policies[/{vhost}[/{name}]] (RabbitMQ's
shapes and validation messages; the keys a policy may set per emulated version)."""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any

from aiohttp import web

from reference_broker.management_http import (
    NOT_FOUND,
    BrokerServer,
    bad_request,
    json_body,
    server_of,
    visible,
)

POLICY_KEYS = {"consumer-timeout", "max-length", "max-length-bytes", "message-ttl", "dead-letter-exchange", "alternate-exchange",
               "dead-letter-routing-key", "delivery-limit", "overflow", "expires",
               # accepted, no effect on a single node (TMO-4.3-6)
               "consumer-disconnected-timeout",
               "queue-mode"}  # accepted and ignored, as from RabbitMQ 3.12 (DCL-05)
APPLY_TO = {"all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams"}
OPERATOR_KEYS = {"expires", "message-ttl", "max-length", "max-length-bytes", "delivery-limit"}  # rabbit_policies


def _operator(request: web.Request) -> bool:
    """/api/operator-policies (POL-03) rather than /api/policies."""
    return request.path.startswith("/api/operator-policies")


def _table(server: BrokerServer, vhost: str, operator: bool = False) -> dict[str, dict[str, Any]]:
    return (server.core.operator_policies if operator else server.core.policies).get(vhost, {})


def policy_rows(server: BrokerServer, vhost: str, operator: bool = False) -> list[dict[str, Any]]:
    return [{"vhost": vhost, "name": name, **p} for name, p in sorted(_table(server, vhost, operator).items())]


async def policies(request: web.Request) -> web.Response:
    server = server_of(request)
    vhost = request.match_info.get("vhost")
    names = [vhost] if vhost is not None else visible(request)
    return web.json_response([p for v in names for p in policy_rows(server, v, _operator(request))])


async def policy(request: web.Request) -> web.Response:
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    found = _table(server_of(request), vhost, _operator(request)).get(name)
    if found is None:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    return web.json_response({"vhost": vhost, "name": name, **found})


async def put_policy(request: web.Request) -> web.Response:
    server = server_of(request)
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    if vhost not in server.core.vhosts:
        return bad_request(f"vhost {vhost} not found")
    body = await json_body(request)
    operator = _operator(request)
    problem = _check_policy(body, server.config.emulates, operator)
    if problem:
        return bad_request(problem)
    table = dict(_table(server, vhost, operator))
    created = name not in table
    table[name] = {"pattern": body["pattern"], "apply-to": body.get("apply-to", "all"),
                   "definition": dict(body["definition"]), "priority": int(body.get("priority", 0))}
    server.apply_policies(vhost, table, operator)
    return web.Response(status=201 if created else 204)


def _check_policy(body: Any, emulates: str, operator: bool = False) -> str:
    if not isinstance(body, dict) or not isinstance(body.get("pattern"), str):
        return "pattern is required"
    try:
        re.compile(body["pattern"])
    except re.error as exc:
        return f"Validation failed\n\n{body['pattern']} is not a valid regular expression ({exc})"
    definition = body.get("definition")
    if not isinstance(definition, dict) or not definition:
        return "definition must be a non-empty object"
    keys = OPERATOR_KEYS if operator else POLICY_KEYS - ({"consumer-timeout"} if emulates == "3.10" else set())  # TMO-03
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
    server = server_of(request)
    vhost, name = request.match_info["vhost"], request.match_info["name"]
    operator = _operator(request)
    table = dict(_table(server, vhost, operator))
    if table.pop(name, None) is None:
        return web.json_response(NOT_FOUND, status=HTTPStatus.NOT_FOUND)
    server.apply_policies(vhost, table, operator)
    return web.Response(status=204)
