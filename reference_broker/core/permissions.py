"""Vhost permissions: configure / write / read regexes per user and vhost, and topic permissions
(RabbitMQ's model: rabbit_access_control, rabbit_auth_backend_internal; ACC-01..05).

Rules: a user with no entry in `config.permissions` has full access to every vhost (the
default `guest`); a user with entries may open only the vhosts listed. Refusals are 403
ACCESS_REFUSED channel errors with RabbitMQ's text ("<kind> access to <resource> refused for
user '<u>'"); patterns are unanchored regexes (anchor with "^"), and "" grants nothing. The
default exchange is checked as "amq.default".
Topic permissions (`config.topic_permissions`: user -> vhost -> exchange -> [write, read])
apply to topic exchanges only: a publish's routing key must match the write pattern, a
binding's key the read one; "" means "^$"; "{username}" and "{vhost}" are expanded first. A
user with none on an exchange may use every key.
"""

from __future__ import annotations

import re

from codec import ReplyCode
from reference_broker.core.broker_state import BrokerState
from reference_broker.core.errors import soft
from reference_broker.core.state import Channel

KINDS = {"configure": 0, "write": 1, "read": 2}


def vhost_allowed(core: BrokerState, user: str, vhost: str) -> bool:
    entries = core.config.permissions.get(user)
    return entries is None or vhost in entries or not core.rules.vhost_access_checked()  # ACC-01


def granted(core: BrokerState, user: str, vhost: str, kind: str, name: str) -> bool:
    entries = core.config.permissions.get(user)
    if entries is None:
        return True
    regexes = entries.get(vhost)
    pattern = regexes[KINDS[kind]] if regexes and len(regexes) == 3 else ""
    return bool(pattern) and re.search(pattern, name) is not None  # RabbitMQ: re:run, unanchored


def check(core: BrokerState, ch: Channel, kind: str, resource: str, name: str, method: str = "") -> None:
    """Raise 403 unless the channel's user may `kind` the `resource` ('queue'/'exchange') `name`
    (`method`: the AMQP method asking, for the faults)."""
    conn = core.connections[ch.conn]
    if resource == "exchange" and name == "":
        name = "amq.default"  # rabbit_access_control:check_resource_access
    if granted(core, conn.user, conn.vhost, kind, name) or not core.rules.permission_checked(kind, method):
        return
    raise soft(ReplyCode.ACCESS_REFUSED,
               f"{_named(core, kind)}access to {resource} '{name}' in vhost '{conn.vhost}' refused for user '{conn.user}'")


def _named(core: BrokerState, kind: str) -> str:
    """The refusal names the permission from 3.12.0 (rabbit_access_control; 3.10.8 and 3.11 not)."""
    return "" if core.config.emulates == "3.10" else f"{kind} "


def check_any(core: BrokerState, ch: Channel, resource: str, name: str) -> None:
    """A passive declare (RabbitMQ 4.3.1+, check_any_resource_access_permitted): any one of the
    three permissions; the refusal is configure's."""
    if core.config.emulates != "4.3":  # before 4.3.1 a passive declare checks nothing
        return
    conn = core.connections[ch.conn]
    if not any(granted(core, conn.user, conn.vhost, kind, name) for kind in ("read", "write")):
        check(core, ch, "configure", resource, name)


def tags(core: BrokerState, user: str) -> list[str]:
    """The user's tags (ACC-07: impersonator), a list or a comma-separated string."""
    entry = core.config.users.get(user)
    given = entry.get("tags") if isinstance(entry, dict) else None
    items = given.split(",") if isinstance(given, str) else given if isinstance(given, list) else []
    return [t.strip() for t in items if isinstance(t, str) and t.strip()]


def expand(pattern: str, user: str, vhost: str) -> str:
    """rabbit_auth_backend_internal:expand_topic_permission, "" first made "^$"."""
    pattern = pattern or "^$"
    return pattern.replace("{username}", user).replace("{vhost}", vhost)


def check_topic(core: BrokerState, ch: Channel, kind: str, exchange: str, exchange_kind: str, key: str) -> None:
    """ACC-05: a topic exchange's routing key against the user's topic permission on it."""
    if exchange_kind != "topic" or not core.rules.topic_permission_checked():
        return
    conn = core.connections[ch.conn]
    entry = core.config.topic_permissions.get(conn.user, {}).get(conn.vhost, {}).get(exchange)
    if entry is None:
        return
    pattern = expand(entry[0 if kind == "write" else 1], conn.user, conn.vhost)
    if re.search(pattern, key) is None:
        raise soft(ReplyCode.ACCESS_REFUSED, f"{_named(core, kind)}access to topic '{key}' in exchange '{exchange}' "
                   f"in vhost '{conn.vhost}' refused for user '{conn.user}'")
