"""Vhost permissions: configure / write / read regexes per user and vhost (RabbitMQ's model).

Rules: a user with no entry in `config.permissions` has full access to every vhost (the
default `guest`); a user with entries may open only the vhosts listed. Refusals are 403
ACCESS_REFUSED channel errors with RabbitMQ's text; patterns are unanchored regexes
(anchor with "^"), and "" grants nothing.
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
    return entries is None or vhost in entries


def check(core: BrokerState, ch: Channel, kind: str, resource: str, name: str) -> None:
    """Raise 403 unless the channel's user may `kind` the `resource` ('queue'/'exchange') `name`."""
    conn = core.connections[ch.conn]
    entries = core.config.permissions.get(conn.user)
    if entries is None:
        return
    regexes = entries.get(conn.vhost)
    pattern = regexes[KINDS[kind]] if regexes and len(regexes) == 3 else ""
    if pattern and re.search(pattern, name):  # RabbitMQ: re:run, unanchored; "" grants nothing
        return
    raise soft(ReplyCode.ACCESS_REFUSED,
               f"access to {resource} '{name}' in vhost '{conn.vhost}' refused for user '{conn.user}'")
