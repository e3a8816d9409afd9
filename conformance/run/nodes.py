"""The nodes of the broker's cluster: what `--cluster-node` and `--node-control` name, and
running the node command. No pytest here: the gate validates the options with it before a run.

Rules:
- `--broker-url` is node 1; each `--cluster-node URL` (amqp://, repeatable) is the next node, in
  order. `--node-control 'COMMAND …'` is a command template that stops or starts one node and
  returns once it is down or up: `{url}` (the node's AMQP URL as given), `{index}` (1, 2, …) and
  `{action}` (stop|start|kill; kill: the node dies at once, without closing its connections, as
  `docker kill` or SIGKILL: TMO-4.3-6.c's test) are replaced in each word (split like a shell line, run without a
  shell), so `{{.Name}}`-style braces of docker or kubectl templates pass through unchanged.
- `--cluster-node embedded` (without `--broker-url`): the run starts the embedded reference broker
  as a cluster of `EMBEDDED_NODES` nodes with its own node control (`embedded_cluster`).
- A bad combination is a usage error with one line (`parse_cluster`, ValueError): a URL that is
  not amqp://, a template without `{action}`, nodes without a template or the reverse, `embedded`
  beside a URL or a template.
- The node command runs bounded (`run_node_control`); what went wrong comes back as one line.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conformance.drivers.raw import BrokerAddress, DriverError, RawClient
from conformance.results.records import redact_url

EMBEDDED = "embedded"
EMBEDDED_NODES = 3


@dataclass(frozen=True)
class ClusterSpec:
    """The nodes of the broker's cluster (node 1 first) and the command that stops or starts one."""

    urls: tuple[str, ...]
    control: str

    def command(self, index: int, action: str) -> list[str]:
        """The node command for `index` (1-based) and `action`, as argv."""
        values = {"{url}": self.urls[index - 1], "{index}": str(index), "{action}": action}
        words = shlex.split(self.control)
        for placeholder, value in values.items():
            words = [word.replace(placeholder, value) for word in words]
        return words

    def describe(self) -> str:
        return f"{len(self.urls)} nodes; node control {self.control!r}"


def parse_cluster(broker_url: str | None, nodes: Sequence[str], control: str | None) -> ClusterSpec | None:
    """The cluster the options name (None: no cluster, or `embedded`: see `wants_embedded`);
    ValueError with one line for a bad combination."""
    if wants_embedded(nodes):
        if len(nodes) > 1 or broker_url:
            raise ValueError("--cluster-node embedded: alone and without --broker-url (it starts the embedded "
                             f"reference broker as a {EMBEDDED_NODES}-node cluster)")
        if control:
            raise ValueError("--cluster-node embedded brings its own node control: drop --node-control")
        return None
    for url in nodes:
        try:
            BrokerAddress.parse(url)
        except ValueError:
            raise ValueError(f"--cluster-node {url!r}: an amqp://user:pass@host:port/vhost URL "
                             f"(or '{EMBEDDED}' without --broker-url)") from None
    if nodes and not broker_url:
        raise ValueError("--cluster-node URL needs --broker-url (node 1 of the cluster)")
    if bool(nodes) != bool(control):
        raise ValueError("--cluster-node and --node-control go together: the cluster tests stop and start nodes")
    if control is None:
        return None
    try:
        words = shlex.split(control)
    except ValueError as exc:
        raise ValueError(f"--node-control {control!r}: {exc}") from None
    if not words or "{action}" not in control:
        raise ValueError(f"--node-control {control!r}: the command needs the placeholder {{action}} (stop|start|kill)")
    return ClusterSpec((str(broker_url), *nodes), control)


def wants_embedded(nodes: Sequence[str]) -> bool:
    return EMBEDDED in nodes


def embedded_cluster(broker: Any) -> ClusterSpec:
    """The cluster of an embedded reference broker started with `nodes`: its node URLs and its
    own node control (`python -m reference_broker.node_control`, through its management API)."""
    host = broker.host
    urls = tuple(f"amqp://guest:guest@{host}:{port}/" for _, port in sorted(broker.server.node_ports.items()))
    control = (f"{shlex.quote(sys.executable)} -m reference_broker.node_control "
               f"{shlex.quote(str(broker.management_url))} {{index}} {{action}}")
    return ClusterSpec(urls, control)


def cluster_urls(spec: ClusterSpec | None) -> list[str] | None:
    """The nodes of a run as its record keeps them (`RunRecord.cluster_nodes`): URLs without the password."""
    return None if spec is None else [redact_url(url) for url in spec.urls]


def run_node_control(spec: ClusterSpec, index: int, action: str, seconds: float) -> str | None:
    """Run the node command; None when it returned 0, else what went wrong (one line)."""
    argv = spec.command(index, action)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds, check=False)
    except subprocess.TimeoutExpired:
        return f"{shlex.join(argv)} did not return within {seconds:.0f} s"
    except OSError as exc:
        return f"{shlex.join(argv)}: {exc.strerror or exc}"
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        return f"{shlex.join(argv)} exited {done.returncode}: {tail or 'no output'}"
    return None


def wait_until_answering(url: str, seconds: float) -> str | None:
    """None once a connection to `url` opens; else the last error after `seconds`."""
    deadline, last = time.monotonic() + seconds, ""
    while time.monotonic() < deadline:
        try:
            with RawClient(url, timeout=5.0):
                return None
        except (OSError, DriverError) as exc:
            last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.25)
    return f"the node did not accept a connection within {seconds:.0f} s after the start ({last})"
