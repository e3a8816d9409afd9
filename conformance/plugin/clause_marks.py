"""The `clauses` marker: which clauses of its rules a test checks (clause coverage, issue 46).

Rules:
- ``@pytest.mark.clauses("PC-02.a", "PC-02.c")`` names clauses by full id; each must be in the
  catalogue and belong to a rule the test's `rules` marker names. A test that breaks this is
  `broken` with a message saying which clause and why (`problem`), like an unknown rule id.
- The clause ids reach the results records (`TestRecord.clause_ids`) and so the report.
"""

from __future__ import annotations

import functools

import pytest

from conformance.catalogue.rules import Clause, all_rules, clause_problem

MARKER = "clauses"
DESCRIPTION = f"{MARKER}(*ids): the catalogue clauses (<rule>.<letter>) of its rules a test checks"


def clause_ids(item: pytest.Item) -> list[str]:
    marker = item.get_closest_marker(MARKER)
    return [str(a) for a in marker.args] if marker else []


def problem(item: pytest.Item) -> str | None:
    """What is wrong with the test's clauses marker (one line naming the test), or None."""
    rules = item.get_closest_marker("rules")
    rule_ids = [str(a) for a in rules.args] if rules else []
    known = _known()
    for clause_id in clause_ids(item):
        found = clause_problem(clause_id, rule_ids, known)
        if found:
            return f"{item.nodeid}: {found}"
    return None


@functools.cache
def _known() -> dict[str, Clause]:
    """Every catalogue clause by id, built once per process (each test's check reads it)."""
    return {c.id: c for r in all_rules() for c in r.clauses}
