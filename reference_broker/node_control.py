"""`python -m reference_broker.node_control ADMIN_URL NODE stop|start|kill`: stop, start or kill (the
other nodes lose its connections as unreachable) a node of
`reference-broker --nodes N` through its management API (PUT /api/nodes/{node}), e.g. as a
--node-control template: "python -m reference_broker.node_control http://guest:guest@127.0.0.1:15672
{index} {action}".

Rules: it returns once the broker answered, which it does only when the node has stopped or
listens again (management_cluster.py); exit 0 then, and also when the node already was in
that state (said on stderr); 1 when the broker refused or did not answer within --timeout
seconds (default 30); 4 on bad arguments.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.error
import urllib.request
from urllib.parse import urlsplit


def request(admin: str, node: int, action: str, timeout: float) -> tuple[int, str]:
    parts = urlsplit(admin)
    url = f"{parts.scheme}://{parts.hostname}:{parts.port}/api/nodes/{node}"
    body = {"running": action == "start", **({"crashed": True} if action == "kill" else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    user, password = parts.username or "guest", parts.password or "guest"
    req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reference_broker.node_control")
    p.add_argument("admin", help="the management API, http://user:pass@host:port")
    p.add_argument("node", type=int)
    p.add_argument("action", choices=["stop", "start", "kill"])
    p.add_argument("--timeout", type=float, default=30.0)
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 4
    try:
        status, text = request(args.admin, args.node, args.action, args.timeout)
    except (OSError, ValueError) as exc:
        print(f"node_control: {args.action} node {args.node}: {exc}", file=sys.stderr)
        return 1
    if status == 204:
        return 0
    if status == 409:
        print(f"node_control: {text}", file=sys.stderr)
        return 0
    print(f"node_control: {args.action} node {args.node}: HTTP {status} {text}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
