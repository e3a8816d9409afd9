"""An installed amqp-conformance judges every client outside this repository.

The wheel (`pip wheel`, hatchling from the configured index) ships every adapter source as
package data; the clients run from the wheel's own files, from another directory, build their
compiled adapter into a fresh cache and judge a scenario. A missing runtime, toolchain or library
is one line naming a Debian package that exists (dpkg or apt knows it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from conformance.drivers import build, registry
from conformance.drivers.registry import REGISTRY, ClientUnavailable
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^client '(?P<client>[^']+)' (needs \S+|is not installed) \(apt-get install (?P<package>[^)\s]+)\)$")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=240, check=False)
    require(done.returncode == 0, f"a wheel of the project (pip wheel: {done.stderr.strip()[-300:]})")
    [found] = out.glob("amqp_conformance-*.whl")
    return found


@pytest.mark.gate  # builds the wheel (pip wheel): `make test-gates`
def test_the_wheel_ships_every_adapter_source(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for spec in REGISTRY.values():
        if spec.adapter is None:
            continue
        files = build.sources(spec) if spec.build is not None else [spec.adapter_path()]
        expected |= {p.relative_to(ROOT).as_posix() for p in files}
    assert {"conformance/drivers/go/adapter.go", "conformance/drivers/java/AmqpAdapter.java",
            "conformance/drivers/c/adapter.c", "conformance/drivers/c/json_lines.h",
            "conformance/drivers/ruby/adapter.rb", "conformance/drivers/php/adapter.php",
            "conformance/drivers/node/amqplib_adapter.js"} <= expected
    assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"


@pytest.mark.gate  # the wheel, installed elsewhere, builds an adapter: `make test-gates`
def test_the_installed_package_builds_and_judges_a_client_from_another_directory(wheel: Path,
                                                                                  tmp_path: Path) -> None:
    """The wheel's files alone (no repository on the path): rabbitmq-c is built into a fresh cache and judged."""
    try:
        REGISTRY["rabbitmq-c"].check()
    except ClientUnavailable as exc:
        require(False, str(exc))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site), "AMQPC_ADAPTER_CACHE": str(tmp_path / "cache")}
    argv = [sys.executable, "-c", "import sys, conformance; assert conformance.__file__.startswith(sys.argv[1]); "
            "from conformance.cli import main; sys.exit(main(sys.argv[2:]))", str(site),
            "clients", "--client", "rabbitmq-c", "--scenario", "redelivered", "--out", str(tmp_path / "out")]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rabbitmq-c adapter: built in" in done.stdout and str(tmp_path / "cache") in done.stdout
    [case] = ET.parse(tmp_path / "out" / "junit.xml").getroot().iter("testcase")
    assert case.get("name") == "redelivered [rabbitmq-c]" and case.find("failure") is None


def _debian_package_known(package: str) -> bool:
    for argv in (["dpkg-query", "-W", package], ["apt-cache", "show", "--no-all-versions", package]):
        if shutil.which(argv[0]) and subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0:
            return True
    return False


def _without(monkeypatch: pytest.MonkeyPatch, tools: set[str]) -> None:
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda tool, *a, **k: None if tool in tools else which(tool, *a, **k))


DEBIAN_CLIENTS = [s.name for s in REGISTRY.values() if s.package_source == "debian"]


@pytest.mark.parametrize("client", [s.name for s in REGISTRY.values() if s.language != "python"])
def test_a_missing_runtime_or_toolchain_is_one_line_naming_a_debian_package(client: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    spec = REGISTRY[client]
    require(spec.installed_version(), spec.install_hint)
    tools = {tool for tool, _package in build.TOOLCHAINS.get(spec.build.kind if spec.build else "", [])}
    tools |= {registry.RUNTIMES[spec.language][0]} if spec.language in registry.RUNTIMES else set()
    assert tools, f"{client}: neither a runtime nor a toolchain"
    _without(monkeypatch, tools)
    with pytest.raises(ClientUnavailable) as raised:
        spec.check()
    line = str(raised.value)
    found = LINE.match(line)
    assert found and found["client"] == client and "\n" not in line, line
    assert _debian_package_known(found["package"]), f"{line}: no Debian package {found['package']!r}"


@pytest.mark.parametrize("client", DEBIAN_CLIENTS)
def test_a_missing_library_is_one_line_naming_its_debian_package(client: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "debian_version", lambda package: None)
    with pytest.raises(ClientUnavailable) as raised:
        REGISTRY[client].check()
    found = LINE.match(str(raised.value))
    assert found and found["package"] == REGISTRY[client].package, str(raised.value)
    assert _debian_package_known(found["package"]), f"{raised.value}: no Debian package {found['package']!r}"


def test_every_debian_package_the_registry_names_exists() -> None:
    """Also the files a build needs (libslf4j-java for the Java client's logging jars)."""
    named = {p for _tool, p in registry.RUNTIMES.values()} | {p for pairs in build.TOOLCHAINS.values() for _t, p in pairs}
    named |= {s.package for s in REGISTRY.values() if s.package_source == "debian"}
    named |= {p for s in REGISTRY.values() if s.build for _path, p in s.build.needs}
    unknown = sorted(p for p in named if not _debian_package_known(p))
    assert not unknown, f"no such Debian package (dpkg and apt-cache): {unknown}"
