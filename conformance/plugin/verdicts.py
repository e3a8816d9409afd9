"""Verdicts (DESIGN.md decision 4) and the helpers tests use to reach the non-binary ones.

Rules: `passed` and `failed` come from the test outcome; a test reaches `unimplemented`
(capability not advertised, or the broker answered 540) by calling `unimplemented()`,
`non-strict` (allowed by the spec, differs from RabbitMQ) by calling `non_strict()`,
`not-applicable` (the profile has no such behaviour) by `not_applicable()`, and
`needs-admin` (not run: the check needs `--broker-admin` and the run has none) by
`needs_admin()`. Harness or environment failures (our exceptions, a wedged broker) are
`broken`, never `failed`.
- The score counts `SCORED` only: a check that did not run (`needs-admin`), does not apply
  (`not-applicable`) or could not be judged (`broken`) is left out of it.
- A rule's verdict is the worst of its tests' verdicts, in `WORST_FIRST` order: a rule is
  `passed` only when every applicable check of it ran and passed.
Replies are compared by code, class/method id and scope, never by text unless the rule is
about the text.
"""

from __future__ import annotations

import enum
from typing import NoReturn

import pytest

from conformance.plugin.wording import plural

# Exit statuses of a run (DESIGN.md decision 8), for the plugin, the watchdog and the gate: 1 an
# unexpected `failed`, 2 a harness or environment error (a `broken` verdict), 3 the broker is
# unreachable or went down, 4 a usage error.
EXIT_OK, EXIT_FAILED, EXIT_HARNESS, EXIT_UNREACHABLE, EXIT_USAGE = 0, 1, 2, 3, 4


class Verdict(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NON_STRICT = "non-strict"
    UNIMPLEMENTED = "unimplemented"
    NEEDS_ADMIN = "needs-admin"
    NOT_APPLICABLE = "not-applicable"
    BROKEN = "broken"


# worst first: a rule's verdict is the first of these among its tests' verdicts
WORST_FIRST = (Verdict.FAILED, Verdict.BROKEN, Verdict.NON_STRICT, Verdict.UNIMPLEMENTED, Verdict.NEEDS_ADMIN,
               Verdict.PASSED, Verdict.NOT_APPLICABLE)
SCORED = (Verdict.PASSED, Verdict.FAILED, Verdict.NON_STRICT, Verdict.UNIMPLEMENTED)  # score = passed / these
LABELS: dict[str, str] = {Verdict.NEEDS_ADMIN: "not run: needs admin"}  # for people, where the value is not enough

SKIP_PREFIX = {Verdict.UNIMPLEMENTED: "unimplemented: ", Verdict.NOT_APPLICABLE: "not-applicable: ",
               Verdict.NON_STRICT: "non-strict: ", Verdict.NEEDS_ADMIN: "needs-admin: "}


def label(verdict: str) -> str:
    """How people read a verdict (`needs-admin` → "not run: needs admin")."""
    return LABELS.get(verdict, verdict)  # a StrEnum member hashes as its value


def admin_hint(tests: int) -> str:
    """The console's line when `tests` tests were not run for want of `--broker-admin`."""
    return (f"not run: {plural(tests, 'test')} {'needs' if tests == 1 else 'need'} --broker-admin; rerun with "
            "--broker-admin http://user:pass@host:15672 (the management API) or --broker-admin rabbitmqctl "
            "(on the broker's machine)")


def unimplemented(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.UNIMPLEMENTED] + reason)


def not_applicable(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.NOT_APPLICABLE] + reason)


def non_strict(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.NON_STRICT] + reason)


def needs_admin(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.NEEDS_ADMIN] + reason)


class HarnessError(Exception):
    """The harness or its environment failed: the verdict is `broken`, not `failed`."""


def verdict_of_skip(reason: str) -> Verdict | None:
    for verdict, prefix in SKIP_PREFIX.items():
        if reason.startswith(prefix) or f"Skipped: {prefix}" in reason:
            return verdict
    return None
