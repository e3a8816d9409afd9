"""Verdicts (DESIGN.md decision 4) and the helpers tests use to reach the non-binary ones.

Rules: `passed` and `failed` come from the test outcome; a test reaches `unimplemented`
(capability not advertised, or the broker answered 540) by calling `unimplemented()`,
`non-strict` (allowed by the spec, differs from RabbitMQ) by calling `non_strict()`, and
`not-applicable` (the profile has no such behaviour) by `not_applicable()`. Harness or
environment failures (our exceptions, a wedged broker) are `broken`, never `failed`.
Replies are compared by code, class/method id and scope, never by text unless the rule is
about the text.
"""

from __future__ import annotations

import enum
from typing import NoReturn

import pytest


class Verdict(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NON_STRICT = "non-strict"
    UNIMPLEMENTED = "unimplemented"
    NOT_APPLICABLE = "not-applicable"
    BROKEN = "broken"


SKIP_PREFIX = {Verdict.UNIMPLEMENTED: "unimplemented: ", Verdict.NOT_APPLICABLE: "not-applicable: ",
               Verdict.NON_STRICT: "non-strict: "}


def unimplemented(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.UNIMPLEMENTED] + reason)


def not_applicable(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.NOT_APPLICABLE] + reason)


def non_strict(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.NON_STRICT] + reason)


class HarnessError(Exception):
    """The harness or its environment failed: the verdict is `broken`, not `failed`."""


def verdict_of_skip(reason: str) -> Verdict | None:
    for verdict, prefix in SKIP_PREFIX.items():
        if reason.startswith(prefix) or f"Skipped: {prefix}" in reason:
            return verdict
    return None
