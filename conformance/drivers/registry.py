"""The one client registry: every client library the harness knows, and how to reach it.

Responsibility: `REGISTRY`, one `ClientSpec` per library: its name, language, the package that
provides it (a PyPI, npm or Debian package, `package_source`), how to find the installed
version, the Python driver class (for Python libraries: the in-process `ClientDriver` that
`conformance.drivers.adapter` serves and that `run --client` uses), the
adapter program (a source under conformance/drivers/, shipped as package data) with how to
build it (`conformance.drivers.build`), and the command line that starts it. It is the only
table of clients: the suite's `--client` (`suite_clients`, `client_version`), the Python adapter
program (`python_drivers`) and the client judge (`amqp-conformance clients`) read it.

Adding a library of any language: write its adapter (docs/adapter-protocol.md) under
conformance/drivers/<language>/ and add one `ClientSpec` to `_SPECS`; for a compiled adapter
name its `Build` (kind "go", "java" or "c"; see `build.BUILDERS`).

Rules: nothing here starts a process except `ClientSpec.start` (and `dpkg-query`, read-only, for
a Debian package's version); a client that cannot run says why in one line naming the package
to install (`ClientUnavailable`); a compiled adapter is built on first use into the cache
(`build.cache_dir()`), never inside the installed package.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from conformance.drivers.build import Built, build_adapter, missing_toolchain
from conformance.drivers.remote import RemoteDriver

DRIVERS_DIR = Path(__file__).resolve().parent  # the adapter sources ship here, inside the package
RAW = "raw"  # the project's own codec client: `run --client raw`, not a library
# the runtime each interpreted language's adapter needs: (executable, Debian package)
RUNTIMES = {"node": ("node", "nodejs"), "ruby": ("ruby", "ruby"), "php": ("php", "php-cli")}


class ClientUnavailable(Exception):
    """A client that cannot be judged here: one line naming what to install."""


@dataclass(frozen=True)
class Build:
    """How a compiled adapter is built: the builder `kind` and its options (libraries, jars)."""

    kind: str  # a key of build.BUILDERS: "go", "java", "c"
    options: tuple[str, ...] = ()  # c: compiler/linker flags; java: jars under /usr/share/java; go: GOPATH entries
    needs: tuple[tuple[str, str], ...] = ()  # (a file the build needs, the Debian package that provides it)


@dataclass(frozen=True)
class ClientSpec:
    name: str
    language: str  # python, node, go, java, c, ruby, php
    package: str  # the PyPI (python), npm (node) or Debian (every other language) package
    install_hint: str  # what to run when the package is missing
    driver: str | None = None  # python: "module:Class", the in-process ClientDriver
    adapter: str | None = None  # the adapter source, relative to conformance/drivers/
    build: Build | None = None  # None: interpreted, run from its source
    entry: tuple[str, ...] = field(default=())  # java: the main class

    @property
    def package_source(self) -> str:
        return {"python": "pypi", "node": "npm"}.get(self.language, "debian")

    def installed_version(self) -> str | None:
        """The installed library's version, or None when its package is not installed."""
        if self.package_source == "pypi":
            try:
                return version(self.package)
            except PackageNotFoundError:
                return None
        if self.package_source == "npm":
            return npm_version(self.package)
        return debian_version(self.package)

    def adapter_path(self) -> Path:
        assert self.adapter is not None, f"{self.name} has no adapter program"
        return DRIVERS_DIR / self.adapter

    def check(self) -> None:
        """Raise ClientUnavailable (one line) when the library, its runtime or its toolchain is missing."""
        if self.installed_version() is None:
            raise ClientUnavailable(f"client {self.name!r} is not installed ({self.install_hint})")
        if self.language in RUNTIMES:
            tool, package = RUNTIMES[self.language]
            if shutil.which(tool) is None:
                raise ClientUnavailable(f"client {self.name!r} needs {tool} (apt-get install {package})")
        if self.build is not None:

            problem = missing_toolchain(self.build)
            if problem:
                raise ClientUnavailable(f"client {self.name!r} needs {problem}")

    def prepare(self) -> Built:
        """The adapter's command line, building it into the cache first if it is compiled and not built yet.

        ClientUnavailable when a package is missing; build.BuildFailed when the compiler refuses it.
        """

        self.check()
        if self.language == "python":
            return Built([sys.executable, "-m", "conformance.drivers.adapter", self.name], None, False, 0.0)
        if self.build is None:
            runtime = RUNTIMES[self.language][0]
            return Built([runtime, str(self.adapter_path())], None, False, 0.0)
        return build_adapter(self)

    def command(self) -> list[str]:
        return self.prepare().command

    def environment(self, timeout: float) -> dict[str, str]:
        env = dict(os.environ)
        env["AMQPC_ADAPTER_TIMEOUT"] = str(timeout)
        env["AMQPC_CLIENT_VERSION"] = self.installed_version() or "?"
        if self.language == "node":
            env["NODE_PATH"] = str(node_prefix() / "node_modules")
        return env

    def start(self, timeout: float) -> RemoteDriver:
        """Start the adapter (building it first if needed); RemoteDriver raises AdapterError if it will not."""

        return RemoteDriver(self.command(), timeout=timeout + 2.0, env=self.environment(timeout))


