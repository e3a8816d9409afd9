"""Assertion explanations in protocol terms, whole: what the broker did against what the rule requires.

Responsibility: `explain_comparison`, the `pytest_assertrepr_compare` answer for a suite
assertion `observed == expected`: "got X, expected Y", each side written in full (`terms`:
protocol objects as `basic.ack delivery-tag=2 multiple=False`, reply and class codes as
`406 PRECONDITION_FAILED`, everything else as its repr), never cut inside a value, then one
line per difference of two collections (an index, a key, the missing and the unexpected
members); other comparisons are left to pytest. `FULL_ASSERTIONS`: the assertion verbosity
rule tests run with, so that pytest's own explanations are not cut either
(`force_full_assertions`).

Rules:
- The suite writes `assert observed == expected` (the broker's side on the left).
- A side that is a protocol object is explained in any test; plain data (numbers, strings,
  bytes, enums, dataclasses and the tuples, lists, sets and dicts of them) only in a rule test
  (`rule_test`), whose assertions follow the rule above; the project's own tests keep pytest's
  explanation.
- A comparison that holds (one operand of `a and b == c`) is written as it is, `X == Y`: pytest
  would explain it with a diff of two equal values.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from codec import Command
from codec._runtime import MethodBase

FULL_ASSERTIONS = 2  # pytest's assertion verbosity for rule tests: whole reprs, no truncation
_SCALARS = (bool, int, float, str, bytes, type(None), enum.Enum)


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


def terms(value: Any) -> str | None:
    """`value` written in full for a failure message, or None when it is not plain data."""
    found = protocol_terms(value)
    if found is not None:
        return found
    if isinstance(value, enum.IntEnum):
        return f"{int(value)} {value.name}"  # ReplyCode.PRECONDITION_FAILED -> 406 PRECONDITION_FAILED
    if isinstance(value, _SCALARS):
        return repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return repr(value)
    if isinstance(value, dict):
        pairs = [(terms(k), terms(v)) for k, v in value.items()]
        return None if any(k is None or v is None for k, v in pairs) else "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    if isinstance(value, list | tuple | set | frozenset):
        parts = [terms(v) for v in value]
        if any(p is None for p in parts):
            return None
        if isinstance(value, set | frozenset):
            return "{" + ", ".join(sorted(str(p) for p in parts)) + "}" if parts else "set()"
        inner = ", ".join(str(p) for p in parts)
        return f"({inner}{',' if len(parts) == 1 else ''})" if isinstance(value, tuple) else f"[{inner}]"
    return None


def differences(left: Any, right: Any) -> list[str]:
    """One line per difference between two collections of the same kind (empty for anything else)."""
    if isinstance(left, MethodBase | Command) or isinstance(right, MethodBase | Command):
        return []  # a method's fields are on the first line already
    if isinstance(left, dict) and isinstance(right, dict):
        lines = [f"{terms(k)}: got {terms(left[k])}, expected {terms(right[k])}"
                 for k in right if k in left and _differ(left[k], right[k])]
        missing, extra = [k for k in right if k not in left], [k for k in left if k not in right]
        lines += [f"missing {terms(k)} (expected {terms(right[k])})" for k in missing]
        return lines + [f"unexpected {terms(k)}: {terms(left[k])}" for k in extra]
    if isinstance(left, set | frozenset) and isinstance(right, set | frozenset):
        absent, surplus = right - left, left - right
        return ([f"missing: {terms(absent)}"] if absent else []) + ([f"unexpected: {terms(surplus)}"] if surplus else [])
    if isinstance(left, list | tuple) and isinstance(right, list | tuple) and type(left) is type(right):
        lines = [f"at index {i}: got {terms(a)}, expected {terms(b)}"
                 for i, (a, b) in enumerate(zip(left, right, strict=False)) if _differ(a, b)]
        if len(left) != len(right):
            lines.append(f"got {len(left)} items, expected {len(right)}")
        return lines if len(left) > 1 or len(right) > 1 else []
    return []


def _differ(a: Any, b: Any) -> bool:
    try:
        return bool(a != b)
    except Exception:  # an operand whose comparison raises: show it as a difference
        return True


def explain_comparison(op: str, left: Any, right: Any, rule_test: bool = False) -> list[str] | None:
    """"got X, expected Y" (and the differences) for `left op right` (see the module rules)."""
    if op not in ("==", "!="):
        return None
    protocol = protocol_terms(left) is not None or protocol_terms(right) is not None
    observed, expected = terms(left), terms(right)
    if not (protocol or (rule_test and observed is not None and expected is not None)):
        return None
    shown_left, shown_right = observed or repr(left), expected or repr(right)
    if not _differ(left, right) if op == "==" else _differ(left, right):
        return [f"{shown_left} {op} {shown_right}"]  # it holds: one operand of a larger expression
    if op == "!=":
        return [f"got {shown_left}, expected anything but {shown_right}"]
    return [f"got {shown_left}, expected {shown_right}", *differences(left, right)]


def force_full_assertions(config: Any) -> None:
    """Rule tests' assertion explanations whole: verbosity `FULL_ASSERTIONS` unless the user set one
    (`verbosity_assertions`). pytest reads the level through `getini`, whose cache this fills."""
    if config.getini("verbosity_assertions") not in (None, "auto"):
        return
    cache = getattr(config, "_inicache", None)
    if isinstance(cache, dict):
        cache["verbosity_assertions"] = FULL_ASSERTIONS
