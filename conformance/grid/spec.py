"""The grid file (TOML): which targets and which clients, read and checked.

Rules:
- `[[target]]` tables: `name` (unique, a path segment), and either `url` (a broker by URL) or
  none (the embedded reference broker); optional `admin`, `baseline`, `profile`, `jobs`,
  `start` and `stop` (shell commands run before and after the target's cells, `start` bounded
  by `start_timeout` seconds, default 600), `env` (a table of environment variables for the
  target's commands and cells), `clients` (this target's own list), `cluster_nodes` (the
  broker's other nodes, or `["embedded"]` for the embedded broker as a 3-node cluster) and
  `node_control` (as `run --cluster-node` and `--node-control`), `select` (this target's own
  areas or rule ids, in place of the grid's), `test_timeout` (each cell's `--test-timeout`).
- `clients` at the top: the default list for every target (default `["raw"]`); `select` (areas
  or rule ids passed to every cell's `--select`), `timeout_scale`.
- Anything else, or a value of the wrong type, is a `GridError` naming the key: the command
  prints it on one line and exits 4.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
TARGET_KEYS = {"name", "url", "admin", "baseline", "profile", "jobs", "start", "stop", "start_timeout", "env",
               "test_timeout",
               "clients", "cluster_nodes", "node_control", "select"}
TOP_KEYS = {"target", "clients", "select", "timeout_scale"}


class GridError(Exception):
    """A bad grid file: one line, exit 4."""


@dataclass(frozen=True)
class Target:
    name: str
    url: str | None = None  # None: the embedded reference broker
    admin: str | None = None
    baseline: str | None = None
    profile: str | None = None
    jobs: str | None = None
    start: str | None = None
    stop: str | None = None
    start_timeout: float = 600.0
    env: dict[str, str] = field(default_factory=dict)
    clients: tuple[str, ...] = ("raw",)
    cluster_nodes: tuple[str, ...] = ()
    node_control: str | None = None
    select: tuple[str, ...] | None = None  # None: the grid's
    test_timeout: float | None = None  # each cell's --test-timeout (None: the run's default)


@dataclass(frozen=True)
class Grid:
    targets: tuple[Target, ...]
    select: tuple[str, ...] = ()
    timeout_scale: float | None = None

    def cells(self) -> list[tuple[Target, str]]:
        return [(t, c) for t in self.targets for c in t.clients]


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in re.split(r"[\s,]+", value) if v]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise GridError(f"{where} must be a list of names")
    return tuple(value)


def _optional(table: dict[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, int) and key == "jobs":
        return str(value)
    if not isinstance(value, str) or not value:
        raise GridError(f"{where}: {key} must be a non-empty string")
    return value


def parse(text: str, source: str = "grid file") -> Grid:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GridError(f"{source}: {exc}") from None
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise GridError(f"{source}: unknown key {unknown[0]!r} (known: {', '.join(sorted(TOP_KEYS))})")
    clients = _strings(data.get("clients", ["raw"]), f"{source}: clients")
    select = _strings(data.get("select", []), f"{source}: select")
    scale = data.get("timeout_scale")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float) or scale <= 0):
        raise GridError(f"{source}: timeout_scale must be a positive number")
    tables = data.get("target")
    if not isinstance(tables, list) or not tables:
        raise GridError(f"{source}: no [[target]]")
    targets, names = [], set()
    for i, table in enumerate(tables, 1):
        where = f"{source}: target {i}"
        unknown = sorted(set(table) - TARGET_KEYS)
        if unknown:
            raise GridError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(TARGET_KEYS))})")
        name = table.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise GridError(f"{where}: name must be letters, digits, '.', '_' or '-' (got {name!r})")
        if name in names:
            raise GridError(f"{where}: a second target named {name!r}")
        names.add(name)
        env = table.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise GridError(f"{where}: env must be a table of strings")
        timeout = table.get("start_timeout", 600.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise GridError(f"{where}: start_timeout must be a positive number of seconds")
        test_timeout = table.get("test_timeout")
        if test_timeout is not None and (isinstance(test_timeout, bool) or not isinstance(test_timeout, int | float)
                                         or test_timeout <= 0):
            raise GridError(f"{where}: test_timeout must be a positive number of seconds")
        targets.append(Target(
            name, url=_optional(table, "url", where), admin=_optional(table, "admin", where),
            baseline=_optional(table, "baseline", where), profile=_optional(table, "profile", where),
            jobs=_optional(table, "jobs", where), start=_optional(table, "start", where),
            stop=_optional(table, "stop", where), start_timeout=float(timeout), env=dict(env),
            clients=_strings(table["clients"], f"{where}: clients") if "clients" in table else clients,
            cluster_nodes=_strings(table.get("cluster_nodes", []), f"{where}: cluster_nodes"),
            node_control=_optional(table, "node_control", where),
            select=_strings(table["select"], f"{where}: select") if "select" in table else None,
            test_timeout=float(test_timeout) if test_timeout is not None else None))
    return Grid(tuple(targets), select, float(scale) if scale is not None else None)


def load(path: Path) -> Grid:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise GridError(f"{path}: {exc.strerror or exc}") from None
    return parse(text, str(path))
