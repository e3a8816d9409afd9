"""What a named fault is (reference_broker/faults.py has the switchboard and the table)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Fault:
    """A named deviation: the area whose tests must kill it, the rule it breaks, and the
    substitutions of `core.rules.Rules` policies that make it."""

    name: str
    area: str
    rule: str
    description: str
    substitutes: dict[str, Callable[..., Any]] = field(default_factory=dict, compare=False, repr=False)
    needs_cluster: bool = False  # its test needs a cluster (the cluster area's faults always do)


def const(value: Any) -> Callable[..., Any]:
    """A policy that answers `value` whatever it is asked."""
    return lambda *_args: value
