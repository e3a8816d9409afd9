"""Broker configuration: defaults follow RabbitMQ 4.3 (RULES.md §9), overridable by a TOML file.

Rules: one dataclass, validated at load; a bad file gives one clear `ConfigError` line.
`timeout_mode = "legacy"` makes consumer timeouts behave like 3.x-4.2 (TMO-3x-*) and
`legacy_ruleset` picks 3.10 (global value only) or 3.12 (queue argument and policy too).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

# RabbitMQ's password hashing algorithms (definitions' `hashing_algorithm`; auth.py hashes)
SHA256, SHA512 = "rabbit_password_hashing_sha256", "rabbit_password_hashing_sha512"
ALGORITHMS: dict[str, Callable[..., Any]] = {SHA256: hashlib.sha256, SHA512: hashlib.sha512}
ENTRY_KEYS = {"password", "password_hash", "hashing_algorithm", "tags"}


class ConfigError(ValueError):
    """A configuration file or option that cannot be used."""


@dataclass(slots=True)
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 5673
    # user -> plaintext password, or a table {password | password_hash [, hashing_algorithm], tags}
    # (RabbitMQ's definitions shape; reference_broker.auth). Tags gate the management API.
    users: dict[str, str | dict[str, Any]] = field(
        default_factory=lambda: {"guest": {"password": "guest", "tags": ["administrator"]}})
    vhosts: list[str] = field(default_factory=lambda: ["/"])
    # user -> vhost -> (configure, write, read) regexes; missing = full access to every vhost
    permissions: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # user -> vhost -> exchange -> (write, read) regexes on routing keys (topic exchanges only, ACC-05)
    topic_permissions: dict[str, dict[str, dict[str, list[str]]]] = field(default_factory=dict)
    loopback_users: list[str] = field(default_factory=lambda: ["guest"])  # RabbitMQ's default
    frame_max: int = 131072  # FRM-01
    frame_min_size: int = 8192  # FRM-02 (4.1+)
    channel_max: int = 2047
    heartbeat: int = 60  # seconds, HB-01
    max_connections: int = 0  # node-wide; 0 = unlimited (RabbitMQ connection_max = infinity)
    handshake_timeout: int = 10_000  # ms from accept to connection.open-ok (RabbitMQ's); 0 = none
    consumer_timeout: int = 1_800_000  # ms, TMO-01
    max_message_size: int = 16 * 1024 * 1024  # PC-12, 4.0+
    memory_high_watermark: int = 1024 * 1024 * 1024  # ready octets before publishers block
    timeout_mode: str = "4.3"  # or "legacy"
    legacy_ruleset: str = "3.12"  # "3.10" or "3.12"
    tick_interval: int = 60_000  # ms, legacy channel tick (TMO-02)
    global_qos: bool = False  # 4.3 default: global=true treated per consumer (QOS-03)
    management_port: int | None = None
    nodes: int = 1  # a cluster of this many nodes on consecutive ports from `port`
    # ms a queue declared on one node of a cluster stays unknown to the others (core/cluster.py);
    # 0: none. A slow path, not a fault: RabbitMQ 4.2+'s Khepri projections apply late on a loaded node
    metadata_lag: int = 0
    data_dir: str | None = None  # durable storage (SQLite, WAL); None: nothing survives a restart
    faults: list[str] = field(default_factory=list)  # reference_broker.faults; never on by default
    product: str = "amqp-conformance reference broker"
    version: str = "0.1.0"
    # What connection.start advertises (None: RabbitMQ's table); harness self-tests of capability
    # profiles configure another product and table, and turn the "emulates" property off.
    capabilities: dict[str, bool] | None = None
    announce_emulation: bool = True

    def validate(self) -> BrokerConfig:
        if not (isinstance(self.loopback_users, list) and all(isinstance(u, str) for u in self.loopback_users)):
            raise ConfigError("loopback_users must be a list of user names")
        if self.timeout_mode not in ("4.3", "legacy"):
            raise ConfigError(f"timeout_mode must be '4.3' or 'legacy', not {self.timeout_mode!r}")
        if self.legacy_ruleset not in ("3.10", "3.12"):
            raise ConfigError(f"legacy_ruleset must be '3.10' or '3.12', not {self.legacy_ruleset!r}")
        for name in ("frame_max", "channel_max", "heartbeat", "tick_interval", "port", "max_connections",
                     "handshake_timeout"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative")
        for user, entry in self.users.items():
            if problem := user_entry_problem(entry):
                raise ConfigError(f"users[{user!r}]: {problem}")
        for user, entries in self.permissions.items():
            for vhost, regexes in entries.items():
                if not (isinstance(regexes, list) and len(regexes) == 3):
                    raise ConfigError(f"permissions[{user!r}][{vhost!r}] must be [configure, write, read]")
        if self.capabilities is not None and not (
                isinstance(self.capabilities, dict) and all(isinstance(v, bool) for v in self.capabilities.values())):
            raise ConfigError("capabilities must be a table of name = true|false")
        if not 1 <= self.nodes <= 9:
            raise ConfigError("nodes must be 1..9")
        if self.nodes > 1 and self.data_dir:
            raise ConfigError("a cluster (nodes > 1) keeps nothing on disk: no data_dir")
        if self.metadata_lag < 0 or (self.metadata_lag and self.nodes == 1):
            raise ConfigError("metadata_lag must be 0, or a positive integer (ms) for a cluster (nodes > 1)")
        if self.consumer_timeout <= 0:
            raise ConfigError("consumer_timeout must be a positive integer (ms)")
        if self.frame_max and self.frame_max < self.frame_min_size:
            raise ConfigError(f"frame_max must be 0 or at least {self.frame_min_size}")
        return self

    @property
    def emulates(self) -> str:
        """The RabbitMQ version whose rules this configuration follows."""
        if self.timeout_mode == "legacy":
            return "3.10" if self.legacy_ruleset == "3.10" else "3.12"
        return "4.3"


def user_entry_problem(entry: object) -> str:
    """Why a `users` value cannot be used ("" when it can)."""
    if isinstance(entry, str):
        return ""
    if not isinstance(entry, dict):
        return "must be a password string or a table"
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown:
        return f"unknown key(s) {', '.join(unknown)} (use {', '.join(sorted(ENTRY_KEYS))})"
    if ("password" in entry) == ("password_hash" in entry):
        return "give exactly one of password and password_hash"
    if "password" in entry and not isinstance(entry["password"], str):
        return "password must be a string"
    algorithm = entry.get("hashing_algorithm", SHA256)
    if algorithm not in ALGORITHMS:
        return f"hashing_algorithm must be one of {', '.join(ALGORITHMS)}"
    if "password_hash" in entry and (problem := _hash_problem(entry["password_hash"], algorithm)):
        return problem
    tags = entry.get("tags", [])
    if not (isinstance(tags, str) or (isinstance(tags, list) and all(isinstance(t, str) for t in tags))):
        return "tags must be a list of strings or a comma-separated string"
    return ""


def _hash_problem(value: object, algorithm: str) -> str:
    if not isinstance(value, str):
        return "password_hash must be a string"
    if not value:
        return ""  # RabbitMQ: a user without a password (never logs in with one)
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return "password_hash is not base64"
    if len(raw) != 4 + ALGORITHMS[algorithm]().digest_size:
        return f"password_hash is not a 4-byte salt and a {algorithm} digest"
    return ""


def load_config(path: str | Path | None = None, **overrides: Any) -> BrokerConfig:
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config {path} is not valid TOML: {exc}") from None
    known = {f.name for f in fields(BrokerConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown config key(s): {', '.join(unknown)}")
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return BrokerConfig(**data).validate()
    except TypeError as exc:
        raise ConfigError(str(exc)) from None
