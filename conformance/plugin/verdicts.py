"""Verdicts (DESIGN.md decision 4) and the helpers tests use to reach the non-binary ones.

Rules: `passed` and `failed` come from the test outcome; a test reaches `unimplemented`
(capability not advertised, or the broker answered 540) by calling `unimplemented()`,
`non-strict` (allowed by the spec, differs from RabbitMQ) by calling `non_strict()`,
`not-applicable` (the profile has no such behaviour) by `not_applicable()`, `not-claimed`
(a RabbitMQ extension the broker does not claim) by `not_claimed()`, and
`needs-admin` (not run: the check needs `--broker-admin` and the run has none) by
`needs_admin()`. A test with nothing to assert under its profile's expectation calls
`judged_elsewhere()`: a variant that leaves the behaviour open (the spec does not say) is
`not-applicable` with the variant's text, so no profile leaves a test without a verdict. Harness
or environment failures (our exceptions, a wedged broker) are `broken`, never `failed`.
- A suite test never calls `pytest.skip` itself (tests/test_skips.py checks it): a skip without
  a verdict prefix is `broken` (plugin/classify.py).
- The score counts `SCORED` only: a check that did not run (`needs-admin`), does not apply
  (`not-applicable`) or could not be judged (`broken`) is left out of it.
- A rule's verdict is the worst of its tests' verdicts, in `WORST_FIRST` order: a rule is
  `passed` only when every applicable check of it ran and passed. A `failed` test counts as
  failed only under the rules its failure names (its `failed_rules`, DESIGN.md decision 13);
  under its other rules it is `UNJUDGED` ("not judged": it stopped before their checks), which
  ranks below the verdicts of tests that ran and above `passed` (`RULE_WORST_FIRST`), and is
  left out of the score.
Replies are compared by code, class/method id and scope, never by text unless the rule is
about the text.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import NoReturn

import pytest

from conformance.catalogue.profiles import NOT_CLAIMED, Profile
from conformance.catalogue.rules import NOT_APPLICABLE, REQUIRED, VARIANT, rule
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
    NOT_CLAIMED = "not-claimed"  # a RabbitMQ extension the broker does not claim (DESIGN.md decision 11)
    BROKEN = "broken"


# what each exit status of a run means (DESIGN.md decision 8), for `run`, its --help and the pytest route
STATUS_TEXT = {EXIT_OK: "no unexpected result", EXIT_FAILED: "unexpected failures",
               EXIT_HARNESS: "harness or environment error",
               EXIT_UNREACHABLE: "broker unreachable, down, or authentication refused", EXIT_USAGE: "usage error"}

# worst first: a rule's verdict is the first of these among its tests' verdicts
WORST_FIRST = (Verdict.FAILED, Verdict.BROKEN, Verdict.NON_STRICT, Verdict.UNIMPLEMENTED, Verdict.NEEDS_ADMIN,
               Verdict.PASSED, Verdict.NOT_APPLICABLE, Verdict.NOT_CLAIMED)
UNJUDGED = "unjudged"  # a rule of a failed test whose failure names other rules: neither passed nor failed
RULE_WORST_FIRST: tuple[str, ...] = (*(v.value for v in WORST_FIRST[:5]), UNJUDGED, *(v.value for v in WORST_FIRST[5:]))
SCORED = (Verdict.PASSED, Verdict.FAILED, Verdict.NON_STRICT, Verdict.UNIMPLEMENTED)  # score = passed / these
LABELS: dict[str, str] = {Verdict.NEEDS_ADMIN: "not run: needs admin", UNJUDGED: "not judged"}  # for people, where the value is not enough

SKIP_PREFIX = {Verdict.UNIMPLEMENTED: "unimplemented: ", Verdict.NOT_APPLICABLE: "not-applicable: ",
               Verdict.NON_STRICT: "non-strict: ", Verdict.NEEDS_ADMIN: "needs-admin: ",
               Verdict.NOT_CLAIMED: "not-claimed: "}


def label(verdict: str) -> str:
    """How people read a verdict (`needs-admin` → "not run: needs admin")."""
    return LABELS.get(verdict, verdict)  # a StrEnum member hashes as its value


def admin_hint(tests: int) -> str:
    """The console's line when `tests` tests were not run for want of `--broker-admin`."""
    return (f"not run: {plural(tests, 'test')} {'needs' if tests == 1 else 'need'} --broker-admin; rerun with "
            "--broker-admin http://user:pass@host:15672 (the management API) or --broker-admin rabbitmqctl "
            "(on the broker's machine)")


def closing_line(counts: dict[str, int], profile: str | None, status: int) -> str:
    """The last line of a run: how many tests, their verdicts, the profile and the exit status."""
    shown = ", ".join(f"{counts[v]} {label(v)}" for v in Verdict if counts.get(v))
    meaning = STATUS_TEXT.get(status, "see pytest's exit codes")
    return (f"amqp-conformance: {plural(sum(counts.values()), 'test')} ({shown or 'no verdicts'})"
            f"{f', profile {profile}' if profile else ''}; exit status {status}: {meaning}")


def unimplemented(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.UNIMPLEMENTED] + reason)


def not_applicable(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.NOT_APPLICABLE] + reason)


def not_claimed(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.NOT_CLAIMED] + reason)


def non_strict(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.NON_STRICT] + reason)


def needs_admin(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.NEEDS_ADMIN] + reason)


class HarnessError(Exception):
    """The harness or its environment failed: the verdict is `broken`, not `failed`."""


def judged_elsewhere(profile: Profile, rule_id: str) -> NoReturn:
    """Skip a test of `rule_id` that has nothing to assert on this profile, with the verdict its
    expectation gives: `not-applicable` (no such rule, or a variant that leaves the behaviour open,
    e.g. NET-02 on amqp-0-9-1: "the spec does not say which peer closes the socket"), `not-claimed`
    (an extension the broker does not claim). A `required` rule has something to assert: calling
    this for one is a bug in the test (`broken`)."""
    expected = profile.expect(rule_id)
    if expected == NOT_CLAIMED:
        not_claimed(f"{rule_id} is a RabbitMQ extension ({rule(rule_id).capability}) that "
                    f"{profile.server_properties.get('product') or 'the broker'} does not claim")
    if expected == REQUIRED:
        raise HarnessError(f"{rule_id} is required on {profile.name}: the test must judge it")
    reason = expected.removeprefix(VARIANT) if expected.startswith(VARIANT) else "the profile has no such rule"
    not_applicable(f"{rule_id} on {profile.name}: {reason}")


def verdict_of_skip(reason: str) -> Verdict | None:
    for verdict, prefix in SKIP_PREFIX.items():
        if reason.startswith(prefix) or f"Skipped: {prefix}" in reason:
            return verdict
    return None


def skip_unless_applies(profile: Profile, rule_ids: Sequence[str]) -> None:
    """Skip a test none of whose rules applies: `not-applicable` when the profile has none of
    them, `not-claimed` when the rest belong to RabbitMQ extensions the broker does not claim."""
    expectations = [profile.expect(r) for r in rule_ids]
    if all(e == NOT_APPLICABLE for e in expectations):
        not_applicable(f"{', '.join(rule_ids)} on {profile.name}")
    if all(e in (NOT_APPLICABLE, NOT_CLAIMED) for e in expectations):
        missing = sorted({str(rule(r).capability) for r, e in zip(rule_ids, expectations, strict=True)
                          if e == NOT_CLAIMED})
        product = profile.server_properties.get("product") or "the broker"
        not_claimed(f"{', '.join(rule_ids)} need {', '.join(missing)}, which {product} does not claim")
