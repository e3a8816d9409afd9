"""The client libraries `amqp-conformance clients` judges, and how to start their adapters.

Responsibility: `CLIENTS`, one `ClientSpec` per judged library: its language, the package
that provides it, whether (and which version) it is installed, and the adapter command line
(`conformance.drivers.adapter` for Python libraries, a Node program for amqplib). Adding a
client in another language means adding an adapter program and one entry here.

Rules: a client that is not installed is reported with one line saying how to install it;
nothing here starts a process except `start`.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from conformance.drivers.remote import RemoteDriver

NODE_ADAPTER = Path(__file__).resolve().parent.parent / "drivers" / "node" / "amqplib_adapter.js"


def node_prefix() -> Path:
    """Where the Node packages live (`make` installs them under the virtualenv)."""
    return Path(os.environ.get("AMQPC_NODE_PREFIX", Path(sys.prefix) / "node"))


@dataclass(frozen=True)
class ClientSpec:
    name: str
    language: str
    package: str  # the PyPI or npm package
    install_hint: str

    def installed_version(self) -> str | None:
        if self.language == "python":
            try:
                return version(self.package)
            except PackageNotFoundError:
                return None
        manifest = node_prefix() / "node_modules" / self.package / "package.json"
        if shutil.which("node") is None or not manifest.is_file():
            return None
        import json

        found = json.loads(manifest.read_text(encoding="utf-8")).get("version")
        return str(found) if found else None

    def command(self) -> list[str]:
        if self.language == "python":
            return [sys.executable, "-m", "conformance.drivers.adapter", self.name]
        return ["node", str(NODE_ADAPTER)]

    def start(self, timeout: float) -> RemoteDriver:
        env = dict(os.environ)
        env["AMQPC_ADAPTER_TIMEOUT"] = str(timeout)
        if self.language == "node":
            env["NODE_PATH"] = str(node_prefix() / "node_modules")
        return RemoteDriver(self.command(), timeout=timeout + 2.0, env=env)


CLIENTS: dict[str, ClientSpec] = {spec.name: spec for spec in (
    ClientSpec("pika", "python", "pika", "pip install pika"),
    ClientSpec("amqp", "python", "amqp", "pip install amqp"),
    ClientSpec("aio-pika", "python", "aio-pika", "pip install aio-pika"),
    ClientSpec("aiormq", "python", "aiormq", "pip install aiormq"),
    ClientSpec("kombu", "python", "kombu", "pip install kombu"),
    ClientSpec("amqplib", "node", "amqplib", "make .venv/.installed-stamp (npm install --prefix .venv/node amqplib)"),
)}


class UnknownClient(ValueError):
    """A client name that is not in CLIENTS, or one that is not installed (one line, exit 4)."""


def resolve(names: list[str]) -> list[ClientSpec]:
    """The specs for `names` (all installed clients when empty); UnknownClient names the problem."""
    if not names:
        return [spec for spec in CLIENTS.values() if spec.installed_version() is not None]
    specs = []
    for name in names:
        spec = CLIENTS.get(name)
        if spec is None:
            raise UnknownClient(f"unknown client {name!r}; known clients: {', '.join(CLIENTS)}")
        if spec.installed_version() is None:
            raise UnknownClient(f"client {name!r} is not installed ({spec.install_hint})")
        specs.append(spec)
    return specs
