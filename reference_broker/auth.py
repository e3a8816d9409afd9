"""Users and credentials: SASL PLAIN/AMQPLAIN login, RabbitMQ password hashes, user tags and
the user/permission changes the management API makes.

Rules:
- A user entry (`BrokerConfig.users`) is a plaintext password (kept for the default
  guest/guest) or a table in RabbitMQ's definitions shape: `password` or `password_hash`
  (base64 of a 4-byte salt + digest(salt + UTF-8 password), `rabbit_password_hashing_sha256`
  unless `hashing_algorithm` names sha512), and `tags`. An empty hash never logs in.
- A check does the same work whether the user exists or not (an unknown one is checked
  against a dummy hash), compares digests in constant time, and a refusal never says which
  part was wrong: 403 ACCESS_REFUSED with RabbitMQ's text (ERR-04).
  An unparsable response is 502 SYNTAX_ERROR, an unknown mechanism 503.
- Tags as rabbit_mgmt_util has them: administrator implies policymaker and monitoring, and
  any of those or `management` may use the management API.
- Runtime changes keep only a hash. A new user has no vhost until permissions are set (a user
  with no `permissions` entry has every vhost), and a deleted one keeps an empty entry so
  its open connections are refused from then on (RabbitMQ does not close them either).
- `python -m reference_broker.auth hash [PASSWORD]` prints a hash; without PASSWORD it reads
  one line from stdin, which keeps the password out of shell history and `ps`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import ipaddress
import os
import re
import struct
import sys
from collections.abc import Callable, Iterable
from typing import Any

from codec import CodecError, ReplyCode
from codec.fast_tables import RABBITMQ_TABLES
from reference_broker.config import ALGORITHMS, SHA256, BrokerConfig, user_entry_problem

MANAGEMENT_TAGS = {"management", "policymaker", "monitoring", "administrator"}


class AuthError(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


# -- password hashes --------------------------------------------------------------------------
def hash_password(password: str, algorithm: str = SHA256, salt: bytes | None = None) -> str:
    """rabbit_password:hash/2: base64(salt + H(salt + utf8(password))), a random 4-byte salt."""
    salt = os.urandom(4) if salt is None else salt
    return base64.b64encode(salt + ALGORITHMS[algorithm](salt + password.encode()).digest()).decode()


_DUMMY_HASH = hash_password("", salt=bytes(4))  # unknown users cost the same digest


def _hash_matches(stored: str, algorithm: str, password: str) -> bool:
    raw = base64.b64decode(stored or _DUMMY_HASH)
    digest = ALGORITHMS[algorithm](raw[:4] + password.encode()).digest()
    return hmac.compare_digest(raw[4:], digest) and bool(stored)


def _plain_matches(expected: str, password: str) -> bool:
    """Digests of both sides: the comparison costs the same whatever the lengths."""
    return hmac.compare_digest(hashlib.sha256(expected.encode()).digest(),
                               hashlib.sha256(password.encode()).digest())


def check_password(config: BrokerConfig, user: str, password: str) -> bool:
    entry = config.users.get(user)
    if isinstance(entry, str):
        return _plain_matches(entry, password)
    if isinstance(entry, dict) and "password" in entry:
        return _plain_matches(str(entry["password"]), password)
    if isinstance(entry, dict):
        return _hash_matches(str(entry["password_hash"]), entry.get("hashing_algorithm", SHA256), password)
    _hash_matches(_DUMMY_HASH, SHA256, password)  # an unknown user costs what a known one does
    return False


def stored_hash(entry: str | dict[str, Any]) -> tuple[str, str]:
    """(password_hash, hashing_algorithm) of a user entry; a plaintext one is hashed now."""
    plain = entry if isinstance(entry, str) else entry.get("password")
    if isinstance(plain, str):
        return hash_password(plain), SHA256
    assert isinstance(entry, dict)
    return str(entry["password_hash"]), str(entry.get("hashing_algorithm", SHA256))


# -- SASL ---------------------------------------------------------------------------------------
ANONYMOUS_LOGIN = ("guest", "guest")  # RabbitMQ 4.x anonymous_login_user / anonymous_login_pass


def mechanisms(config: BrokerConfig) -> list[str]:
    """The SASL mechanisms offered: RabbitMQ 4.0+ adds ANONYMOUS (ACC-06); the legacy 3.x mode not."""
    return ["PLAIN", "AMQPLAIN"] if config.timeout_mode == "legacy" else ["PLAIN", "AMQPLAIN", "ANONYMOUS"]


def parse_response(mechanism: str, response: bytes) -> tuple[str, str]:
    """(user, password) from a PLAIN or AMQPLAIN response (ANONYMOUS: the anonymous login)."""
    if mechanism == "ANONYMOUS":
        return ANONYMOUS_LOGIN
    if mechanism == "PLAIN":
        parts = response.split(b"\x00")
        if len(parts) != 3:
            raise AuthError(ReplyCode.SYNTAX_ERROR, "malformed PLAIN response")
        return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if mechanism == "AMQPLAIN":
        try:
            table, _end = RABBITMQ_TABLES.decode_table(struct.pack(">I", len(response)) + response, 0)
        except (CodecError, struct.error, IndexError, ValueError):
            raise AuthError(ReplyCode.SYNTAX_ERROR, "malformed AMQPLAIN response") from None
        login, password = table.get("LOGIN"), table.get("PASSWORD")
        if not isinstance(login, str) or not isinstance(password, str):
            raise AuthError(ReplyCode.SYNTAX_ERROR, "AMQPLAIN response lacks LOGIN/PASSWORD")
        return login, password
    raise AuthError(ReplyCode.COMMAND_INVALID, f"unknown authentication mechanism '{mechanism}'")


def is_loopback(peer: str) -> bool:
    """Is a "host:port" peer (as the server names it) on a loopback address?"""
    host = peer.rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def authenticate(config: BrokerConfig, mechanism: str, response: bytes, peer: str | None = None,
                 logs_in: Callable[[str], bool] = lambda mechanism: True) -> str:
    """The user a PLAIN/AMQPLAIN response logs in; RabbitMQ's `loopback_users` (guest by
    default) may log in only from a loopback address, refused with the same 403 as a wrong
    password (the reason goes to the log only). `logs_in(mechanism)` false refuses that way too
    (the `mechanism_logs_in` rule)."""
    if mechanism not in mechanisms(config):
        raise AuthError(ReplyCode.COMMAND_INVALID, f"unknown authentication mechanism '{mechanism}'")
    user, password = parse_response(mechanism, response)
    remote = bool(peer) and user in config.loopback_users and not is_loopback(str(peer))
    if not check_password(config, user, password) or remote or not logs_in(mechanism):
        raise AuthError(ReplyCode.ACCESS_REFUSED,
                        f"Login was refused using authentication mechanism {mechanism}. "
                        "For details see the broker logfile.")
    return user


# -- tags and vhosts ----------------------------------------------------------------------------
def _tag_list(tags: object) -> list[str]:
    items = tags.split(",") if isinstance(tags, str) else tags if isinstance(tags, list) else []
    return [t.strip() for t in items if isinstance(t, str) and t.strip()]


def tags_of(config: BrokerConfig, user: str) -> list[str]:
    entry = config.users.get(user)
    return _tag_list(entry.get("tags")) if isinstance(entry, dict) else []


def is_admin(tags: Iterable[str]) -> bool:
    return "administrator" in tags


def is_policymaker(tags: Iterable[str]) -> bool:
    tags = set(tags)
    return is_admin(tags) or "policymaker" in tags


def is_monitor(tags: Iterable[str]) -> bool:
    tags = set(tags)
    return is_admin(tags) or "monitoring" in tags


def is_management_user(tags: Iterable[str]) -> bool:
    return bool(MANAGEMENT_TAGS & set(tags))


def may_open(config: BrokerConfig, user: str, vhost: str) -> bool:
    """The vhosts a user may log into (rabbit_mgmt_util:list_login_vhosts)."""
    entries = config.permissions.get(user)
    return entries is None or vhost in entries


# -- runtime changes (management API) ----------------------------------------------------------
def put_user(config: BrokerConfig, name: str, body: dict[str, Any]) -> str:
    """Create or update a user from a PUT /api/users body; "" or why it cannot be done."""
    given: dict[str, Any] = {k: body[k] for k in ("password", "password_hash", "hashing_algorithm")
                             if k in body}
    old = config.users.get(name)
    if not given and old is None:
        return "password or password_hash is required for a new user"
    entry: dict[str, Any] = {"tags": _tag_list(body.get("tags", []))}
    if "password" in given:
        algorithm = given.get("hashing_algorithm", SHA256)
        if not isinstance(given["password"], str) or algorithm not in ALGORITHMS:
            return "password must be a string and hashing_algorithm known"
        entry |= {"password_hash": hash_password(given["password"], algorithm), "hashing_algorithm": algorithm}
    elif given:
        entry |= given
    else:  # only the tags change
        assert old is not None
        digest, algorithm = stored_hash(old)
        entry |= {"password_hash": digest, "hashing_algorithm": algorithm}
    if problem := user_entry_problem(entry):
        return problem
    config.users[name] = entry
    if old is None:
        config.permissions.setdefault(name, {})
    return ""


def delete_user(config: BrokerConfig, name: str) -> bool:
    if config.users.pop(name, None) is None:
        return False
    config.permissions[name] = {}  # no vhost from now on, also for its open connections
    config.topic_permissions.pop(name, None)
    return True


def _entries(config: BrokerConfig, user: str, vhosts: Iterable[str]) -> dict[str, list[str]]:
    """The user's explicit permissions; a user without any (every vhost) gets them spelled out
    first, so changing one vhost leaves the others as they were."""
    if user not in config.permissions:
        config.permissions[user] = {v: [".*", ".*", ".*"] for v in vhosts}
    return config.permissions[user]


def set_permissions(config: BrokerConfig, user: str, vhost: str, body: dict[str, Any],
                    vhosts: Iterable[str]) -> str:
    regexes = [body.get(kind, "") for kind in ("configure", "write", "read")]
    for regex in regexes:
        if not isinstance(regex, str):
            return "configure, write and read must be strings"
        try:
            re.compile(regex)
        except re.error as exc:
            return f"{regex} is not a valid regular expression ({exc})"
    _entries(config, user, vhosts)[vhost] = regexes
    return ""


def clear_permissions(config: BrokerConfig, user: str, vhost: str, vhosts: Iterable[str]) -> bool:
    if permissions_of(config, user, vhost) is None:
        return False
    del _entries(config, user, vhosts)[vhost]
    return True


def set_topic_permissions(config: BrokerConfig, user: str, vhost: str, body: dict[str, Any]) -> str:
    """PUT /api/topic-permissions body {exchange, write, read}: the patterns on one exchange."""
    exchange, write, read = body.get("exchange"), body.get("write", ""), body.get("read", "")
    if not isinstance(exchange, str) or not exchange or not isinstance(write, str) or not isinstance(read, str):
        return "exchange (a name), write and read must be strings"
    for regex in (write, read):
        try:
            re.compile(regex)
        except re.error as exc:
            return f"{regex} is not a valid regular expression ({exc})"
    config.topic_permissions.setdefault(user, {}).setdefault(vhost, {})[exchange] = [write, read]
    return ""


def topic_permission_rows(config: BrokerConfig) -> list[dict[str, Any]]:
    """RabbitMQ's topic permission objects (/api/topic-permissions)."""
    return [{"user": user, "vhost": vhost, "exchange": exchange, "write": pair[0], "read": pair[1]}
            for user, by_vhost in sorted(config.topic_permissions.items())
            for vhost, by_exchange in by_vhost.items() for exchange, pair in by_exchange.items()]


