"""Words for people: counts with the right noun form, shared by the console and the report.

Rules: `plural(1, "run")` is "1 run", any other count takes the plural ("0 runs", "2 runs");
irregular plurals are passed in (`plural(n, "entry", "entries")`).
"""

from __future__ import annotations


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """`count` and `noun`, in the singular for exactly one."""
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"
