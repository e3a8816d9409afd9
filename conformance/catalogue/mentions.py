"""Rule IDs named in a text: how a failure says which rule it saw broken (docs/design.md decision 13).

Responsibility: `named_rules(text)`, the catalogue rule IDs a failure message names, in order
of first mention, and `RuleViolation`, the assertion a check raises when it knows its rule.

Rules:
- A mention is a catalogue ID as written ("ACK-05", "TMO-4.3-5", "S002-01", "CL-CANCEL-02"),
  a range "QOS-02..08" or "RQ-01..RQ-03" (every catalogue ID of that family between the two
  numbers), or a list "ACK-05/ACK-06" or "TMO-4.3-2/5" (each is a mention). Anything that is not a catalogue ID
  is ignored, so a message may say "406" or "0-9-1 §1.8" freely.
- An exception names its rules by the attribute `rules` (a tuple of IDs); `RuleViolation`
  sets it, and its message starts with them. Code that cannot name its rule leaves the
  attribute unset and the failure is attributed by `named_rules` over its text, else to the
  test's own rules (`conformance.plugin.classify.failed_rules`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from conformance.catalogue.rules import all_rules

# ID: family, then its numbering; a range repeats the numbering after "..", with or without the family
_MENTION = re.compile(r"\b((?:[A-Z]+-)+(?:\d+\.\d+-|\d+x-)?|S\d{3}-)(\d+)(?:\.\.(?:\1)?(\d+))?((?:/\d+\b(?![-.]))*)")


@cache
def _known() -> frozenset[str]:
    return frozenset(r.id for r in all_rules())


def named_rules(text: str | None) -> tuple[str, ...]:
    """The catalogue rule IDs `text` names, in order of first mention (see the module rules)."""
    if not text:
        return ()
    known, found = _known(), dict[str, None]()
    for match in _MENTION.finditer(text):
        family, first, last = match.group(1), match.group(2), match.group(3)
        width = len(first)
        numbers = [*(range(int(first), int(last) + 1) if last and int(last) >= int(first) else (int(first),)),
                   *(int(n) for n in match.group(4).split("/") if n)]  # "TMO-4.3-2/5": the same family
        for number in numbers:
            candidate = f"{family}{number:0{width}d}"
            if candidate in known:
                found.setdefault(candidate)
    return tuple(found)


class RuleViolation(AssertionError):
    """A check saw `rules` broken; the message says what the rule required and what the broker did."""

    def __init__(self, rules: Iterable[str] | str, message: str) -> None:
        self.rules = (rules,) if isinstance(rules, str) else tuple(rules)
        super().__init__(f"{'/'.join(self.rules)}: {message}" if self.rules else message)


_HEADING = re.compile(r"^[A-Z]+[\w.]*-[\w.-]+ broken(: .*)?$")  # "ACK-03 broken: <title>" (a record's message)


def rule_text(message: str, rule_id: str) -> str:
    """The first line of what a failure said about `rule_id`, from a record's message (the broken
    rules' headings, then each failure's text): a line naming the rule, else the first line."""
    lines = [line.strip() for line in message.splitlines() if line.strip() and not _HEADING.match(line.strip())]
    naming = [line for line in lines if rule_id in named_rules(line)]
    return (naming or lines or [""])[0]

