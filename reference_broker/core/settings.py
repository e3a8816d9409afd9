"""Queue settings: x-arguments, else the matching policy's definition (RabbitMQ's precedence).

Rules: the highest-priority policy whose pattern matches the queue name and whose apply-to
fits the queue applies, alone (POL-01); its definition is cached per queue until the policies
change (it is read on every publish). Where argument and policy both set a key, RabbitMQ's
precedence decides (POL-02). Message TTL is the lower of the queue's and the message's
expiration; the quorum delivery limit is the lower of argument and policy (RQ-06).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from codec import AmqpError, BasicProperties
from reference_broker.core.arguments import parse_expiration
from reference_broker.core.broker_state import BrokerState
from reference_broker.core.state import Exchange, Queue


def queue_setting(core: BrokerState, queue: Queue, key: str) -> Any:
    """The x-<key> queue argument or the matching policy's <key>; when both are set, the one
    RabbitMQ's precedence names (POL-02, `Rules.policy_precedence`): the lower number, the
    argument, or the policy."""
    argument, policy = queue.arguments.get(f"x-{key}"), policy_definition(core, queue).get(key)
    if argument is None or policy is None:
        return policy if argument is None else argument
    rule = core.rules.policy_precedence(queue.kind, key, core.config.timeout_mode == "legacy")
    numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (argument, policy))
    if rule == "min" and numbers:
        return min(argument, policy)
    return policy if rule == "policy" else argument


def set_policies(core: BrokerState, vhost: str, policies: dict[str, dict[str, Any]], operator: bool = False) -> None:
    (core.operator_policies if operator else core.policies)[vhost] = policies
    core.policy_version += 1
    core.defs_dirty = core.journal is not None


APPLY_TO_KIND = {"classic": "classic_queues", "quorum": "quorum_queues", "stream": "streams"}  # a policy's apply-to


def policy_definition(core: BrokerState, queue: Queue) -> dict[str, Any]:
    """The definition of the highest-priority policy matching the queue (POL-01), merged with the
    highest-priority operator policy's (POL-03: a key both set takes `Rules.operator_merge`, the
    lower number); cached per queue until the policies change (it is read on every publish)."""
    if queue.policy_cache is not None and (queue.policy_cache[0] == core.policy_version
                                           or not core.rules.policy_follows_changes()):
        return queue.policy_cache[1]
    definition = _chosen(core, queue, core.policies)
    for key, value in _chosen(core, queue, core.operator_policies).items():
        definition[key] = value if key not in definition else core.rules.operator_merge(definition[key], value)
    queue.policy_cache = (core.policy_version, definition)
    return definition


def _chosen(core: BrokerState, queue: Queue, table: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    return _chosen_for(core, queue.vhost, queue.name, ("all", "queues", APPLY_TO_KIND.get(queue.kind)), table)


def _chosen_for(core: BrokerState, vhost: str, name: str, admitting: tuple[str | None, ...],
                table: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The definition of the highest-priority policy of `table` matching `name` whose apply-to is
    one of `admitting` (POL-01)."""
    matching: list[dict[str, Any]] = []
    for policy in table.get(vhost, {}).values():
        if not core.rules.policy_admits(policy.get("apply-to", "all") in admitting):
            continue
        try:
            if not re.search(policy.get("pattern", ""), name):
                continue
        except re.error:
            continue  # refused at PUT; a bad pattern in a config never matches
        matching.append(policy)
    return core.rules.policy_chosen(sorted(matching, key=lambda p: -int(p.get("priority", 0))))


def exchange_setting(core: BrokerState, vhost: str, exchange: Exchange, key: str) -> Any:
    """POL-04: the exchange's own <key> argument, else the <key> of the policy matching it (apply-to
    exchanges or all): rabbit_policy:get_arg, the argument first (alternate-exchange)."""
    argument = exchange.arguments.get(key)
    if argument is not None and core.rules.exchange_argument_wins():
        return argument
    policy = _chosen_for(core, vhost, exchange.name, ("all", "exchanges"), core.policies).get(key)
    return policy if policy is not None else argument


def delivery_limit(core: BrokerState, queue: Queue) -> int | None:
    """RQ-06: x-delivery-limit or policy delivery-limit (the lower), else 20 in 4.x;
    none in legacy (3.x) mode; a negative value disables it."""
    values = [v for v in (queue.arguments.get("x-delivery-limit"),
                          policy_definition(core, queue).get("delivery-limit"))
              if isinstance(v, int) and not isinstance(v, bool)]
    if values:
        limit = min(values)
    elif core.config.timeout_mode == "legacy":
        return None
    else:
        limit = 20
    return None if limit < 0 else limit


def message_ttl(core: BrokerState, queue: Queue, properties: BasicProperties) -> int | None:
    """TTL-03: the lower of the queue's x-message-ttl (or policy) and the message's expiration."""
    queue_ttl = queue_setting(core, queue, "message-ttl")
    own = None
    if properties.expiration is not None:
        with contextlib.suppress(AmqpError):  # unchecked only under the expiration_unchecked fault
            own = parse_expiration(properties.expiration)
    return core.rules.ttl_combined(queue_ttl if isinstance(queue_ttl, int) and queue_ttl >= 0 else None, own)
