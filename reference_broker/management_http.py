"""The management API's shared parts: what it needs of the server, request keys, replies and
credentials (management.py serves the API, management_policies.py the policies paths)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from aiohttp import web

from reference_broker import auth
from reference_broker.config import BrokerConfig
from reference_broker.core import BrokerCore

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
    node_ports: dict[int, int]

    async def stop_node(self, node: int, crash: bool = False) -> bool: ...

    async def start_node(self, node: int) -> bool: ...

    def execute(self, outputs: Sequence[Any]) -> None: ...

    def connection_name(self, conn_id: int) -> str: ...

    def heartbeat_of(self, conn_id: int) -> int | None: ...

    def force_close(self, conn_id: int, reason: str) -> None: ...

    def apply_policies(self, vhost: str, policies: dict[str, dict[str, Any]], operator: bool = False) -> None: ...


def server_of(request: web.Request) -> BrokerServer:
    server: BrokerServer = request.app[SERVER_KEY]
    return server


def refused(reason: str, ask: bool = False) -> web.Response:
    """401 not_authorised; `ask` (no credentials given) adds the Basic challenge."""
    return web.json_response({"error": "not_authorised", "reason": reason}, status=401,
                             headers=REALM if ask else None)


def bad_request(reason: str) -> web.Response:
    return web.json_response({"error": "bad_request", "reason": reason}, status=400)


def credentials(request: web.Request) -> tuple[str, str] | None:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Basic "):
        return None
    try:
        name, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    return name, password


def definitions_changed(server: BrokerServer) -> None:
    """Users and permissions are durable definitions: with a data_dir they are journalled at
    the next flush (as BrokerCore.set_policies does for policies)."""
    server.core.defs_dirty = server.core.journal is not None
    server.execute(server.core.flush())


def visible(request: web.Request) -> list[str]:
    """rabbit_mgmt_util:list_visible_vhosts: every vhost for monitors, else the login vhosts."""
    server, tags = server_of(request), request[TAGS_KEY]
    return [v for v in server.core.vhosts
            if auth.is_monitor(tags) or auth.may_open(server.config, request[USER_KEY], v)]


async def json_body(request: web.Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        return None