def node_prefix() -> Path:
    """Where the Node packages live (`make` installs them under the virtualenv)."""
    return Path(os.environ.get("AMQPC_NODE_PREFIX", Path(sys.prefix) / "node"))


def npm_version(package: str) -> str | None:
    manifest = node_prefix() / "node_modules" / package / "package.json"
    if not manifest.is_file():  # a missing node is its own line (RUNTIMES: apt-get install nodejs)
        return None
    found = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    return str(found) if found else None


@functools.lru_cache(maxsize=64)
def debian_version(package: str) -> str | None:
    """The upstream version of an installed Debian package ("1:1.5.0-2" -> "1.5.0"), or None."""
    if shutil.which("dpkg-query") is None:
        return None
    try:
        done = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Status} ${Version}", package],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    status, _, full = done.stdout.strip().partition(" ")
    if done.returncode != 0 or status != "installed" or not full:
        return None
    upstream = full.split(":", 1)[-1]
    return upstream.rsplit("-", 1)[0] if "-" in upstream else upstream


_SPECS = (
    ClientSpec("pika", "python", "pika", "pip install pika", driver="conformance.drivers.pika_client:PikaDriver"),
    ClientSpec("amqp", "python", "amqp", "pip install amqp", driver="conformance.drivers.amqp_client:AmqpDriver"),
    ClientSpec("aio-pika", "python", "aio-pika", "pip install aio-pika",
               driver="conformance.drivers.aio_clients:AioPikaDriver"),
    ClientSpec("aiormq", "python", "aiormq", "pip install aiormq", driver="conformance.drivers.aio_clients:AiormqDriver"),
    ClientSpec("kombu", "python", "kombu", "pip install kombu", driver="conformance.drivers.kombu_client:KombuDriver"),
    ClientSpec("amqplib", "node", "amqplib", "make .venv/.installed-stamp (npm install --prefix .venv/node amqplib)",
               adapter="node/amqplib_adapter.js"),
    ClientSpec("amqp091-go", "go", "golang-github-rabbitmq-amqp091-go-dev",
               "apt-get install golang-github-rabbitmq-amqp091-go-dev", adapter="go/adapter.go", build=Build("go")),
    ClientSpec("rabbitmq-java", "java", "librabbitmq-client-java", "apt-get install librabbitmq-client-java",
               adapter="java/AmqpAdapter.java", entry=("AmqpAdapter",),
               build=Build("java", ("amqp-client.jar", "slf4j-api.jar", "slf4j-simple.jar"),
                           needs=(("/usr/share/java/slf4j-api.jar", "libslf4j-java"),
                                  ("/usr/share/java/slf4j-simple.jar", "libslf4j-java")))),
    ClientSpec("rabbitmq-c", "c", "librabbitmq-dev", "apt-get install librabbitmq-dev", adapter="c/adapter.c",
               build=Build("c", ("-lrabbitmq",))),
    ClientSpec("bunny", "ruby", "ruby-bunny", "apt-get install ruby-bunny", adapter="ruby/adapter.rb"),
    ClientSpec("php-amqplib", "php", "php-amqplib", "apt-get install php-amqplib", adapter="php/adapter.php"),
)

REGISTRY: dict[str, ClientSpec] = {spec.name: spec for spec in _SPECS}


def python_drivers() -> dict[str, str]:
    """Python library name -> its in-process driver class ("module:Class")."""
    return {s.name: s.driver for s in REGISTRY.values() if s.driver is not None}


def suite_clients() -> tuple[str, ...]:
    """The `run --client` choices: raw first, then every library (the suite runs through each, a
    Python one in process, any other through its adapter program: conformance.drivers.suite_client)."""
    return (RAW, *REGISTRY)


def client_version(client: str) -> str | None:
    """The installed version of a library client; None for raw (or a library that is not installed)."""
    if client == RAW or client not in REGISTRY:
        return None
    return REGISTRY[client].installed_version()
