"""Verdicts (docs/design.md decision 4) and the helpers tests use to reach the non-binary ones.

Rules: `passed` and `failed` come from the test outcome; a test reaches `unimplemented`
(capability not advertised, or the broker answered 540) by calling `unimplemented()`,
`non-strict` (allowed by the spec, differs from RabbitMQ) by calling `non_strict()`,
`not-applicable` (the profile has no such behaviour) by `not_applicable()`, `not-claimed`
(a RabbitMQ extension the broker does not claim) by `not_claimed()`, and
`needs-admin` (not run: the check needs `--broker-admin` and the run has none) by
`needs_admin()`, `needs-cluster` (not run: a cluster test and the run names no cluster) by
`needs_cluster()`. A test with nothing to assert under its profile's expectation calls
`judged_elsewhere()`: a variant that leaves the behaviour open (the spec does not say) is
`not-applicable` with the variant's text, so no profile leaves a test without a verdict. Harness
or environment failures (our exceptions, a wedged broker) are `broken`, never `failed`.
- A suite test never calls `pytest.skip` itself (tests/test_skips.py checks it): a skip without
  a verdict prefix is `broken` (plugin/classify.py).
- The verdicts themselves, their order, score and the exit statuses are the results kernel's
  (`conformance.results.verdicts`, no pytest there); this module is the pytest side.
Replies are compared by code, class/method id and scope, never by text unless the rule is
about the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import pytest

from conformance.catalogue.profiles import NOT_CLAIMED, Profile
from conformance.catalogue.rules import NOT_APPLICABLE, REQUIRED, VARIANT, rule
from conformance.results.verdicts import SKIP_PREFIX, HarnessError, Verdict


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


def needs_cluster(reason: str) -> NoReturn:
    pytest.skip(SKIP_PREFIX[Verdict.NEEDS_CLUSTER] + reason)


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