def permissions_of(config: BrokerConfig, user: str, vhost: str) -> list[str] | None:
    entries = config.permissions.get(user)
    if entries is None:
        return [".*", ".*", ".*"]  # no entry: every vhost, everything
    return entries.get(vhost)


def user_definition(config: BrokerConfig, name: str) -> dict[str, Any]:
    """RabbitMQ's user object (definitions, /api/users); a plaintext password is shown hashed."""
    digest, algorithm = stored_hash(config.users[name])
    return {"name": name, "password_hash": digest, "hashing_algorithm": algorithm,
            "tags": tags_of(config, name), "limits": {}}


def permission_rows(config: BrokerConfig, users: Iterable[str], vhosts: Iterable[str]) -> list[dict[str, Any]]:
    """RabbitMQ's permission objects of `users` in `vhosts` (what each may do there)."""
    rows = []
    for user in sorted(users):
        for vhost in vhosts:
            regexes = permissions_of(config, user, vhost)
            if regexes is not None:
                rows.append({"user": user, "vhost": vhost, "configure": regexes[0], "write": regexes[1],
                             "read": regexes[2]})
    return rows


# -- CLI ----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference_broker.auth",
                                     description="Password hashes for the broker's `users` table.")
    sub = parser.add_subparsers(dest="command", required=True)
    hashing = sub.add_parser("hash", help="print RabbitMQ's hash of a password")
    hashing.add_argument("password", nargs="?", help="the password (default: one line from stdin)")
    hashing.add_argument("--algorithm", choices=sorted(ALGORITHMS), default=SHA256)
    args = parser.parse_args(argv)
    password = args.password if args.password is not None else sys.stdin.readline().rstrip("\r\n")
    print(hash_password(password, args.algorithm))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
