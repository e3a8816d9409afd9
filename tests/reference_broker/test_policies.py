"""Policies in the reference broker's pure core (core/settings.py, POL-01, POL-02): which policy
applies, and a queue argument against a policy's value, key by key, per queue type and mode."""

from __future__ import annotations

from typing import Any

import pytest

from reference_broker.config import BrokerConfig
from reference_broker.core import BrokerCore
from reference_broker.core.settings import policy_definition, queue_setting, set_policies
from reference_broker.core.state import Queue


def core_with(policies: dict[str, dict[str, Any]], legacy: bool = False) -> BrokerCore:
    core = BrokerCore(BrokerConfig(timeout_mode="legacy") if legacy else BrokerConfig())
    set_policies(core, "/", policies)
    return core


def queue(kind: str, **arguments: Any) -> Queue:
    return Queue("q", "/", kind, True, None, False, {f"x-{k}": v for k, v in arguments.items()})


def test_the_highest_priority_matching_policy_applies_alone() -> None:
    core = core_with({"low": {"pattern": "^q$", "priority": 1, "definition": {"max-length": 1, "overflow": "reject-publish"}},
                      "high": {"pattern": "q", "priority": 5, "definition": {"max-length": 2}},
                      "other": {"pattern": "^x", "priority": 9, "definition": {"max-length": 9}},
                      "exchanges": {"pattern": "q", "apply-to": "exchanges", "priority": 20, "definition": {"expires": 5}}})
    assert policy_definition(core, queue("classic")) == {"max-length": 2}


@pytest.mark.parametrize(("kind", "key", "argument", "policy", "legacy", "want"), [
    ("classic", "max-length", 3, 1, False, 1),
    ("quorum", "max-length", 1, 3, False, 1),
    ("classic", "message-ttl", 0, 600, False, 0),
    ("classic", "expires", 600, 300, True, 300),
    ("quorum", "expires", 300, 600, False, 300),
    ("quorum", "expires", 300, 600, True, 600),  # up to 3.13: the policy's
    ("classic", "dead-letter-exchange", "a", "p", False, "a"),
    ("quorum", "dead-letter-exchange", "a", "p", False, "a"),
    ("classic", "overflow", "reject-publish", "drop-head", False, "reject-publish"),
    ("quorum", "overflow", "reject-publish", "drop-head", False, "drop-head"),
    ("classic", "max-length", None, 4, False, 4),
])
def test_argument_against_policy(kind: str, key: str, argument: Any, policy: Any, legacy: bool, want: Any) -> None:
    core = core_with({"p": {"pattern": "^q$", "priority": 0, "definition": {key: policy}}}, legacy)
    q = queue(kind, **({} if argument is None else {key: argument}))
    assert queue_setting(core, q, key) == want


def test_an_operator_policy_joins_the_policy_and_the_lower_number_wins() -> None:
    core = core_with({"p": {"pattern": "^q$", "priority": 0, "definition": {"max-length": 3, "overflow": "reject-publish"}}})
    set_policies(core, "/", {"op": {"pattern": "q", "priority": 0, "definition": {"max-length": 1, "message-ttl": 5}},
                             "op-low": {"pattern": "q", "priority": -1, "definition": {"expires": 9}}}, operator=True)
    assert policy_definition(core, queue("quorum")) == {"max-length": 1, "overflow": "reject-publish", "message-ttl": 5}
    assert queue_setting(core, queue("classic", **{"max-length": 2}), "max-length") == 1
