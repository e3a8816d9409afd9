"""What each profile does with a workload shape: the pre-flight's oracle, one `Check` per rule.

Responsibility: for a shape (an aggregated `shapes` request row, or a returned message), say per
profile what the broker answers (`Behaviour`: accepted, or the close it sends with code and text),
what the application then sees, and whether the feature is deprecated there. Every check names
the catalogue rule it states (conformance/catalogue/rules.toml); where the conformance model
already has the oracle it is called, not restated (TMO-04: `model.timeouts.argument_refused`;
QOS-03: `model.traits`).

Rules (ground truth, live on RabbitMQ 3.10.8, 4.0.5 and 4.3.6; see docs/preflight.md):
- DCL-03: a classic queue's x-queue-version other than 2 is refused on 4.3 (406), accepted before.
- TMO-04: x-consumer-timeout on a classic queue, at declare or at consume, is refused on 4.3 (406).
- DCL-02: an unknown exchange type closes the connection (503) up to 3.13.2, the channel (406) after.
- QOS-03: basic.qos global=true is channel-wide up to 4.2 (deprecated from 3.13, feature
  global_qos), per consumer on 4.3 (global_qos denied by default: silently rewritten).
- DCL-04: a transient (non-durable) non-exclusive queue is deprecated from 3.13
  (transient_nonexcl_queues, permitted by default).
- DCL-05: x-queue-mode is ignored from 3.12 (classic queues keep messages on disk as needed).
- RQ-06: quorum delivery limit, see `returned_out`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from codec.constants import ReplyCode
from conformance.catalogue.rules import expectation
from conformance.model import timeouts
from conformance.model.traits import GlobalQos, traits
from conformance.preflight.shapes import CLASSIC, parse_arguments

OK, CHANNEL, CONNECTION = "ok", "channel.close", "connection.close"
BUILTIN_EXCHANGE_TYPES = frozenset({"direct", "fanout", "topic", "headers"})
QUORUM_DEFAULT_DELIVERY_LIMIT = 20  # RQ-06: 4.0 and later
_VERSION = re.compile(r"rabbitmq-(\d+)\.(\d+)")


@dataclass(frozen=True)
class Behaviour:
    """What a profile does with a shape."""

    outcome: str = OK  # ok | channel.close | connection.close
    code: int | None = None
    text: str = ""  # the reply text (refused), or what the application sees (accepted)
    deprecated: str = ""  # the deprecation, when the feature is deprecated there

    def describe(self) -> str:
        if self.outcome == OK:
            said = f"accepted{': ' + self.text if self.text else ''}"
            return f"{said} (deprecated: {self.deprecated})" if self.deprecated else said
        return f"{self.outcome} {self.code} {self.text}".rstrip()


def version(profile: str) -> tuple[int, int] | None:
    """(major, minor) of a rabbitmq-X.Y profile, None for the plain spec."""
    match = _VERSION.fullmatch(profile)
    return (int(match[1]), int(match[2])) if match else None


def at_least(profile: str, wanted: tuple[int, int]) -> bool:
    found = version(profile)
    return found is not None and found >= wanted


Shape = Mapping[str, Any]


@dataclass(frozen=True)
class Check:
    """One catalogue rule as the pre-flight applies it to request shapes."""

    rule: str
    what: str
    applies: Callable[[Shape], bool]
    behaviour: Callable[[str, Shape], Behaviour]

    def differs(self, source: str, target: str) -> bool:
        """The catalogue's version table: does the rule say something else on the two profiles?"""
        return expectation(self.rule, source) != expectation(self.rule, target)


def _args(shape: Shape) -> dict[str, Any]:
    return parse_arguments(shape.get("raw_arguments"))


def _declares(shape: Shape) -> bool:
    return shape.get("method") == "queue.declare" and "passive" not in (shape.get("flags") or "").split(",")


def _invalid_arg(arg: str, reason: str) -> str:
    return f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '<q>' in vhost '<v>'{reason}"


# -- DCL-03 ---------------------------------------------------------------------------------
def _queue_version(profile: str, shape: Shape) -> Behaviour:
    value = _args(shape).get("x-queue-version")
    if at_least(profile, (4, 3)) and value != 2:
        return Behaviour(CHANNEL, ReplyCode.PRECONDITION_FAILED, _invalid_arg("x-queue-version", f": \"unsupported queue version '{value}'\""))
    return Behaviour()


# -- TMO-04 ---------------------------------------------------------------------------------
def _timeout_argument(profile: str, shape: Shape) -> Behaviour:
    on_consume = shape.get("method") == "basic.consume"
    value = _args(shape).get(timeouts.ARGUMENT)
    if timeouts.argument_refused(profile, shape.get("queue_type") or CLASSIC, value, on_consume=on_consume):
        return Behaviour(CHANNEL, ReplyCode.PRECONDITION_FAILED, _invalid_arg(timeouts.ARGUMENT, " of queue type rabbit_classic_queue"))
    return Behaviour(text="x-consumer-timeout ignored on a classic queue" if not at_least(profile, (4, 3)) else "")


