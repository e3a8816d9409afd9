"""Verdicts (docs/design.md decision 4), their order, score and labels, and the exit statuses of a run.

The kernel every part shares (the pytest plugin, the client judge, the gate, the reports): no
pytest here. A suite test reaches a non-binary verdict through `conformance.plugin.verdicts`
(`unimplemented()`, `not_applicable()`, ...), which skips with the prefixes of `SKIP_PREFIX`;
`conformance.plugin.classify` reads them back with `verdict_of_skip`.
- The score counts `SCORED` only: a check that did not run (`needs-admin`, `needs-cluster`), does not apply
  (`not-applicable`) or could not be judged (`broken`) is left out of it.
- A rule's verdict is the worst of its tests' verdicts, in `WORST_FIRST` order: a rule is
  `passed` only when every applicable check of it ran and passed. A `failed` test counts as
  failed only under the rules its failure names (its `failed_rules`, docs/design.md decision 13);
  under its other rules it is `UNJUDGED` ("not judged": it stopped before their checks), which
  ranks below the verdicts of tests that ran and above `passed` (`RULE_WORST_FIRST`), and is
  left out of the score.
- Harness or environment failures (our exceptions, a wedged broker) are `broken`, never `failed`.
"""

from __future__ import annotations

import enum
from collections.abc import Collection

from conformance.results.wording import plural

# Exit statuses of a run (docs/design.md decision 8), for the plugin, the watchdog and the gate: 1 an
# unexpected `failed`, 2 a harness or environment error (a `broken` verdict), 3 the broker is
# unreachable or went down, 4 a usage error.
EXIT_OK, EXIT_FAILED, EXIT_HARNESS, EXIT_UNREACHABLE, EXIT_USAGE = 0, 1, 2, 3, 4
# how an exit 3 before the first test begins its one line (the broker refused the run's first
# connection: conformance.plugin.health.connect_failure; the grid tells it from a broker that went down)
UNREACHABLE_AT = "broker unreachable at "
AUTH_REFUSED_AT = "authentication refused by the broker at "


class Verdict(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NON_STRICT = "non-strict"
    UNIMPLEMENTED = "unimplemented"
    NEEDS_ADMIN = "needs-admin"
    NEEDS_CLUSTER = "needs-cluster"  # a cluster test without --cluster-node and --node-control
    NOT_APPLICABLE = "not-applicable"
    NOT_CLAIMED = "not-claimed"  # a RabbitMQ extension the broker does not claim (docs/design.md decision 11)
    BROKEN = "broken"


# what each exit status of a run means (docs/design.md decision 8), for `run`, its --help and the pytest route
STATUS_TEXT = {EXIT_OK: "no unexpected result", EXIT_FAILED: "unexpected failures",
               EXIT_HARNESS: "harness or environment error",
               EXIT_UNREACHABLE: "broker unreachable, down, or authentication refused", EXIT_USAGE: "usage error"}

# worst first: a rule's verdict is the first of these among its tests' verdicts
WORST_FIRST = (Verdict.FAILED, Verdict.BROKEN, Verdict.NON_STRICT, Verdict.UNIMPLEMENTED, Verdict.NEEDS_ADMIN,
               Verdict.NEEDS_CLUSTER, Verdict.PASSED, Verdict.NOT_APPLICABLE, Verdict.NOT_CLAIMED)
UNJUDGED = "unjudged"  # a rule of a failed test whose failure names other rules: neither passed nor failed
RULE_WORST_FIRST: tuple[str, ...] = (*(v.value for v in WORST_FIRST[:6]), UNJUDGED, *(v.value for v in WORST_FIRST[6:]))
SCORED = (Verdict.PASSED, Verdict.FAILED, Verdict.NON_STRICT, Verdict.UNIMPLEMENTED)  # score = passed / these
LABELS: dict[str, str] = {Verdict.NEEDS_ADMIN: "not run: needs admin", Verdict.NEEDS_CLUSTER: "not run: needs cluster",
                          UNJUDGED: "not judged"}  # for people, where the value is not enough

SKIP_PREFIX = {Verdict.UNIMPLEMENTED: "unimplemented: ", Verdict.NOT_APPLICABLE: "not-applicable: ",
               Verdict.NON_STRICT: "non-strict: ", Verdict.NEEDS_ADMIN: "needs-admin: ",
               Verdict.NEEDS_CLUSTER: "needs-cluster: ",
               Verdict.NOT_CLAIMED: "not-claimed: "}


def label(verdict: str) -> str:
    """How people read a verdict (`needs-admin` → "not run: needs admin")."""
    return LABELS.get(verdict, verdict)  # a StrEnum member hashes as its value


def admin_hint(tests: int) -> str:
    """The console's line when `tests` tests were not run for want of `--broker-admin`."""
    return (f"not run: {plural(tests, 'test')} {'needs' if tests == 1 else 'need'} --broker-admin; rerun with "
            "--broker-admin http://user:pass@host:15672 (the management API) or --broker-admin rabbitmqctl "
            "(on the broker's machine; the alarms area needs it: RabbitMQ's management API cannot raise a "
            "resource alarm)")


def cluster_hint(tests: int) -> str:
    """The console's line when `tests` tests were not run for want of a cluster."""
    return (f"not run: {plural(tests, 'test')} {'needs' if tests == 1 else 'need'} a cluster; rerun with "
            "--cluster-node amqp://… (each other node) and --node-control 'COMMAND {index} {action}' (stops or "
            "starts one node), or --cluster-node embedded against the embedded reference broker")


def closing_line(counts: dict[str, int], profile: str | None, status: int) -> str:
    """The last line of a run: how many tests, their verdicts, the profile and the exit status."""
    shown = ", ".join(f"{counts[v]} {label(v)}" for v in Verdict if counts.get(v))
    meaning = STATUS_TEXT.get(status, "see pytest's exit codes")
    return (f"amqp-conformance: {plural(sum(counts.values()), 'test')} ({shown or 'no verdicts'})"
            f"{f', profile {profile}' if profile else ''}; exit status {status}: {meaning}")


class HarnessError(Exception):
    """The harness or its environment failed: the verdict is `broken`, not `failed`."""


def verdict_of_skip(reason: str) -> Verdict | None:
    for verdict, prefix in SKIP_PREFIX.items():
        if reason.startswith(prefix) or f"Skipped: {prefix}" in reason:
            return verdict
    return None


def exit_status(*, usage_error: str | None = None, broker_down: str | None = None, harness_error: str | None = None,
                outcomes: Collection[str] = (), strict: bool = False, xpasses: bool = False) -> tuple[int, str | None]:
    """The one exit status of a run, and its reason when the tests' outcomes are not it.

    The highest-priority condition wins: 4 a usage error, then 3 the broker down (or unreachable,
    or refusing the credentials), then 2 a harness or environment error, or a test whose gate
    outcome is `broken`, then 1 a `failed` outcome (or, with `strict`, an XPASS), else 0.
    `outcomes` are the tests' gate outcomes (a verdict, or a baseline's "expected"/"xpass")."""
    if usage_error is not None:
        return EXIT_USAGE, usage_error
    if broker_down is not None:
        return EXIT_UNREACHABLE, broker_down
    if harness_error is not None:
        return EXIT_HARNESS, harness_error
    if Verdict.BROKEN in outcomes:
        return EXIT_HARNESS, None
    if Verdict.FAILED in outcomes or (strict and xpasses):
        return EXIT_FAILED, None
    return EXIT_OK, None
