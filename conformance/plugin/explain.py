"""Assertion explanations in protocol terms, whole: what the broker did against what the rule requires.

Responsibility: `explain_comparison`, the `pytest_assertrepr_compare` answer for a suite
assertion `observed == expected` whose sides are AMQP methods, commands or the model's outcomes
(or lists, tuples and sets of them): one line, "got X, expected Y", each side written in full in
protocol terms (`basic.ack delivery-tag=2 multiple=False`), never cut inside a value; other
comparisons are left to pytest. `FULL_ASSERTIONS`: the assertion verbosity rule tests run with,
so that pytest's own explanations are not cut either (`force_full_assertions`).

Rules: the suite writes `assert observed == expected` (the broker's side on the left).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from codec import Command
from codec._runtime import MethodBase

FULL_ASSERTIONS = 2  # pytest's assertion verbosity for rule tests: whole reprs, no truncation


def protocol_terms(value: Any) -> str | None:
    """`value` in protocol terms, or None when it is no protocol object."""
    if isinstance(value, MethodBase) and hasattr(value, "fields"):
        fields = " ".join(f"{k.replace('_', '-')}={v!r}" for k, v in value.fields().items())
        return f"{value.NAME} {fields}".rstrip()
    if isinstance(value, Command):
        method = protocol_terms(value.method)
        return f"{method} + content {len(value.body)} B" if value.method.HAS_CONTENT else method
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and type(value).__module__.startswith(
            "conformance.model"):
        return repr(value)
    if isinstance(value, list | tuple | set | frozenset) and value:
        parts = [protocol_terms(v) for v in value]
        if all(p is not None for p in parts):
            inner = ", ".join(sorted(str(p) for p in parts) if isinstance(value, set | frozenset) else map(str, parts))
            return f"[{inner}]"
    return None


def explain_comparison(op: str, left: Any, right: Any) -> list[str] | None:
    """One line for `left op right` when a side is a protocol object (see the module rules)."""
    if op not in ("==", "!="):
        return None
    observed, expected = protocol_terms(left), protocol_terms(right)
    if observed is None and expected is None:
        return None
    verb = "expected" if op == "==" else "expected anything but"
    return [f"got {observed or repr(left)}, {verb} {expected or repr(right)}"]


def force_full_assertions(config: Any) -> None:
    """Rule tests' assertion explanations whole: verbosity `FULL_ASSERTIONS` unless the user set one
    (`verbosity_assertions`). pytest reads the level through `getini`, whose cache this fills."""
    if config.getini("verbosity_assertions") not in (None, "auto"):
        return
    cache = getattr(config, "_inicache", None)
    if isinstance(cache, dict):
        cache["verbosity_assertions"] = FULL_ASSERTIONS