def _classic_timeout(method: str) -> Callable[[Shape], bool]:
    def applies(shape: Shape) -> bool:
        right = _declares(shape) if method == "queue.declare" else shape.get("method") == method
        return right and shape.get("queue_type") == CLASSIC and timeouts.ARGUMENT in _args(shape)
    return applies


# -- DCL-02 ---------------------------------------------------------------------------------
def _exchange_type(profile: str, shape: Shape) -> Behaviour:
    text = f"unknown exchange type '{shape.get('exchange_type')}'"
    if at_least(profile, (4, 0)):
        return Behaviour(CHANNEL, ReplyCode.PRECONDITION_FAILED, f"PRECONDITION_FAILED - {text}")
    return Behaviour(CONNECTION, ReplyCode.COMMAND_INVALID, f"COMMAND_INVALID - {text}")  # ≤3.13.2 and the spec; 3.13.3+: 406


def _unknown_exchange_type(shape: Shape) -> bool:
    # A type the recorded broker accepted is a plugin's (x-consistent-hash, ...): not judged here.
    return (shape.get("method") == "exchange.declare" and shape.get("exchange_type") not in BUILTIN_EXCHANGE_TYPES
            and "passive" not in (shape.get("flags") or "").split(",") and shape.get("reply") != OK)


# -- QOS-03 ---------------------------------------------------------------------------------
def _global_qos(profile: str, shape: Shape) -> Behaviour:
    if version(profile) is None:
        return Behaviour(text="one limit shared by every consumer of the connection")
    if traits(profile).global_qos is GlobalQos.PER_CONSUMER:
        return Behaviour(text="global=true ignored: a per-consumer limit (global_qos denied by default)")
    deprecated = "global_qos, permitted by default" if at_least(profile, (4, 0)) else ""
    return Behaviour(text="one limit shared by the channel's consumers", deprecated=deprecated)


# -- DCL-04, DCL-05 -------------------------------------------------------------------------
def _transient_nonexclusive(shape: Shape) -> bool:
    flags = set((shape.get("flags") or "").split(","))
    return _declares(shape) and not flags & {"durable", "exclusive"} and shape.get("queue_type") == CLASSIC


def _transient(profile: str, shape: Shape) -> Behaviour:
    if at_least(profile, (4, 0)):
        return Behaviour(deprecated="transient_nonexcl_queues, permitted by default")
    return Behaviour()


def _queue_mode(profile: str, shape: Shape) -> Behaviour:
    if at_least(profile, (3, 12)):
        return Behaviour(deprecated="x-queue-mode is ignored since 3.12")
    return Behaviour()  # ≤3.11: lazy pages to disk early; nothing the application sees on the wire


CHECKS: tuple[Check, ...] = (
    Check("DCL-03", "classic queue declared with x-queue-version",
          lambda s: _declares(s) and s.get("queue_type") == CLASSIC and "x-queue-version" in _args(s), _queue_version),
    Check("TMO-04", "classic queue declared with x-consumer-timeout", _classic_timeout("queue.declare"),
          _timeout_argument),
    Check("TMO-04", "basic.consume with x-consumer-timeout on a classic queue", _classic_timeout("basic.consume"),
          _timeout_argument),
    Check("DCL-02", "exchange.declare of an unknown type", _unknown_exchange_type, _exchange_type),
    Check("QOS-03", "basic.qos global=true", lambda s: s.get("method") == "basic.qos" and bool(s.get("global_qos")),
          _global_qos),
    Check("DCL-04", "transient non-exclusive queue declared", _transient_nonexclusive, _transient),
    Check("DCL-05", "queue declared with x-queue-mode",
          lambda s: _declares(s) and "x-queue-mode" in _args(s), _queue_mode),
)


# -- RQ-06: the delivery limit over time ----------------------------------------------------
def counted_returns(profile: str, by_reject: int, by_nack: int, by_other: int) -> int:
    """RQ-06: the returns that count toward a quorum queue's delivery limit. 4.3: basic.nack
    requeue=true does not count (delivery_count); 4.0 and earlier: every return counts."""
    if at_least(profile, (4, 3)):
        return by_reject + by_other
    return by_reject + by_nack + by_other


def delivery_limit(profile: str, argument: int | None) -> int | None:
    """RQ-06: the limit in force (x-delivery-limit, else 20 from 4.0, else none); None: no limit."""
    if argument is not None:
        return None if argument < 0 and at_least(profile, (4, 0)) else argument
    return QUORUM_DEFAULT_DELIVERY_LIMIT if at_least(profile, (4, 0)) else None


def returned_out(profile: str, limit_argument: int | None, by_reject: int, by_nack: int, by_other: int) -> bool:
    """True when a quorum message returned this way is dead-lettered or dropped on `profile`."""
    limit = delivery_limit(profile, limit_argument)
    return limit is not None and counted_returns(profile, by_reject, by_nack, by_other) > limit
