"""Compiled adapters built on first use into a cache (docs/design.md decision 16).

Responsibility: `build_adapter(spec)`: find or build a compiled adapter (Go, Java, C) in
`cache_dir()/<client>-<hash>` and return the command line that starts it; `missing_toolchain`
names the Debian package a build lacks. The adapter sources ship inside the installed package
(conformance/drivers/<language>/), so an installed `amqp-conformance` builds them anywhere.

Rules:
- The cache is `$AMQPC_ADAPTER_CACHE`, else `$XDG_CACHE_HOME/amqp-conformance/adapters`, else
  `~/.cache/amqp-conformance/adapters`. The hash covers the adapter's sources, the builder and
  its options and the library's installed version: a change of any rebuilds, nothing else does.
- A build happens in a private temporary directory renamed into place at the end, so parallel
  builds of one adapter (test workers, several `clients` runs) never see half a build; the loser
  of the race keeps the winner's.
- Builds are offline: Go in GOPATH mode over Debian's /usr/share/gocode (GOPROXY=off,
  GOTOOLCHAIN=local, GOFLAGS cleared), Java against jars under /usr/share/java, C against the
  system's headers and libraries. Every build is bounded (`BUILD_TIMEOUT`).
- A missing tool or file is `ClientUnavailable` with one line naming the Debian package; a
  compiler that refuses the source is `BuildFailed` with the compiler's last lines.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the registry's Build and ClientSpec: the registry imports this module, so they are not imported back
Build = Any
ClientSpec = Any

BUILD_TIMEOUT = 300.0  # seconds for one compiler run
SOURCE_SUFFIXES = (".go", ".java", ".c", ".h")
GOPATH = "/usr/share/gocode"  # Debian's golang-*-dev packages put their sources under src/ here
JAVA_DIR = Path("/usr/share/java")
# the compiler each builder runs: (executable, Debian package)
TOOLCHAINS = {"go": [("go", "golang-go")], "java": [("javac", "openjdk-17-jdk-headless"),
                                                    ("java", "openjdk-17-jre-headless")],
              "c": [("cc", "gcc")]}


class BuildFailed(Exception):
    """The compiler refused the adapter (a harness bug or a library API the adapter does not fit)."""


@dataclass(frozen=True)
class Built:
    command: list[str]
    directory: Path | None  # where the build lives (None: not compiled)
    fresh: bool  # built just now (False: found in the cache)
    seconds: float  # the build's duration


def cache_dir() -> Path:
    override = os.environ.get("AMQPC_ADAPTER_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "amqp-conformance" / "adapters"


def missing_toolchain(build: Build) -> str | None:
    """'go (apt-get install golang-go)' for the first missing tool or file of a build, else None."""
    for tool, package in TOOLCHAINS[build.kind]:
        if shutil.which(tool) is None:
            return f"{tool} (apt-get install {package})"
    for path, package in build.needs:
        if not Path(path).exists():
            return f"{path} (apt-get install {package})"
    return None


def sources(spec: ClientSpec) -> list[Path]:
    folder = spec.adapter_path().parent
    return sorted(p for p in folder.iterdir() if p.suffix in SOURCE_SUFFIXES and p.is_file())


def source_hash(spec: ClientSpec) -> str:
    assert spec.build is not None
    digest = hashlib.sha256()
    for part in (spec.build.kind, *spec.build.options, spec.installed_version() or "", *spec.entry):
        digest.update(part.encode() + b"\0")
    for path in sources(spec):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_adapter(spec: ClientSpec) -> Built:
    """The adapter's command line; builds it into the cache unless it is there already."""
    assert spec.build is not None
    target = cache_dir() / f"{spec.name}-{source_hash(spec)}"
    builder = BUILDERS[spec.build.kind]
    if (target / ".complete").is_file():
        return Built(command_of(spec, target), target, False, 0.0)
    target.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        builder(spec, work)
        (work / ".complete").write_text(f"{spec.name} {spec.installed_version()}\n", encoding="utf-8")
        try:
            work.rename(target)
        except OSError:  # another process finished the same build first: keep theirs
            if not (target / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Built(command_of(spec, target), target, True, time.monotonic() - t0)


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
                              check=False)
    except subprocess.TimeoutExpired:
        raise BuildFailed(f"{argv[0]} did not finish within {BUILD_TIMEOUT:.0f} s") from None
    except OSError as exc:
        raise BuildFailed(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-8:])
        raise BuildFailed(f"{' '.join(argv[:2])} failed ({done.returncode}): {tail}")


def _go(spec: ClientSpec, work: Path) -> None:
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": os.pathsep.join(spec.build.options if spec.build else ())
           or GOPATH, "GOPROXY": "off", "GOTOOLCHAIN": "local", "GOFLAGS": "", "CGO_ENABLED": "0",
           "GOCACHE": str(work / "go-build")}
    _run(["go", "build", "-o", str(work / "adapter"), *(str(p) for p in sources(spec) if p.suffix == ".go")], work, env)
    shutil.rmtree(work / "go-build", ignore_errors=True)


def classpath(spec: ClientSpec) -> list[str]:
    return [str(JAVA_DIR / jar) for jar in (spec.build.options if spec.build else ())]


def _java(spec: ClientSpec, work: Path) -> None:
    javas = [str(p) for p in sources(spec) if p.suffix == ".java"]
    _run(["javac", "-encoding", "UTF-8", "-nowarn", "-d", str(work), "-cp", os.pathsep.join(classpath(spec)), *javas],
         work)


def _c(spec: ClientSpec, work: Path) -> None:
    cs = [str(p) for p in sources(spec) if p.suffix == ".c"]
    _run(["cc", "-O2", "-Wall", "-o", str(work / "adapter"), *cs, *(spec.build.options if spec.build else ())], work)


BUILDERS: dict[str, Callable[[ClientSpec, Path], None]] = {"go": _go, "java": _java, "c": _c}


def command_of(spec: ClientSpec, target: Path) -> list[str]:
    """How a built adapter starts: the binary, or the JVM on its classes and jars."""
    if spec.build is not None and spec.build.kind == "java":
        # a short-lived adapter: the client compiler and the serial collector start fastest on 2 cores
        return ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k",
                "-cp", os.pathsep.join([str(target), *classpath(spec)]), *spec.entry]
    return [str(target / "adapter")]
